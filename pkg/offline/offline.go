// Package offline holds what an edge and the deciders must agree on about a
// call an edge served with no decider reachable, from the decision the
// decider last gave it for the same kind of request: how old that decision
// may be, and how a record of such a call is tied to it.
//
// The edge's request ids begin with the time they were made ("gen-", then
// the Unix time in milliseconds as 12 hex digits); a record of an offline
// call names the earlier request whose grant it carries, and a decider
// takes it only when its own id was made after that request and within
// MaxGrace of it. So an edge cannot stretch one decision over more than
// MaxGrace of calls, whatever its configuration says.
package offline

import (
	"strconv"
	"time"
)

// MaxGrace is the longest an edge may serve from a remembered decision,
// and the window a decider accepts offline records in.
const MaxGrace = time.Hour

// idPrefix begins every request id an edge makes.
const idPrefix = "gen-"

// IDTime is the time a request id of the edge's format was made, and
// whether id is of that format.
func IDTime(id string) (time.Time, bool) {
	const digits = 12
	if len(id) < len(idPrefix)+digits || id[:len(idPrefix)] != idPrefix {
		return time.Time{}, false
	}
	ms, err := strconv.ParseUint(id[len(idPrefix):len(idPrefix)+digits], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)), true
}

// Within reports whether a record with id recordID may carry the grant of
// the decision for grantID: both ids are of the edge's format, and
// recordID was made no earlier than grantID and at most MaxGrace after it.
func Within(grantID, recordID string) bool {
	g, ok := IDTime(grantID)
	if !ok || grantID == recordID {
		return false
	}
	r, ok := IDTime(recordID)
	if !ok {
		return false
	}
	d := r.Sub(g)
	return d >= 0 && d <= MaxGrace
}
