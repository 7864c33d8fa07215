package admission

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

func TestWaitFor(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	none := context.Background()
	within := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		max  *durationpb.Duration
		want time.Duration
	}{
		{"the class's wait, no deadline", none, nil, 0},
		{"asked, no deadline", none, durationpb.New(3 * time.Second), 3 * time.Second},
		{"no wait asked", within(time.Hour), NoWait, -1},
		{"the class's wait, capped by the deadline less the reply's margin", within(10 * time.Second), nil, 10*time.Second - maxReplyMargin},
		{"asked, within the deadline", within(10 * time.Second), durationpb.New(time.Second), time.Second},
		{"asked past the deadline", within(10 * time.Second), durationpb.New(time.Minute), 10*time.Second - maxReplyMargin},
		{"a short deadline keeps a quarter for the reply", within(400 * time.Millisecond), nil, 300 * time.Millisecond},
		{"a deadline passed", within(-time.Second), nil, -1},
	} {
		require.Equal(t, tt.want, waitFor(tt.ctx, tt.max, now), tt.name)
	}
}

func TestRefusalCode(t *testing.T) {
	for _, tt := range []struct {
		ref  broker.Refusal
		want string
	}{
		{broker.Refusal{Code: broker.CodeQueueFull, Reason: broker.ReasonRetryableCapacity}, broker.CodeQueueFull},
		{broker.Refusal{Reason: broker.ReasonNonRetryableRequest, Unit: broker.UnitInputTokens}, broker.CodeTooLarge},
		{broker.Refusal{Reason: broker.ReasonNonRetryablePolicy, Unit: broker.UnitRequests}, broker.CodeDailyQuota},
		{broker.Refusal{Reason: broker.ReasonNonRetryablePolicy, Unit: broker.UnitUSD}, broker.CodeSpendLimit},
		{broker.Refusal{Reason: broker.ReasonDeadline}, broker.CodeQueueDeadline},
		{broker.Refusal{Reason: broker.ReasonRetryableOverload, BucketID: "pause:a/m"}, broker.CodeProviderPaused},
		{broker.Refusal{Reason: broker.ReasonRetryableCapacity, BucketID: "pause:a/m"}, broker.CodeProviderPaused},
		{broker.Refusal{Reason: broker.ReasonRetryableCapacity, BucketID: "tenant:t:requests:ramp", Unit: broker.UnitRequests}, broker.CodeRamp},
		{broker.Refusal{Reason: broker.ReasonRetryableCapacity, Unit: broker.UnitConcurrentRequests}, broker.CodeConcurrency},
		{broker.Refusal{Reason: broker.ReasonRetryableCapacity, Unit: broker.UnitUSD}, broker.CodeSpendLimit},
		{broker.Refusal{Reason: broker.ReasonRetryableCapacity, Unit: broker.UnitInputTokens}, broker.CodeRateLimit},
	} {
		require.Equal(t, tt.want, RefusalCode(&tt.ref), "%+v", tt.ref)
	}
	p := RefusalProto(&broker.Refusal{Reason: broker.ReasonRetryableCapacity, Unit: broker.UnitConcurrentRequests, FallbackModel: "m"})
	require.Equal(t, broker.CodeConcurrency, p.GetCode())
	require.Equal(t, "m", p.GetFallbackModel())
	require.Nil(t, QueueProto(nil), "no queue decision for a request that did not wait")
	q := QueueProto(&broker.QueueDecision{ID: "q1", Class: broker.ClassBatch, Position: 2, Waited: 1500 * time.Millisecond})
	require.Equal(t, "q1", q.GetQueueId())
	require.Equal(t, 1500*time.Millisecond, q.GetWaited().AsDuration())
	require.Nil(t, q.GetEstimatedWait(), "no estimate unless the broker can enforce it")
}
