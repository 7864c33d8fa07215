// Package sim replays a simulated day of traffic through the decider's own
// routing code, in virtual time, to measure what the routing rules together
// do to time to first token and cost.
//
// The decider's side is the production code, wired as the decider wires it:
// [routing.Router] decides every request (smart or routing-cost policy,
// exploration, prefix affinity and cache pricing, hedge plans),
// [observe.Observer] turns each call's report into TTFT statistics
// ([stats.Store]), each endpoint's outcomes ([outcomes.Tracker]),
// prompt-cache affinity and cool-downs ([cooldown.Tracker]), [probe.Prober] plans synthetic probes
// and [hedge.Budget] grants hedges. Every one of them reads the engine's
// clock, which jumps from one event to the next in a priority queue: nothing
// sleeps and nothing waits on a goroutine, so a day of 20,000 requests runs
// in about a second.
//
// The rest is modelled: the edge (the endpoints tried in the decider's
// order, the first attempt hedged as planned when the budget grants it, a
// failed attempt retried on the next endpoint, at most four calls, a
// 60-second first-token timeout, the loser of a hedge paid from the budget
// at its uncached input price) and the providers, from a [Profile] (TTFT by
// prompt size with spread and tail, prompt cache, capacity and 429s, 5xx,
// hangs, scheduled and random slow episodes, first tokens that grow with the
// calls in flight). Requests come from a [Traffic] description or a
// recorded trace. Every random draw is keyed by seed, session, turn and
// call, so the same inputs and seed give the same result, and every policy
// meets the same luck for the same call.
//
// The oracle policy routes with what the others estimate: each provider's
// true median first-token time now and its true cache (oracle.go); the
// table gives every policy's regret against it.
//
// Not modelled: tenant quotas and the rate-limit broker (the catalog has no
// limits), network and Report-stream batching delays, and the edge's own
// copy of cool-downs lagging the decider's.
package sim
