package tests

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

const (
	limitContext   = 32768
	limitMaxOutput = 8192
)

// twoSim is two simulated providers of one model, alpha and beta.
const twoSim = `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 1ms}, default_output_tokens: 8}
  - name: beta
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 1ms}, default_output_tokens: 8}
`

// startLimitSystem starts a decider, an edge and two simulated providers
// of one model: alpha with a known context length and max output, beta
// with none.
func startLimitSystem(t *testing.T) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: twoSim, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[4]s, price: {input: 0.10, output: 0.50}, context_length: %[6]d, max_output_tokens: %[7]d}
      - {provider: beta,  base_url: %[3]s, upstream_model: %[4]s, price: {input: 0.20, output: 0.60}}
tenants:
  - {id: acme, api_keys_sha256: [%[5]s]}
`, model, url("alpha"), url("beta"), simModel, catalog.HashKey(testKey), limitContext, limitMaxOutput)
	}})
}

// postCapped sends a chat body and returns the status, headers and the start of
// the body. It reads at most 64 KiB: an answer that would never end (an
// unbounded stream) fails the assertions rather than hanging the test.
func (s *stack) postCapped(t *testing.T, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header, string(raw)
}

// A max_tokens near 2^63 used to wrap the context check and reach the
// provider unbounded. The edge refuses a max_tokens above OpenAI's own
// maximum, the decider refuses endpoints that cannot produce as much, and
// a request no endpoint can satisfy gets a clear 400 naming max_tokens.
func TestHugeMaxTokensIsRefused(t *testing.T) {
	s := startLimitSystem(t)
	chatPrompt := func(maxTokens, provider, prompt string) string {
		return `{"model":"` + model + `","stream":true,"max_tokens":` + maxTokens + `,"provider":` + provider +
			`,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	}
	chat := func(maxTokens, provider string) string { return chatPrompt(maxTokens, provider, "hello") }
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantParam  string
		wantMsg    string
	}{
		{name: "near 2^63", body: chat(fmt.Sprint(int64(math.MaxInt64)), `{"only":["beta"]}`), wantStatus: 400, wantParam: "max_tokens", wantMsg: "2147483647"},
		{name: "max_completion_tokens near 2^63", body: strings.Replace(chat("1", `{}`), `"max_tokens":1`, `"max_completion_tokens":9223372036854775000`, 1), wantStatus: 400, wantParam: "max_completion_tokens", wantMsg: "2147483647"},
		// The only endpoint the client allowed cannot produce that much: no
		// endpoint meets the request's constraints, and the answer says why.
		{name: "above the endpoint's max output", body: chat("16000", `{"only":["alpha"]}`), wantStatus: 404, wantMsg: "max output 8192 tokens too small for 16000"},
		{name: "above the endpoint's context", body: chatPrompt("8000", `{"only":["alpha"]}`, longPrompt(26000)), wantStatus: 404, wantMsg: "context length 32768"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := s.postCapped(t, tt.body)
			require.Equal(t, tt.wantStatus, code, body)
			require.Contains(t, body, `"invalid_request_error"`)
			require.Contains(t, body, tt.wantMsg)
			if tt.wantParam != "" {
				require.Contains(t, body, `"param":"`+tt.wantParam+`"`)
			}
		})
	}
	// Within what alpha can produce, it serves.
	code, hdr, body := s.postCapped(t, chat("100", `{"only":["alpha"]}`))
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "alpha", hdr.Get("X-Switchboard-Provider"))

	// The decider is safe on its own against any caller: a max output near
	// 2^63 cannot wrap its context check or be priced.
	_, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens:   &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: math.MaxInt64},
		Provider: &switchboardv1.ProviderPreferences{Only: []string{"alpha"}},
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: math.MaxInt32},
	})
	require.NoError(t, err)
	require.Equal(t, "beta", resp.GetEndpoint().GetProvider(), "alpha cannot produce that much")
}

// A request no endpoint can satisfy (max_price below every endpoint) is
// not retryable: the edge answers 404 naming the constraint, and an
// official SDK with its default retries calls once.
func TestUnsatisfiableRequestIsNotRetried(t *testing.T) {
	s := startLimitSystem(t)
	var calls atomic.Int32
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	client := openai.NewClient(option.WithBaseURL(s.edge.URL()+"/"), option.WithAPIKey(testKey),
		option.WithHTTPClient(counting), option.WithMaxRetries(2))
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}, option.WithJSONSet("provider", map[string]any{"max_price": map[string]any{"prompt": 0.01}}))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, "no_endpoints_found", apiErr.Code)
	require.Contains(t, apiErr.Message, "max_price")
	require.EqualValues(t, 1, calls.Load(), "a non-retryable status is not retried by the SDK")

	// The decider's side: a distinct status for constraints nobody meets.
	_, err = s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens:   &switchboardv1.TokenEstimate{InputTokens: 10},
		Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.01)}},
	})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ptr[T any](v T) *T { return &v }

// With the real decider, the edge is ready once the decider serves, and
// every answer carries x-request-id.
func TestEdgeReadyWithTheRealDecider(t *testing.T) {
	s := startLimitSystem(t)
	base := strings.TrimSuffix(s.edge.URL(), "/v1")
	get := func(path string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp
	}
	require.Eventually(t, func() bool { return get("/readyz").StatusCode == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	resp := get("/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
}
