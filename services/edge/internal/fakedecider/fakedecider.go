// Package fakedecider is a real gRPC DeciderService on loopback whose answers
// a test sets, recording every Decide call and everything an edge sends on
// the Report stream. It exists for the edge's tests only.
package fakedecider

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

var _ switchboardv1.DeciderServiceServer = (*Decider)(nil)

// Decider implements switchboardv1.DeciderServiceServer with programmable
// answers.
type Decider struct {
	switchboardv1.UnimplementedDeciderServiceServer

	mu         sync.Mutex
	decide     func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error)
	listModels func(*switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error)
	decideReqs []*switchboardv1.DecideRequest
	received   []*switchboardv1.ReportRequest
	streams    int
	commands   chan *switchboardv1.ReportResponse
}

// Server runs a Decider on 127.0.0.1.
type Server struct {
	*Decider
	t    testing.TB
	addr string

	mu  sync.Mutex
	srv *grpc.Server
}

// Start serves a new Decider on a free loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	d := &Decider{
		commands: make(chan *switchboardv1.ReportResponse, 16),
	}
	s := &Server{Decider: d, t: t, addr: "127.0.0.1:0"}
	s.serve()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve() {
	s.t.Helper()
	var lis net.Listener
	var err error
	// The port of a just-stopped server can take a moment to be free again.
	for range 50 {
		if lis, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("fake decider listen: %v", err)
	}
	s.addr = lis.Addr().String()
	srv := grpc.NewServer()
	switchboardv1.RegisterDeciderServiceServer(srv, s.Decider)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
}

// Addr is the server's host:port, stable across Restart.
func (s *Server) Addr() string { return s.addr }

// Stop stops the server, cutting open streams.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Restart stops the server and serves again on the same address, as a
// decider restart would look to an edge.
func (s *Server) Restart() {
	s.Stop()
	s.serve()
}

// SetDecide sets the Decide answer.
func (d *Decider) SetDecide(f func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.decide = f
}

// SetListModels sets the ListModels answer.
func (d *Decider) SetListModels(f func(*switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.listModels = f
}

// DecideRequests returns the Decide requests received so far.
func (d *Decider) DecideRequests() []*switchboardv1.DecideRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.DecideRequest(nil), d.decideReqs...)
}

// Received returns every Report message received so far, across streams.
func (d *Decider) Received() []*switchboardv1.ReportRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.ReportRequest(nil), d.received...)
}

// Streams returns how many Report streams were opened so far.
func (d *Decider) Streams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streams
}

// CallReports returns every CallReport received so far, in order.
func (d *Decider) CallReports() []*switchboardv1.CallReport {
	var out []*switchboardv1.CallReport
	for _, m := range d.Received() {
		out = append(out, m.GetBatch().GetReports()...)
	}
	return out
}

// Send queues a command for the next open Report stream.
func (d *Decider) Send(cmd *switchboardv1.ReportResponse) {
	d.commands <- cmd
}

// Decide implements [switchboardv1.DeciderServiceServer.Decide].
func (d *Decider) Decide(_ context.Context, req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
	d.mu.Lock()
	d.decideReqs = append(d.decideReqs, proto.Clone(req).(*switchboardv1.DecideRequest))
	f := d.decide
	d.mu.Unlock()
	if f == nil {
		return nil, status.Error(codes.FailedPrecondition, "no endpoint configured")
	}
	return f(req)
}

// ListModels implements [switchboardv1.DeciderServiceServer.ListModels].
func (d *Decider) ListModels(_ context.Context, req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
	d.mu.Lock()
	f := d.listModels
	d.mu.Unlock()
	if f == nil {
		return &switchboardv1.ListModelsResponse{}, nil
	}
	return f(req)
}

// Report implements [switchboardv1.DeciderServiceServer.Report]: it records
// what the edge sends and forwards queued commands.
func (d *Decider) Report(stream grpc.BidiStreamingServer[switchboardv1.ReportRequest, switchboardv1.ReportResponse]) error {
	d.mu.Lock()
	d.streams++
	d.mu.Unlock()
	ctx, cancel := context.WithCancel(stream.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case cmd := <-d.commands:
				if err := stream.Send(cmd); err != nil {
					return
				}
			}
		}
	})
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		d.mu.Lock()
		d.received = append(d.received, msg)
		d.mu.Unlock()
	}
}
