package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// maxSnapshotGrowth is the most one call may add to the broker's snapshot:
// one reservation whose ids and names are at their limits (package
// validate), with room to spare. Past it, callers could grow the snapshot
// beyond etcd's request limit in a handful of calls.
const maxSnapshotGrowth = 4 << 10

// maxBlowUp bounds what one string field is grown to (see grow).
const maxBlowUp = 1 << 20

// fuzzRPCs are the calls the fuzzer makes, each with an empty request its
// input is decoded into.
var fuzzRPCs = []struct {
	name string
	req  func() proto.Message
	call func(context.Context, switchboardv1.DeciderClient, proto.Message) error
}{
	{"Decide", func() proto.Message { return &switchboardv1.DecideRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.Decide(ctx, m.(*switchboardv1.DecideRequest))
		return err
	}},
	{"Reserve", func() proto.Message { return &switchboardv1.ReserveRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.Reserve(ctx, m.(*switchboardv1.ReserveRequest))
		return err
	}},
	{"Reconcile", func() proto.Message { return &switchboardv1.ReconcileRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.Reconcile(ctx, m.(*switchboardv1.ReconcileRequest))
		return err
	}},
	{"KeepReservations", func() proto.Message { return &switchboardv1.KeepReservationsRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.KeepReservations(ctx, m.(*switchboardv1.KeepReservationsRequest))
		return err
	}},
	{"AcquireHedge", func() proto.Message { return &switchboardv1.AcquireHedgeRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.AcquireHedge(ctx, m.(*switchboardv1.AcquireHedgeRequest))
		return err
	}},
	{"SettleHedge", func() proto.Message { return &switchboardv1.SettleHedgeRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.SettleHedge(ctx, m.(*switchboardv1.SettleHedgeRequest))
		return err
	}},
	{"ListActivity", func() proto.Message { return &switchboardv1.ListActivityRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.ListActivity(ctx, m.(*switchboardv1.ListActivityRequest))
		return err
	}},
	{"GetActivity", func() proto.Message { return &switchboardv1.GetActivityRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.GetActivity(ctx, m.(*switchboardv1.GetActivityRequest))
		return err
	}},
	{"ListModels", func() proto.Message { return &switchboardv1.ListModelsRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.ListModels(ctx, m.(*switchboardv1.ListModelsRequest))
		return err
	}},
	{"ReportCall", func() proto.Message { return &switchboardv1.ReportCallRequest{} }, func(ctx context.Context, c switchboardv1.DeciderClient, m proto.Message) error {
		_, err := c.ReportCall(ctx, m.(*switchboardv1.ReportCallRequest))
		return err
	}},
}

// grow repeats the target-th string the message holds (in the order of its
// fields, depth first) n times, at most maxBlowUp bytes, so small fuzz
// inputs reach the length limits one field at a time (growing them all
// would name an endpoint no catalog has, and be refused for that alone).
func grow(m protoreflect.Message, n int, target *int) {
	one := func(s string) string {
		*target--
		if *target == -1 {
			return repeat(s, n)
		}
		return s
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			l := v.List()
			for i := range l.Len() {
				l.Set(i, protoreflect.ValueOfString(one(l.Get(i).String())))
			}
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := range l.Len() {
				grow(l.Get(i).Message(), n, target)
			}
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(one(v.String())))
		case fd.Kind() == protoreflect.MessageKind:
			grow(v.Message(), n, target)
		}
		return *target >= 0
	})
}

func repeat(s string, n int) string {
	if s == "" || n <= 1 {
		return s
	}
	return strings.Repeat(s, min(n, maxBlowUp/len(s)+1))
}

