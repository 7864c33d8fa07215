package tests

import (
	"google.golang.org/grpc"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// deciderClient is a client of every service the decider serves, on one
// connection, so a test plays whichever caller it needs (an edge, a
// service, an operator) with its credential.
type deciderClient struct {
	switchboardv1.RouterServiceClient
	switchboardv1.EdgeServiceClient
	switchboardv1.OperatorServiceClient
}

func newDeciderClient(conn grpc.ClientConnInterface) deciderClient {
	return deciderClient{
		switchboardv1.NewRouterServiceClient(conn), switchboardv1.NewEdgeServiceClient(conn), switchboardv1.NewOperatorServiceClient(conn),
	}
}
