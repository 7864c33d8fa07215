// Package proto is the root of Switchboard's API module. The importable client
// package is github.com/switchboard-ai/switchboard/proto/switchboard/v1: it
// holds the generated messages and the client and server stubs of the
// decider's services, one per audience: RouterService (clients and services:
// router.proto), EdgeService (edges: edge.proto) and OperatorService
// (operators: operator.proto), with the messages they share in common.proto.
// It depends on nothing but google.golang.org/grpc and google.golang.org/protobuf.
package proto
