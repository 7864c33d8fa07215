package transfer_test

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
)

// peer is a replica's TransferState over bufconn: transfer.Serve of its
// tables, or the messages script sends when set.
type peer struct {
	switchboardv1.UnimplementedReplicaServiceServer
	tables transfer.Tables
	script func(ctx context.Context, send func(*switchboardv1.TransferStateResponse) error) error
}

func (p *peer) TransferState(_ *switchboardv1.TransferStateRequest, stream grpc.ServerStreamingServer[switchboardv1.TransferStateResponse]) error {
	if p.script != nil {
		return p.script(stream.Context(), stream.Send)
	}
	return transfer.Serve(stream.Context(), p.tables, stream.Send)
}

func dial(t testing.TB, p *peer) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	switchboardv1.RegisterReplicaServiceServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newTables(now time.Time) transfer.Tables {
	return transfer.Tables{Affinity: affinity.New(affinity.Options{}), Sessions: session.New(session.Options{}),
		Cooldowns: cooldown.New(cooldown.FirstRefusal), Outcomes: outcomes.New(outcomes.Config{Now: func() time.Time { return now }}),
		Now: func() time.Time { return now }}
}

// TestFetchTakesWhatThePeerLearned: what one replica's tables hold, the
// other's hold after a Fetch, answering alike; more entries than one
// message holds arrive whole.
func TestFetchTakesWhatThePeerLearned(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	src := newTables(now)
	for h := uint64(1); h <= transfer.ChunkEntries+10; h++ {
		src.Affinity.Served("alpha/m", h, 1000, nil, now.Add(-time.Minute))
	}
	src.Affinity.Served("beta/m", 1, 1000, nil, now.Add(-30*time.Second))
	src.Sessions.Keep("acme", "m", "conv-1", "req-1", "beta/m", now.Add(-time.Minute))
	src.Cooldowns.Refused("gamma/m", now.Add(-time.Second))
	src.Outcomes.Observe("alpha/m", outcomes.Call{Kind: outcomes.KindRateLimited, RetryAfter: time.Minute}, outcomesPrice)

	dst := newTables(now)
	res, err := transfer.Fetch(t.Context(), dial(t, &peer{tables: src}), "b", dst, transfer.Limits{})
	require.NoError(t, err)
	require.Equal(t, transfer.ChunkEntries+10, res.Affinity)
	require.Equal(t, 1, res.Conversations)
	require.Equal(t, 1, res.Cooldowns)
	require.Equal(t, 1, res.Outcomes)
	require.Zero(t, res.Refused)

	pfx := []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 1000}}
	for name, tb := range map[string]transfer.Tables{"source": src, "taker": dst} {
		i, _, ok := tb.Affinity.Latest([]string{"alpha/m", "beta/m"}, pfx, now, 5*time.Minute)
		require.True(t, ok, name)
		require.Equal(t, 1, i, "%s: beta served prompt 1 last", name)
		ep, _, ok := tb.Sessions.Last("acme", "m", "conv-1")
		require.True(t, ok, name)
		require.Equal(t, "beta/m", ep, name)
		_, cooling := tb.Cooldowns.Until("gamma/m", now)
		require.True(t, cooling, name)
		f := tb.Outcomes.Endpoint("alpha/m").Read(now)
		require.InDelta(t, 1, f.RateLimited, 1e-9, name)
		require.Equal(t, now.Add(time.Minute), f.PausedUntil, name)
	}
	require.Equal(t, src.Affinity.Len(), dst.Affinity.Len())
}

var outcomesPrice = pricing.Price{Input: 1, Output: 1}

// TestFetchAppliesNothingWhenItFails: a transfer past its size bound, one
// that breaks off, or one past its time bound leaves the tables as they
// were; entries that fail their checks are dropped and counted.
func TestFetchAppliesNothingWhenItFails(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	good := &switchboardv1.TransferStateResponse{Conversations: []*switchboardv1.SessionTurn{
		{TenantId: "acme", Model: "m", SessionId: "conv-1", EndpointId: "alpha/m", DecideTime: timestamppb.New(now)}}}
	tests := []struct {
		name    string
		script  func(ctx context.Context, send func(*switchboardv1.TransferStateResponse) error) error
		limits  transfer.Limits
		wantErr bool
		refused int
	}{
		{name: "too large", limits: transfer.Limits{MaxBytes: 10}, wantErr: true,
			script: func(_ context.Context, send func(*switchboardv1.TransferStateResponse) error) error {
				return send(good)
			}},
		{name: "broken off", wantErr: true, script: func(_ context.Context, send func(*switchboardv1.TransferStateResponse) error) error {
			if err := send(good); err != nil {
				return err
			}
			return context.Canceled
		}},
		{name: "too slow", limits: transfer.Limits{Timeout: 50 * time.Millisecond}, wantErr: true,
			script: func(ctx context.Context, send func(*switchboardv1.TransferStateResponse) error) error {
				if err := send(good); err != nil {
					return err
				}
				<-ctx.Done() // a peer that hangs until its caller gives up
				return ctx.Err()
			}},
		{name: "bad entries dropped", refused: 5, script: func(_ context.Context, send func(*switchboardv1.TransferStateResponse) error) error {
			return send(&switchboardv1.TransferStateResponse{
				Conversations: append([]*switchboardv1.SessionTurn{{TenantId: "acme", SessionId: "no-endpoint", DecideTime: timestamppb.New(now)}}, good.GetConversations()...),
				Affinity:      []*switchboardv1.AffinityEntry{{Hash: 0, Served: []*switchboardv1.AffinityServed{{EndpointId: "a", Time: timestamppb.New(now)}}}},
				Cooldowns:     []*switchboardv1.CooldownEntry{{EndpointId: ""}},
				Outcomes: []*switchboardv1.OutcomeEntry{{EndpointId: "alpha/m", Time: timestamppb.New(now), Calls: math.NaN()},
					{EndpointId: "alpha/m", Time: timestamppb.New(now), Failed: -1}},
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := newTables(now)
			res, err := transfer.Fetch(t.Context(), dial(t, &peer{script: tt.script}), "b", dst, tt.limits)
			_, _, known := dst.Sessions.Last("acme", "m", "conv-1")
			if tt.wantErr {
				require.Error(t, err)
				require.False(t, known, "nothing applied")
				return
			}
			require.NoError(t, err)
			require.True(t, known, "the good entry applied")
			require.Equal(t, tt.refused, res.Refused)
			require.Equal(t, 1, res.Conversations)
			require.Zero(t, dst.Affinity.Len()+res.Cooldowns+res.Outcomes)
		})
	}
}
