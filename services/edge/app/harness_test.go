package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	clientKey = "sk-client-key-do-not-log-0001"
	model     = "org/model"
)

var providerNames = []string{"alpha", "beta", "gamma", "delta"}

// providerKey is the credential the edge reads for a provider.
func providerKey(name string) string { return "prov-secret-" + name + "-42" }

func clientKeyHash() string {
	sum := sha256.Sum256([]byte(clientKey))
	return hex.EncodeToString(sum[:])
}

// syncBuffer collects log output written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harness struct {
	t      *testing.T
	fd     *fakedecider.Server
	ups    []*fakeupstream.Server
	eps    []*switchboardv1.Endpoint
	edge   *Edge
	logs   *syncBuffer
	client *http.Client
}

// newHarness starts a fake decider, n fake providers and an edge. The
// decider answers every Decide with the providers in order.
func newHarness(t *testing.T, n int, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, fd: fakedecider.Start(t), logs: &syncBuffer{}}
	for i := range n {
		up := fakeupstream.Start(t)
		name := providerNames[i]
		h.ups = append(h.ups, up)
		h.eps = append(h.eps, &switchboardv1.Endpoint{
			Id: name + "/" + model, Provider: name, BaseUrl: up.BaseURL(), UpstreamModel: "upstream-" + name,
			ApiKeyEnv: "SWITCHBOARD_PROVIDER_KEY_" + strings.ToUpper(name),
			Price:     &switchboardv1.Price{Input: 0.2, CachedInput: 0.05, Output: 0.8},
			// Each endpoint its own estimate, so a Reserve's usd tells which
			// endpoint it was priced on.
			EstimatedCostUsd: float64(i+1) / 1000,
		})
	}
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		return h.decision(req), nil
	})
	cfg := Config{
		Listen:  "127.0.0.1:0",
		Decider: h.fd.Addr(),
		Region:  "eu-test",
		EdgeID:  "edge-test",
		// Long enough that a healthy fake provider always answers first on
		// a loaded machine; a hanging one times out.
		FirstTokenTimeout:   time.Second,
		IdleTimeout:         time.Second,
		ReportFlushInterval: 20 * time.Millisecond,
		// The fake decider answers at once: its calls' deadlines are only
		// hang guards, so a loaded machine cannot turn a grant into a
		// refusal by timeout.
		HedgeAcquireTimeout: longWait,
		ReserveTimeout:      longWait,
		// The fake decider's broker neither pauses nor counts retries, so
		// an endpoint retried after its pause would be called at once:
		// that is the dispatch package's and the end-to-end tests' to try.
		RetryWait: -1,
		Getenv: func(k string) string {
			for _, name := range providerNames {
				if k == "SWITCHBOARD_PROVIDER_KEY_"+strings.ToUpper(name) {
					return providerKey(name)
				}
			}
			return ""
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	logger := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err := Start(t.Context(), cfg, logger)
	require.NoError(t, err)
	h.edge = e
	tr := &http.Transport{}
	h.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		require.NoError(t, e.Close())
	})
	return h
}

// decision is the default Decide answer: the providers in order, for tenant
// acme, no hedge, reserved on the first provider as the decider does (its
// reservation id is decideReservation(request id)).
func (h *harness) decision(req *switchboardv1.DecideRequest) *switchboardv1.DecideResponse {
	return &switchboardv1.DecideResponse{
		Reservation: &switchboardv1.Reservation{ReservationId: h.decideReservation(req.GetRequestId())},
		Demand: &switchboardv1.Demand{
			InputTokens: req.GetTokens().GetInputTokens(), OutputTokens: 4096,
			Usd: h.eps[0].GetEstimatedCostUsd(), Requests: 1,
		},
		RequestId: req.GetRequestId(),
		Model:     model,
		Endpoint:  h.eps[0],
		Fallbacks: h.eps[1:],
		Decision: &switchboardv1.Decision{
			Reason:  switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
			Bucket:  switchboardv1.SizeBucket_SIZE_BUCKET_UNDER_8K,
			Summary: "cheapest-qualifying alpha <8k",
			Candidates: []*switchboardv1.Candidate{
				{EndpointId: h.eps[0].GetId(), Provider: "alpha", Qualified: true, Note: "cheapest"},
			},
		},
		Identity: &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "key-1"},
		Grant:    decisionGrant(req.GetRequestId()),
		Caps:     decisionCaps(req.GetRequestId()),
	}
}

// decisionGrant is the grant of the default decision for a request: any
// bytes that differ per request.
func decisionGrant(requestID string) []byte { return []byte("grant:" + requestID) }

// decisionCaps are the caps of the default decision for a request: any
// that differ per request.
func decisionCaps(requestID string) *switchboardv1.DecisionCaps {
	n := int64(len(requestID))
	return &switchboardv1.DecisionCaps{MaxInputTokens: 1000 + n, MaxOutputTokens: 2000 + n, MaxCostUsd: 3 + float64(n), MaxAttemptsCostUsd: 4 + float64(n)}
}

// decideReservation is the id of the reservation the default decision
// holds on the first provider for a request.
func (h *harness) decideReservation(requestID string) string {
	return fakedecider.ReservationID(requestID + "|" + h.eps[0].GetId())
}

// waitRecord waits for the activity record of one request on the Report
// stream.
func (h *harness) waitRecord(id string) *switchboardv1.ActivityRecord {
	h.t.Helper()
	var found *switchboardv1.ActivityRecord
	require.Eventually(h.t, func() bool {
		for _, r := range h.fd.ActivityRecords() {
			if r.GetId() == id {
				found = r
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "activity record %s", id)
	return found
}

type reply struct {
	status int
	header http.Header
	body   string
}

// errorJSON decodes an OpenAI error body.
func (r reply) errorJSON(t *testing.T) map[string]any {
	t.Helper()
	var body map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &body), "body: %s", r.body)
	require.Contains(t, body, "error")
	e := body["error"]
	for _, k := range []string{"message", "type", "param", "code"} {
		require.Contains(t, e, k)
	}
	return e
}

func (h *harness) do(ctx context.Context, method, path, body string, header map[string]string) reply {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+h.edge.Addr()+path, rd)
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func authed(extra ...string) map[string]string {
	m := map[string]string{"Authorization": "Bearer " + clientKey}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func (h *harness) chat(body string, header map[string]string) reply {
	h.t.Helper()
	return h.do(h.t.Context(), http.MethodPost, "/v1/chat/completions", body, header)
}

// waitReports waits until the decider received at least n call reports.
func (h *harness) waitReports(n int) []*switchboardv1.CallReport {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return len(h.fd.CallReports()) >= n }, 5*time.Second, 10*time.Millisecond)
	return h.fd.CallReports()
}

// sseData splits an SSE body into its data payloads.
func sseData(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for ev := range strings.SplitSeq(strings.TrimSpace(body), "\n\n") {
		require.True(t, strings.HasPrefix(ev, "data: "), "event %q", ev)
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}
