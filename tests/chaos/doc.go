// Package chaos is the chaos test: three etcd members (embedded, in this
// process, or processes of an etcd binary), three decider processes on
// them, two edge processes (one in front of the broker's owner, one in
// front of a replica that forwards to it) and the provider simulator,
// under steady load against tight tenants (50 requests a minute; 4
// requests in flight; large streams that are hedged on a small daily
// budget), while the owner is killed with SIGKILL, paused with SIGSTOP
// past its session and its membership lease, an etcd member is
// restarted, and valid credentials attack the decider's boundary.
//
// The result is judged from the providers' side: a tap in front of each
// simulated provider records every call's arrival and end (checked against
// the simulator's own counters), which gives the arrivals of every sliding
// window and the calls in flight at every moment; the hedge legs' cost is
// what the hedge endpoints were sent beyond the answers they served; every
// answered request must be listed by some replica's activity log.
// docs/chaos.md states each bound and why.
//
// TestChaosShort (tests/chaos_test.go) runs the short form in make test;
// tests/cmd/chaos (make chaos) the long one.
package chaos
