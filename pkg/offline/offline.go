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
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"time"
)

// MaxGrace is the longest an edge may serve from a remembered decision,
// and the window a decider accepts offline records in.
const MaxGrace = time.Hour

// idPrefix begins every request id an edge makes.
const idPrefix = "gen-"

// RequestID is an edge's request id made at t: "gen-", the time in
// milliseconds as 12 hex digits, then 16 random base32 characters (80
// bits). Ids made later sort after, so the decider's activity log, which
// indexes records by id, appends to its index rather than writing a random
// page of it per record; the random part keeps ids unguessable and unique.
// IDTime reads the time back.
func RequestID(t time.Time) string {
	var b [4 + 12 + 16]byte
	copy(b[:], idPrefix)
	ms := uint64(t.UnixMilli()) & (1<<48 - 1)
	for i := 15; i >= 4; i-- {
		b[i] = hexDigits[ms&0xf]
		ms >>= 4
	}
	// Ten random bytes are sixteen base32 characters, 80 bits.
	var rnd [10]byte
	_, _ = rand.Read(rnd[:])
	idBase32.Encode(b[16:], rnd[:])
	return string(b[:])
}

const hexDigits = "0123456789abcdef"

// idBase32 writes the random part of a request id: RFC 4648 base32 in
// lower case, without padding.
var idBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

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
