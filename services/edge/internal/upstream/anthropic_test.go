package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// oneCredential gives every endpoint the same secret.
type oneCredential string

func (c oneCredential) Lookup(string, *url.URL) (string, error) { return string(c), nil }

var _ Credentials = oneCredential("")

// messagesStream is an anthropic endpoint's answer: thinking with its
// signature, text, and usage with a cache read and both cache writes.
var messagesStream = []string{
	`{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"glm-up","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":100,"cache_creation_input_tokens":30,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20}}}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG+/=="}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`,
	`{"type":"message_stop"}`,
}

// messagesServer is an anthropic endpoint answering messagesStream, which
// hands each request it gets to seen.
func messagesServer(t *testing.T, seen chan<- *http.Request, bodies chan<- []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- r
		bodies <- b
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "99")
		for _, ev := range messagesStream {
			var typed struct{ Type string }
			_ = json.Unmarshal([]byte(ev), &typed)
			_, _ = io.WriteString(w, "event: "+typed.Type+"\ndata: "+ev+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// nativeClient is a client writer that takes a Messages answer as it is.
type nativeClient struct {
	watchingClient
	native bool
}

func (c *nativeClient) Native() { c.native = true }

var _ NativeWriter = (*nativeClient)(nil)

func anthropicLeg(t *testing.T, srv *httptest.Server, req Request) (*Leg, context.Context) {
	t.Helper()
	c := New(Options{Client: srv.Client(), Credentials: oneCredential("sk-up-secret"), FirstTokenTimeout: time.Minute,
		IdleTimeout: time.Minute, WriteTimeout: time.Minute})
	ep := &switchboardv1.Endpoint{Id: "e", Provider: "alpha", BaseUrl: srv.URL + "/v1/", UpstreamModel: "glm-up",
		ApiKeyEnv: "SWITCHBOARD_PROVIDER_KEY_ALPHA", Api: switchboardv1.EndpointApi_ENDPOINT_API_ANTHROPIC}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang fails instead of blocking the suite
	t.Cleanup(cancel)
	return c.NewLeg(ctx, req, ep), ctx
}

// TestMessagesRelayed: a Messages client's request to an anthropic
// endpoint goes as it was sent (model aside) to base_url/messages with
// Anthropic's headers, and its answer comes back event for event, the
// signature included, while the leg reads its first token, usage (cache
// writes by lifetime) and rate-limit headers.
func TestMessagesRelayed(t *testing.T) {
	seen, bodies := make(chan *http.Request, 1), make(chan []byte, 1)
	srv := messagesServer(t, seen, bodies)
	client := `{"model":"zai/glm","max_tokens":50,"stream":true,"provider":{"sort":"price"},` +
		`"system":[{"type":"text","text":"long","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	l, ctx := anthropicLeg(t, srv, Request{ID: "gen-abc", Stream: true, IncludeUsage: true,
		Body: func(*switchboardv1.Endpoint) ([]byte, error) {
			t.Fatal("the chat body is not built for a relayed request")
			return nil, nil
		},
		Rewriter: rewrite.Rewriter{Model: rewrite.String("zai/glm"), Provider: rewrite.String("alpha")},
		Messages: Messages{Body: []byte(client), Version: "2023-06-01", Beta: "interleaved-thinking-2025-05-14"}})
	require.True(t, l.Open(ctx), l.Result.ErrText)
	r, body := <-seen, <-bodies
	require.Equal(t, "/v1/messages", r.URL.Path)
	require.Equal(t, "sk-up-secret", r.Header.Get("X-Api-Key"))
	require.Empty(t, r.Header.Get("Authorization"))
	require.Equal(t, "2023-06-01", r.Header.Get("Anthropic-Version"))
	require.Equal(t, "interleaved-thinking-2025-05-14", r.Header.Get("Anthropic-Beta"))
	require.JSONEq(t, strings.Replace(strings.Replace(client, `"zai/glm"`, `"glm-up"`, 1), `"provider":{"sort":"price"},`, "", 1), string(body))

	w := &nativeClient{watchingClient: watchingClient{h: http.Header{}, want: "never", seen: make(chan struct{})}}
	l.Deliver(ctx, w)
	l.Close()
	require.True(t, w.native)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, l.Result.Outcome, l.Result.ErrText)
	out := w.got.String()
	require.Contains(t, out, "event: content_block_delta\ndata: "+messagesStream[4]+"\n\n")
	require.Contains(t, out, `"id":"msg_abc"`)
	require.True(t, strings.HasSuffix(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), out)
	require.NotContains(t, out, "[DONE]")
	require.True(t, l.Result.HasTTFT)
	require.Equal(t, &pricing.Usage{Input: 140, CachedInput: 100, CacheWrite: 10, CacheWrite1h: 20, Output: 7}, l.Result.Usage)
	require.Equal(t, int64(len("hmm")+len("Hello")), l.Result.Delivered)
	require.Equal(t, []*switchboardv1.Header{{Name: "anthropic-ratelimit-requests-remaining", Value: "99"}}, l.Result.Headers)
}

// TestChatTranslatedForMessagesEndpoint: a chat request to an anthropic
// endpoint is sent as a Messages request and answered as chat chunks, with
// the usage (cache writes counted) and usage.cost the client asked for.
func TestChatTranslatedForMessagesEndpoint(t *testing.T) {
	seen, bodies := make(chan *http.Request, 1), make(chan []byte, 1)
	srv := messagesServer(t, seen, bodies)
	price := pricing.Price{Input: 1, CachedInput: 0.1, CacheWrite: 1.25, CacheWrite1h: 2, Output: 5}
	l, ctx := anthropicLeg(t, srv, Request{ID: "gen-abc", Stream: true, IncludeUsage: true,
		Body: func(ep *switchboardv1.Endpoint) ([]byte, error) {
			return []byte(`{"model":"` + ep.GetUpstreamModel() + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil
		},
		Rewriter: rewrite.Rewriter{ID: rewrite.String("gen-abc"), Model: rewrite.String("zai/glm"), Provider: rewrite.String("alpha"),
			KeepUsage: true, Cost: func(u pricing.Usage) float64 { return pricing.Cost(price, u) }},
		EstimatedUsage: func(int64) json.RawMessage { t.Fatal("the provider reported usage"); return nil }})
	require.True(t, l.Open(ctx), l.Result.ErrText)
	r, body := <-seen, <-bodies
	require.Equal(t, "/v1/messages", r.URL.Path)
	require.Equal(t, DefaultAnthropicVersion, r.Header.Get("Anthropic-Version"))
	require.JSONEq(t, `{"model":"glm-up","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, string(body))

	w := &watchingClient{h: http.Header{}, want: "never", seen: make(chan struct{})}
	l.Deliver(ctx, w)
	l.Close()
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, l.Result.Outcome, l.Result.ErrText)
	out := w.got.String()
	require.Contains(t, out, `"reasoning_content":"hmm"`)
	require.Contains(t, out, `"content":"Hello"`)
	require.Contains(t, out, `"finish_reason":"stop"`)
	require.Contains(t, out, `"cache_write_tokens":30`)
	require.NotContains(t, out, "SIG+/==", "a signature has no chat form")
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"), out)
	u := pricing.Usage{Input: 140, CachedInput: 100, CacheWrite: 10, CacheWrite1h: 20, Output: 7}
	require.Equal(t, &u, l.Result.Usage)
	cost, _ := json.Marshal(pricing.Cost(price, u))
	require.Contains(t, out, `"cost":`+string(cost))
	require.InDelta(t, (10*1+100*0.1+10*1.25+20*2+7*5)/1e6, pricing.Cost(price, u), 1e-12)
}

// TestMessagesEndpointErrors: an anthropic endpoint's 429 and 529, and an
// error event before the first token, fail the leg as a provider's
// trouble another endpoint may serve, with its rate-limit headers kept.
func TestMessagesEndpointErrors(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		outcome switchboardv1.Outcome
	}{
		{"429", http.StatusTooManyRequests, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
		{"529", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR},
		{"error event", http.StatusOK, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
			switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "3")
				w.Header().Set("Anthropic-Ratelimit-Tokens-Remaining", "0")
				if tt.status == http.StatusOK {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			l, ctx := anthropicLeg(t, srv, Request{ID: "gen-1", Stream: true,
				Rewriter: rewrite.Rewriter{Model: rewrite.String("m"), Provider: rewrite.String("alpha")},
				Messages: Messages{Body: []byte(`{"model":"m","max_tokens":5,"messages":[]}`)}})
			require.False(t, l.Open(ctx))
			l.Close()
			require.Equal(t, tt.outcome, l.Result.Outcome, l.Result.ErrText)
			require.True(t, l.Result.Class().OtherEndpoint(), "%v", l.Result.Class())
			require.NotEqual(t, failclass.NonRetryableRequest, l.Result.Class())
			require.Equal(t, 3*time.Second, l.Result.RetryAfter)
			require.Contains(t, l.Result.Headers, &switchboardv1.Header{Name: "anthropic-ratelimit-tokens-remaining", Value: "0"})
		})
	}
}
