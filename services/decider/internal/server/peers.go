package server

// What replicas share through the ReplicaService besides forwarded
// admission: the observations each takes from its edges
// (ShareObservations), and their activity logs, which a replica answering
// ListActivity or GetActivity reads as well as its own (fanned out to
// every replica that holds a log, ForwardListActivity and
// ForwardGetActivity, each answering from its own log only).

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// DefaultPeerTimeout bounds how long a replica waits for another's
// activity log before it answers without it, naming it. It never waits
// past three quarters of what its caller's deadline leaves, so the answer
// naming the replica reaches the caller in time.
const DefaultPeerTimeout = time.Second

// Peers is how this replica reaches the other replicas (Deps.Peers).
type Peers struct {
	// Logs returns the ids of the other replicas that hold an activity
	// log, live or not. (Required)
	Logs func() []string
	// Live returns the other live replicas, id → address. (Required)
	Live func() (map[string]string, <-chan struct{})
	// Conn returns the connection to the replica at addr. (Required)
	Conn func(addr string) (*grpc.ClientConn, error)
	// Learn learns from the call reports another replica shares, as if
	// this replica's own edge had sent them (observe.Observer.IngestShared).
	// (Required)
	Learn func(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport)
	// LearnTurn notes a conversation's turn another replica decided
	// (session.Table.KeepShared). (Optional) Without it turns are ignored.
	LearnTurn func(session.Turn)
	// State sends what this replica learned to a replica that starts, one
	// message at a time (transfer.Serve). (Optional) Without it
	// TransferState is UNIMPLEMENTED.
	State func(ctx context.Context, send func(*switchboardv1.TransferStateResponse) error) error
	// Timeout bounds the wait for another replica's log. (Optional)
	// Defaults to DefaultPeerTimeout.
	Timeout time.Duration
	// Logger logs peers that did not answer. (Optional) Defaults to none.
	Logger *slog.Logger
}

// ShareObservations implements [switchboardv1.ReplicaServiceServer.ShareObservations].
// Only a replica calls it (the role table); what it sends is checked as an
// edge's reports are, and a batch whose hello fails, a report or a turn
// that fails its checks is dropped, the rest learned from. The answer
// counts the batches and turns taken.
func (s *Server) ShareObservations(stream grpc.ClientStreamingServer[switchboardv1.ShareObservationsRequest, switchboardv1.ShareObservationsResponse]) error {
	if s.peers.Learn == nil {
		return status.Error(codes.Unimplemented, "this replica shares no observations")
	}
	var took int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&switchboardv1.ShareObservationsResponse{Batches: took})
		}
		if err != nil {
			return err
		}
		for _, b := range msg.GetBatches() {
			if validate.EdgeHello(b.GetEdge()) != nil {
				continue
			}
			reports := slices.DeleteFunc(b.GetReports(), func(r *switchboardv1.CallReport) bool { return validate.CallReport(r) != nil })
			s.peers.Learn(b.GetEdge(), reports)
			took++
		}
		for _, tu := range msg.GetSessionTurns() {
			if s.peers.LearnTurn == nil || validate.SessionTurn(tu) != nil {
				continue
			}
			s.peers.LearnTurn(session.Turn{Tenant: tu.GetTenantId(), Model: tu.GetModel(), Session: tu.GetSessionId(),
				RequestID: tu.GetRequestId(), Endpoint: tu.GetEndpointId(), At: tu.GetDecideTime().AsTime()})
			took++
		}
	}
}

// TransferState implements [switchboardv1.ReplicaServiceServer.TransferState].
// Only a replica calls it (the role table), a replica that starts.
func (s *Server) TransferState(req *switchboardv1.TransferStateRequest, stream grpc.ServerStreamingServer[switchboardv1.TransferStateResponse]) error {
	if s.peers.State == nil {
		return status.Error(codes.Unimplemented, "this replica transfers no state")
	}
	if err := validate.ID("replica_id", req.GetReplicaId()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.peers.State(stream.Context(), stream.Send); err != nil {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
		return status.FromContextError(err).Err()
	}
	if s.peers.Logger != nil {
		s.peers.Logger.Info("state transferred to a starting replica", "replica", req.GetReplicaId())
	}
	return nil
}

// ForwardListActivity implements [switchboardv1.ReplicaServiceServer.ForwardListActivity]:
// this replica's own log only.
func (s *Server) ForwardListActivity(ctx context.Context, req *switchboardv1.ForwardListActivityRequest) (*switchboardv1.ForwardListActivityResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.RouterService_ListActivity_FullMethodName, req.GetRequest(), s.listOwn)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardListActivityResponse{Response: resp}, nil
}

