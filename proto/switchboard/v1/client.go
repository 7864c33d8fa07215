package switchboardv1

import "google.golang.org/grpc"

// DeciderClient is a client of every service the decider serves, on one
// connection: a caller that plays several roles (an operator's tool, a
// test) calls Decide, Report, the experiment RPCs and the replicas'
// forwarding alike on it. Which calls succeed is the caller's credential's
// to say.
type DeciderClient struct {
	RouterServiceClient
	EdgeServiceClient
	OperatorServiceClient
	ReplicaServiceClient
}

// NewDeciderClient returns a client of every service of the decider on cc.
func NewDeciderClient(cc grpc.ClientConnInterface) DeciderClient {
	return DeciderClient{NewRouterServiceClient(cc), NewEdgeServiceClient(cc), NewOperatorServiceClient(cc), NewReplicaServiceClient(cc)}
}
