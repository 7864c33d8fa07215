package routing

import (
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// hedgePlan says whether a streaming long request gets a second endpoint:
// from HedgeFrom tokens after HedgeDelay without a first token, from
// HedgeImmediateFrom at once. The second endpoint must itself be fast
// enough for this size, and among those it is the cheapest for this request
// as the smart policy ranks it — cached input and, for a conversation under
// way, its next turns included — so the hedge does not land on an endpoint
// that turns cheap cache reads into expensive ones. Hedging follows
// the smart policy only: a user's explicit order or sort is not second-guessed.
func (r *Router) hedgePlan(req *switchboardv1.DecideRequest, in int64, usable []*candidate) *switchboardv1.HedgePlan {
	none := &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	if !req.GetStream() || r.o.HedgeFrom < 0 || in < r.o.HedgeFrom || len(usable) < 2 || !usable[0].qualified && usable[0].note != noteExplored {
		return none
	}
	var target *candidate
	for _, c := range usable[1:] {
		// A routing-cost guard (over its cap, failing, flagged) rules an
		// endpoint out as a hedge as it does as a first choice.
		if c.qualified && c.allowed && !c.cooling && c.guard == guardNone && (target == nil || c.value < target.value) {
			target = c
		}
	}
	if target == nil {
		return none
	}
	if in >= r.o.HedgeImmediateFrom {
		return &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: priced(target)}
	}
	return &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, Delay: durationpb.New(r.o.HedgeDelay), Endpoint: priced(target)}
}