// ForwardGetActivity implements [switchboardv1.ReplicaServiceServer.ForwardGetActivity]:
// this replica's own log only.
func (s *Server) ForwardGetActivity(ctx context.Context, req *switchboardv1.ForwardGetActivityRequest) (*switchboardv1.ForwardGetActivityResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.RouterService_GetActivity_FullMethodName, req.GetRequest(), s.getOwn)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardGetActivityResponse{Response: resp}, nil
}

// peerAnswer is one other replica's answer, or why there is none.
type peerAnswer[T any] struct {
	id   string
	resp T
	err  error
}

// askPeers calls ask on every other replica holding a log, each within the
// peer timeout, for the caller of ctx, and returns their answers: a
// replica not live answers errPeerGone.
func askPeers[T any](ctx context.Context, s *Server, ask func(context.Context, switchboardv1.ReplicaServiceClient) (T, error)) []peerAnswer[T] {
	if s.peers.Logs == nil {
		return nil
	}
	ids := s.peers.Logs()
	live, _ := s.peers.Live()
	timeout := s.peers.Timeout
	if timeout <= 0 {
		timeout = DefaultPeerTimeout
	}
	out := make([]peerAnswer[T], len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		out[i].id = id
		addr, ok := live[id]
		if !ok {
			out[i].err = errPeerGone
			continue
		}
		wg.Go(func() {
			conn, err := s.peers.Conn(addr)
			if err != nil {
				out[i].err = err
				return
			}
			wait := timeout
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(dl)*3/4)
			}
			pctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			out[i].resp, out[i].err = ask(pctx, switchboardv1.NewReplicaServiceClient(conn))
		})
	}
	wg.Wait()
	for _, a := range out {
		if a.err != nil && s.peers.Logger != nil {
			s.peers.Logger.Warn("a replica's activity log not read", "replica", a.id, "err", a.err)
		}
	}
	return out
}

// errPeerGone is the answer of a replica that holds a log but is not live.
var errPeerGone = errors.New("the replica is not live")

// listPeers adds the other replicas' pages of the listing req asks for to
// own, this replica's page, merged as one log's (activity.Merge), naming
// the replicas that did not answer.
func (s *Server) listPeers(ctx context.Context, req *switchboardv1.ListActivityRequest, own *switchboardv1.ListActivityResponse) *switchboardv1.ListActivityResponse {
	answers := askPeers(ctx, s, func(ctx context.Context, c switchboardv1.ReplicaServiceClient) (*switchboardv1.ListActivityResponse, error) {
		resp, err := c.ForwardListActivity(ctx, &switchboardv1.ForwardListActivityRequest{CallerId: auth.CallerID(ctx), Request: req})
		return resp.GetResponse(), err
	})
	if len(answers) == 0 {
		return own
	}
	pages := []activity.Page{{Records: own.GetRecords(), More: own.GetNextCursor() != ""}}
	var missing []string
	for _, a := range answers {
		if a.err != nil {
			missing = append(missing, a.id)
			continue
		}
		pages = append(pages, activity.Page{Records: a.resp.GetRecords(), More: a.resp.GetNextCursor() != ""})
	}
	recs, next := activity.Merge(pages, activity.PageLimit(int(req.GetLimit())))
	return &switchboardv1.ListActivityResponse{Records: recs, NextCursor: next, MissingReplicas: missing}
}

// getPeers looks for the record req names in the other replicas' logs,
// once this replica's has none: NotFound only when every log answered.
func (s *Server) getPeers(ctx context.Context, req *switchboardv1.GetActivityRequest) (*switchboardv1.GetActivityResponse, error) {
	answers := askPeers(ctx, s, func(ctx context.Context, c switchboardv1.ReplicaServiceClient) (*switchboardv1.GetActivityResponse, error) {
		resp, err := c.ForwardGetActivity(ctx, &switchboardv1.ForwardGetActivityRequest{CallerId: auth.CallerID(ctx), Request: req})
		return resp.GetResponse(), err
	})
	var missing []string
	for _, a := range answers {
		switch {
		case a.err == nil && a.resp.GetRecord() != nil:
			return a.resp, nil
		case a.err != nil && status.Code(a.err) != codes.NotFound:
			missing = append(missing, a.id)
		}
	}
	if len(missing) > 0 {
		return nil, status.Errorf(codes.Unavailable, "no generation %q in the activity logs read; the logs of replicas %v did not answer", req.GetId(), missing)
	}
	return nil, status.Errorf(codes.NotFound, "no generation %q", req.GetId())
}
