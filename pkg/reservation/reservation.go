// Package reservation is how a request's reservation on one endpoint is
// asked for, as the decider and the edge must agree on it: the decider's
// admission walk reserves a decision on the first endpoint that can take
// it (and only there waits in the class's queue), and the edge reserves
// each further endpoint of that decision as it calls it (a fallback, a
// hedge), never waiting. Both key the reservation the same way, so a
// Reserve sent again for the same request and endpoint, by either, returns
// the reservation already granted instead of a second one.
package reservation

import (
	"strconv"
	"time"
)

// NoWait is the max_wait of a Reserve that must be answered at once,
// without a place in the class's queue (any negative max_wait; 0 would
// leave the wait to the class).
const NoWait = -time.Nanosecond

// Key is the idempotency key of a request's reservation on an endpoint:
// the request's own key (the edge's request id) and the endpoint's id.
func Key(requestKey, endpointID string) string {
	return requestKey + "|" + endpointID
}

// KeyAgain is the key of a reservation on an endpoint the request called
// already, whose first reservation was closed: attempt is the call's
// attempt number, so each call there gets a reservation of its own.
func KeyAgain(requestKey, endpointID string, attempt int32) string {
	return Key(requestKey, endpointID) + "|" + strconv.Itoa(int(attempt))
}
