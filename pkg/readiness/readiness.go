// Package readiness names the grpc.health.v1 services the decider reports
// and the edge's readiness asks, so both sides agree on them. It imports
// nothing.
package readiness

// AdmissionService is the grpc.health.v1 service name under which the
// decider reports whether it can admit requests now (reserve capacity):
// NOT_SERVING while etcd is out of reach, no rate-limit broker owner is
// known for longer than the election session's TTL, or the owner cannot
// save its state. It is named after RouterService, whose Reserve it
// answers for. The decider's own service names (and "") say only that it
// is up with its catalog, so probes of the decider do not take every
// replica out at once during an etcd outage; the edge's readiness asks both.
const AdmissionService = "switchboard.v1.RouterService/admission"
