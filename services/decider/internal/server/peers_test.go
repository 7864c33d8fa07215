package server_test

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
)

// TestSharedObservationsCheckedThenLearned: what another replica shares
// is checked as an edge's reports are; a batch without a valid hello and a
// report that fails its checks are dropped, the rest learned from.
func TestSharedObservationsCheckedThenLearned(t *testing.T) {
	var mu sync.Mutex
	var learned []string
	f := start(t, func(d *server.Deps) {
		d.Peers.Learn = func(e *switchboardv1.EdgeHello, rs []*switchboardv1.CallReport) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				learned = append(learned, e.GetEdgeId()+"/"+r.GetRequestId())
			}
		}
		d.Peers.LearnTurn = func(tu session.Turn) {
			mu.Lock()
			defer mu.Unlock()
			learned = append(learned, "turn "+tu.Session+" "+tu.Endpoint+" "+tu.At.UTC().Format(time.RFC3339))
		}
	})
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	stream, err := f.client.ShareObservations(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ShareObservationsRequest{ReplicaId: "r2", Batches: []*switchboardv1.ObservedBatch{
		{Edge: &switchboardv1.EdgeHello{EdgeId: "e1"}, Reports: []*switchboardv1.CallReport{
			{RequestId: "ok-1"}, {RequestId: strings.Repeat("x", 10_000)}, {RequestId: "ok-2"},
		}},
		{Reports: []*switchboardv1.CallReport{{RequestId: "no-edge"}}},
	}, SessionTurns: []*switchboardv1.SessionTurn{
		{TenantId: "acme", Model: model, SessionId: "conv-1", RequestId: "ok-1", EndpointId: "alpha/" + model, DecideTime: timestamppb.New(at)},
		{TenantId: "acme", Model: model, RequestId: "no-session", DecideTime: timestamppb.New(at)},
	}}))
	resp, err := stream.CloseAndRecv()
	require.NoError(t, err)
	require.Equal(t, int64(2), resp.GetBatches(), "one batch and one turn taken")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"e1/ok-1", "e1/ok-2", "turn conv-1 alpha/" + model + " 2026-12-01T10:00:00Z"}, learned)
}

// TestActivityNamesTheReplicasNotRead: a replica that holds a log but is
// not live, and one whose membership still stands but that does not answer
// (crashed before its lease ended), are named in the listing, and a record
// not in the logs read is UNAVAILABLE, not NOT_FOUND.
func TestActivityNamesTheReplicasNotRead(t *testing.T) {
	dead := deadAddr(t)
	f := start(t, func(d *server.Deps) {
		d.Peers = server.Peers{
			Logs: func() []string { return []string{"crashed", "gone"} },
			Live: func() (map[string]string, <-chan struct{}) { return map[string]string{"crashed": dead}, nil },
			Conn: func(addr string) (*grpc.ClientConn, error) {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err == nil {
					t.Cleanup(func() { _ = conn.Close() })
				}
				return conn, err
			},
		}
	})
	list, err := f.client.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{Identity: key(acmeKey)})
	require.NoError(t, err)
	require.Equal(t, []string{"crashed", "gone"}, list.GetMissingReplicas())
	_, err = f.client.GetActivity(t.Context(), &switchboardv1.GetActivityRequest{Identity: key(acmeKey), Id: "nope"})
	requireCode(t, codes.Unavailable, err, "a record perhaps in the log not read")
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
