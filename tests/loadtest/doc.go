// Package loadtest is the rate-limit load-test harness: it starts the whole
// default Switchboard on loopback (provider simulator, decider with its
// embedded etcd, edge), each in this process but speaking to the others
// only over real sockets, with a catalog of tenants and limits, and drives
// bounded scenarios through the edge's OpenAI-compatible HTTP API: bursts,
// long-context and max-output requests, streams the client leaves
// mid-way, a daily quota running out, provider 429 and 503 storms, and a
// noisy tenant competing with a production tenant.
//
// It checks the system from outside rather than trusting the broker: what
// each provider received comes from the simulator's own counters, what
// each tenant was admitted and charged from the activity log the decider
// keeps (and what its clients saw), and both are compared with the bound
// the configured limit allows over the scenario's span (capacity plus
// burst, plus the refill over the span). Anything above that bound is
// over-admission, which must be zero.
//
// The command tests/cmd/brokerload runs it (make bench); the end-to-end
// test TestBrokerLoadShort runs its short mode (make test). docs/loadtest.md
// describes the scenarios and the report.
package loadtest
