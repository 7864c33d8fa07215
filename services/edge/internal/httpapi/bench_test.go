package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/dispatch"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// benchDecider answers every Decide with one endpoint, reserved, as the
// decider answers a request it serves.
type benchDecider struct {
	switchboardv1.RouterServiceClient
	endpoint *switchboardv1.Endpoint
}

func (d benchDecider) Decide(_ context.Context, in *switchboardv1.DecideRequest, _ ...grpc.CallOption) (*switchboardv1.DecideResponse, error) {
	return &switchboardv1.DecideResponse{
		Model:    in.GetModel(),
		Endpoint: d.endpoint,
		Identity: &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "k1", App: "app",
			WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE},
		Decision:    &switchboardv1.Decision{Summary: "alpha: cheapest"},
		Reservation: &switchboardv1.Reservation{ReservationId: "r-" + in.GetRequestId()},
	}, nil
}

// streamingProvider streams five small chunks, the last with finish_reason
// and usage, then [DONE], each flushed.
func streamingProvider() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Ratelimit-Remaining-Requests", "99")
		fakeupstream.WriteBenchStream(w)
	})
}

// deadlineRecorder is a recorder that takes read and write deadlines, as
// the server's own response writer does: without them, every deadline the
// edge sets would cost an error of its own.
type deadlineRecorder struct{ *httptest.ResponseRecorder }

func (deadlineRecorder) SetReadDeadline(time.Time) error  { return nil }
func (deadlineRecorder) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkChatCompletion is one streamed chat request through the whole
// handler, as a client sends it: the request id, the key, the body read and
// parsed, Decide (answered in process), the upstream call on loopback to a
// provider streaming five chunks, and the answer relayed, with the request's
// log lines written by a JSON handler.
func BenchmarkChatCompletion(b *testing.B) {
	provider := httptest.NewServer(streamingProvider())
	defer provider.Close()
	ep := &switchboardv1.Endpoint{Id: "alpha/m", Provider: "alpha", BaseUrl: provider.URL + "/v1", UpstreamModel: "up-m",
		Price: &switchboardv1.Price{Input: 1, Output: 2}}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	s := New(Options{
		Decider:    benchDecider{endpoint: ep},
		Dispatcher: dispatch.New(dispatch.Options{Client: provider.Client(), Logger: log}),
		Logger:     log,
	})
	h := s.Handler()
	body := []byte(`{"model":"org/model","stream":true,"temperature":0.2,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello."}]}`)
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-bench")
		r.Header.Set("Content-Type", "application/json")
		w := deadlineRecorder{httptest.NewRecorder()}
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !bytes.HasSuffix(w.Body.Bytes(), []byte("data: [DONE]\n\n")) {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
}
