// Package proto is the root of Switchboard's API module. The importable client
// package is github.com/switchboard-ai/switchboard/proto/switchboard/v1: it
// holds the generated messages and the DeciderService client and server stubs,
// and depends on nothing but google.golang.org/grpc and google.golang.org/protobuf.
package proto