// FuzzRPCs calls every unary RPC of the decider, in process and as a
// caller of every tenant, with a request decoded from the input (its first
// byte picks the RPC, its second how many times one string is repeated, its
// third which string):
// no call panics, none adds more than maxSnapshotGrowth to the broker's
// snapshot, the snapshot restores into a new broker, and the hedge
// budget's state still encodes.
func FuzzRPCs(f *testing.F) {
	valid := []proto.Message{
		&switchboardv1.DecideRequest{Identity: key(acmeKey), Model: model, Reserve: true, IdempotencyKey: "k",
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, CachedInputTokens: 50, MaxOutputTokens: 10}},
		&switchboardv1.ReserveRequest{RequestId: "r1", IdempotencyKey: "k1", Identity: &switchboardv1.Identity{TenantId: "acme", App: "app"},
			Model: model, EndpointId: "alpha/" + model, Demand: &switchboardv1.Demand{InputTokens: 10, OutputTokens: 10, Requests: 1, Usd: 0.01},
			Ttl: durationpb.New(time.Minute), Attempt: 1},
		&switchboardv1.ReconcileRequest{ReservationId: "res", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
			Usage: &switchboardv1.Usage{InputTokens: 10, CachedInputTokens: 5, CostUsd: 0.1}, Failure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY,
			RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "5"}}},
		&switchboardv1.KeepReservationsRequest{ReservationIds: []string{"a", "b"}},
		&switchboardv1.AcquireHedgeRequest{RequestId: "h", EndpointId: "alpha/" + model, EstimatedCostUsd: 0.5},
		&switchboardv1.SettleHedgeRequest{Settlements: []*switchboardv1.HedgeSettlement{{RequestId: "h", LoserCostUsd: 0.1}}},
		&switchboardv1.ListActivityRequest{Identity: key(acmeKey), Model: model, Limit: 5},
		&switchboardv1.GetActivityRequest{Identity: key(acmeKey), Id: "gen-1"},
		&switchboardv1.ListModelsRequest{Identity: key(acmeKey)},
		&switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "gen-2", TenantId: "acme", Model: model, EndpointId: "alpha/" + model,
			Status: switchboardv1.CallStatus_CALL_STATUS_OK, Attempts: []*switchboardv1.Attempt{{EndpointId: "alpha/" + model, Outcome: switchboardv1.Outcome_OUTCOME_OK,
				Ttft: durationpb.New(time.Second), StartTime: timestamppb.Now()}}, Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 5}},
			Reconciles: []*switchboardv1.ReconcileRequest{{ReservationId: "res", Outcome: switchboardv1.Outcome_OUTCOME_OK}}, PromptTokens: 10,
			Prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 10}}},
	}
	for i, m := range valid {
		data, err := proto.Marshal(m)
		require.NoError(f, err)
		f.Add(append([]byte{byte(i), 1, 0}, data...))
		for field := range 3 {
			f.Add(append([]byte{byte(i), 255, byte(field)}, data...))
		}
	}
	fx := start(f)
	c, err := catalog.Parse([]byte(testCatalog))
	require.NoError(f, err)
	bcfg, err := broker.FromCatalog(c)
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		rpc := fuzzRPCs[int(data[0])%len(fuzzRPCs)]
		req := rpc.req()
		if proto.Unmarshal(data[3:], req) != nil {
			return
		}
		target := int(data[2])
		grow(req.ProtoReflect(), int(data[1])*int(data[1]), &target)
		before := len(fx.broker.Snapshot())
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_ = rpc.call(ctx, fx.client, req)

		snap := fx.broker.Snapshot()
		require.LessOrEqual(t, len(snap)-before, maxSnapshotGrowth, "%s grew the broker's snapshot by %d bytes", rpc.name, len(snap)-before)
		fresh, err := broker.New(bcfg, broker.Options{})
		require.NoError(t, err)
		require.NoError(t, fresh.Restore(snap, time.Now()), "the snapshot after %s restores", rpc.name)
		budget, _ := fx.budget.Snapshot()
		require.NotEmpty(t, budget, "the hedge budget's state after %s encodes", rpc.name)
	})
}
