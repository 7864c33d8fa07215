package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

// stubDecider answers Decide with decide and records each call's model
// and deadline; nothing else of the decider is used here.
type stubDecider struct {
	switchboardv1.RouterServiceClient
	decide func(model string) (*switchboardv1.DecideResponse, error)

	mu        sync.Mutex
	models    []string
	deadlines []time.Time
}

func (s *stubDecider) Decide(ctx context.Context, in *switchboardv1.DecideRequest, _ ...grpc.CallOption) (*switchboardv1.DecideResponse, error) {
	dl, _ := ctx.Deadline()
	s.mu.Lock()
	s.models, s.deadlines = append(s.models, in.GetModel()), append(s.deadlines, dl)
	s.mu.Unlock()
	return s.decide(in.GetModel())
}

const asked, cheaper = "org/big", "org/small"

func overloaded(model string) *switchboardv1.DecideResponse {
	return &switchboardv1.DecideResponse{Model: model,
		Identity: &switchboardv1.Identity{TenantId: "acme", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE},
		Refusal: &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Code: "queue_deadline",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS,
			RetryAfter: durationpb.New(time.Second), FallbackModel: cheaper},
		Queue: &switchboardv1.QueueDecision{QueueId: "q-1", Waited: durationpb.New(2 * time.Second)},
	}
}

func served(model string) *switchboardv1.DecideResponse {
	return &switchboardv1.DecideResponse{Model: model, Endpoint: &switchboardv1.Endpoint{Id: "a/" + model, Provider: "a"},
		Identity: &switchboardv1.Identity{TenantId: "acme", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE}}
}

func decideOnce(t *testing.T, d *stubDecider) (*httptest.ResponseRecorder, *switchboardv1.DecideResponse) {
	t.Helper()
	s := New(Options{Decider: d, DeciderTimeout: time.Second, QueueWait: time.Hour})
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	c := &chatRequest{keyHash: "h", identity: &switchboardv1.Identity{ApiKeySha256: "h"}, req: &chatreq.Request{Model: asked}}
	return w, s.decide(w, r, reqLog{ctx: context.Background(), log: slog.New(slog.DiscardHandler), id: "gen-1"}, "gen-1", c, false)
}

// TestDecideFallsBackOnce: a refusal naming the class's fallback model is
// served with that model, said in a header; a fallback that is refused
// too is answered as such, never followed further; one that cannot be
// routed leaves the first refusal standing.
func TestDecideFallsBackOnce(t *testing.T) {
	t.Run("served", func(t *testing.T) {
		d := &stubDecider{decide: func(m string) (*switchboardv1.DecideResponse, error) {
			if m == asked {
				return overloaded(m), nil
			}
			return served(m), nil
		}}
		w, resp := decideOnce(t, d)
		require.NotNil(t, resp)
		require.Equal(t, cheaper, resp.GetModel())
		require.Equal(t, []string{asked, cheaper}, d.models)
		require.Equal(t, cheaper, w.Header().Get(HeaderFallbackModel))
		require.Equal(t, "interactive", w.Header().Get(HeaderWorkloadClass))
		require.Empty(t, w.Header().Get(HeaderQueueID), "the fallback did not wait")
	})
	t.Run("refused again", func(t *testing.T) {
		d := &stubDecider{decide: func(m string) (*switchboardv1.DecideResponse, error) { return overloaded(m), nil }}
		w, resp := decideOnce(t, d)
		require.Nil(t, resp)
		require.Equal(t, []string{asked, cheaper}, d.models, "a fallback never falls back")
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Equal(t, cheaper, w.Header().Get(HeaderFallbackModel))
		require.Equal(t, "queue_deadline", w.Header().Get(HeaderReason))
		require.Equal(t, "q-1", w.Header().Get(HeaderQueueID))
		require.Equal(t, "2000", w.Header().Get(HeaderQueueWait))
	})
	t.Run("fallback not routable", func(t *testing.T) {
		d := &stubDecider{decide: func(m string) (*switchboardv1.DecideResponse, error) {
			if m == asked {
				return overloaded(m), nil
			}
			return nil, status.Error(codes.FailedPrecondition, "no endpoint of org/small meets provider.only")
		}}
		w, resp := decideOnce(t, d)
		require.Nil(t, resp)
		require.Equal(t, http.StatusTooManyRequests, w.Code, "the refusal of the model asked for stands")
		require.Empty(t, w.Header().Get(HeaderFallbackModel))
		require.Equal(t, "queue_deadline", w.Header().Get(HeaderReason))
	})
}

// TestDecideMayWaitInTheQueue: the Decide that reserves is given the
// queue wait on top of the decider timeout, so the edge never cuts a
// class's wait with its usual short bound.
func TestDecideMayWaitInTheQueue(t *testing.T) {
	d := &stubDecider{decide: func(m string) (*switchboardv1.DecideResponse, error) { return served(m), nil }}
	before := time.Now()
	_, resp := decideOnce(t, d)
	require.NotNil(t, resp)
	require.Len(t, d.deadlines, 1)
	require.False(t, d.deadlines[0].Before(before.Add(time.Hour+time.Second)), "deadline %s", d.deadlines[0].Sub(before))
}
