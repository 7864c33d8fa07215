// Package tests holds Switchboard's end-to-end tests: they run the real
// decider (with embedded etcd), the real edge and the provider simulator on
// loopback, and drive the edge as a user would, with the official OpenAI SDK
// and raw HTTP.
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

const (
	testKey   = "sk-e2e-tenant-key"
	model     = "vendor/sim-model"
	simModel  = "sim-model"
	alphaCred = "alpha-secret-credential"
)

func quietLogger(w io.Writer) *slog.Logger {
	if w == nil {
		w = io.Discard
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

const simConfig = `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    api_key: ` + alphaCred + `
    models:
      - id: sim-model
        ttft: {base: 5ms}
        default_output_tokens: 8
        cache: {enabled: true, min_tokens: 256}
  - name: beta
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        ttft: {base: 5ms}
        default_output_tokens: 8
        cache: {enabled: true, min_tokens: 256}
  - name: gamma
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        ttft: {base: 5ms}
        default_output_tokens: 8
        cache: {enabled: true, min_tokens: 256}
`

// startSystem starts the simulator, a decider with embedded etcd, and an edge.
// alpha is the cheapest provider, then beta, then gamma.
// rpcGuards are the edge's deadlines on its decider calls in these tests:
// the defaults (a few hundred ms) would turn a slow answer on a loaded
// machine into a skipped fallback or a refused hedge, so here they only
// guard against a hang.
var rpcGuards = []string{"--reserve-timeout=20s", "--hedge-acquire-timeout=20s"}

func startSystem(t testing.TB, edgeArgs ...string) *stack {
	t.Helper()
	return startSystemWith(t, systemOptions{}, edgeArgs...)
}

// systemOptions change the system startSystemWith starts.
type systemOptions struct {
	// modelYAML is added to the model's catalog entry (e.g. its fallback
	// policy), indented as its fields.
	modelYAML string
	// baseURL, when set, gives a provider's base URL in the catalog from
	// the simulator's: a recording proxy in front of it.
	baseURL func(provider, url string) string
	// cooldownRule is the decider's --cooldown-rule; "" is the default.
	cooldownRule string
	// models are more catalog models, listed after the model, each
	// formatted with the providers' base URLs: %[1]s alpha's, %[2]s beta's,
	// %[3]s gamma's, and the simulator's model name %[4]s.
	models string
}

func startSystemWith(t testing.TB, o systemOptions, edgeArgs ...string) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simConfig, catalog: func(url func(string) string) string {
		if o.baseURL != nil {
			plain := url
			url = func(p string) string { return o.baseURL(p, plain(p)) }
		}
		more := ""
		if o.models != "" {
			more = fmt.Sprintf(o.models, url("alpha"), url("beta"), url("gamma"), simModel)
		}
		return fmt.Sprintf(`
models:
  - id: %[1]s
    list_price: {input: 0.30, cached_input: 0.10, output: 1.20}
%[7]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[5]s, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.10, cached_input: 0.05, output: 0.50}}
      - {provider: beta,  base_url: %[3]s, upstream_model: %[5]s, price: {input: 0.20, cached_input: 0.02, output: 0.60}}
      - {provider: gamma, base_url: %[4]s, upstream_model: %[5]s, price: {input: 0.25, cached_input: 0.10, output: 0.70}}
%[8]s
tenants:
  - {id: acme, api_keys_sha256: [%[6]s]}
`, model, url("alpha"), url("beta"), url("gamma"), simModel, catalog.HashKey(testKey), o.modelYAML, more)
	}, tune: func(c *deciderapp.Config) { c.CooldownRule = o.cooldownRule }, edgeArgs: edgeArgs})
}

func (s *stack) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(s.edge.URL()+"/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
}

// post sends a raw chat request and returns status, headers and body.
func (s *stack) post(t testing.TB, key string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	status, header, raw := s.send(t, key, http.MethodPost, "/chat/completions", body)
	var out map[string]any
	if strings.HasPrefix(header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &out), "body: %s", raw)
	}
	return status, header, out
}

// send sends a request to the edge's API path (below /v1) with key, if
// any, and the header pairs, and returns its status, headers and body.
func (s *stack) send(t testing.TB, key, method, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.edge.URL()+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, raw
}

// sseEvent is one event of a stream the edge answered, with its data's
// type and sequence number (-1 when it has none).
type sseEvent struct {
	name, data string
	seq        int
}

// sseEvents splits a stream into its events, checking each is an event
// line and a data line whose type is the event's name.
func sseEvents(t *testing.T, stream []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	for ev := range strings.SplitSeq(strings.TrimSuffix(string(stream), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\n")
		require.True(t, ok, ev)
		name, ok = strings.CutPrefix(name, "event: ")
		require.True(t, ok, ev)
		data, ok = strings.CutPrefix(data, "data: ")
		require.True(t, ok, ev)
		v := struct {
			Type           string `json:"type"`
			SequenceNumber *int   `json:"sequence_number"`
		}{}
		require.NoError(t, json.Unmarshal([]byte(data), &v), data)
		require.Equal(t, name, v.Type, "the event's name is its data's type")
		seq := -1
		if v.SequenceNumber != nil {
			seq = *v.SequenceNumber
		}
		out = append(out, sseEvent{name: name, data: data, seq: seq})
	}
	return out
}

// lockedWriter lets the edge's goroutines log into one buffer that the test reads.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// String is what was written so far.
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (s *stack) logText() string {
	s.logW.mu.Lock()
	defer s.logW.mu.Unlock()
	return s.logW.w.String()
}

func longPrompt(nTokens int) string {
	// Each "word" is 4 bytes: one token by the shared rule.
	return strings.Repeat("word", nTokens)
}

func TestChatThroughEdgeWithOpenAISDK(t *testing.T) {
	began := time.Now().Truncate(time.Second)
	s := startSystem(t)
	client := s.client()
	ctx := t.Context()

	// Non-streaming: cheapest provider (alpha, which needs the credential the
	// edge reads from its environment) serves it.
	prompt := longPrompt(2000) + " tell me about routing"
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	require.NoError(t, err)
	require.Equal(t, model, resp.Model, "the client sees its own model name, not the upstream's")
	require.Equal(t, `"alpha"`, resp.JSON.ExtraFields["provider"].Raw())
	require.NotEmpty(t, resp.Choices[0].Message.Content)
	wantPrompt := tokens.Prompt([]tokens.Message{{Role: "user", Content: prompt}})
	require.Equal(t, wantPrompt, resp.Usage.PromptTokens, "prompt tokens follow the documented rule")
	require.Equal(t, int64(8), resp.Usage.CompletionTokens)
	require.Zero(t, resp.Usage.PromptTokensDetails.CachedTokens, "first sight of this prompt")

	// The same prompt again hits alpha's prompt cache.
	resp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	require.NoError(t, err)
	require.Positive(t, resp.Usage.PromptTokensDetails.CachedTokens)
	require.LessOrEqual(t, resp.Usage.PromptTokensDetails.CachedTokens, resp.Usage.PromptTokens)

	// Streaming, with usage in the last chunk.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		MaxTokens:     openai.Int(5),
	})
	var content strings.Builder
	var usage openai.CompletionUsage
	chunks := 0
	for stream.Next() {
		c := stream.Current()
		chunks++
		require.Equal(t, `"alpha"`, c.JSON.ExtraFields["provider"].Raw(), "every chunk names the provider")
		require.Equal(t, model, c.Model)
		if len(c.Choices) > 0 {
			content.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
	}
	require.NoError(t, stream.Err())
	require.Equal(t, 5, len(strings.Fields(content.String())), "five output tokens, one word each: %q", content.String())
	require.Equal(t, int64(5), usage.CompletionTokens)
	require.Equal(t, wantPrompt, usage.PromptTokens)
	require.Positive(t, usage.PromptTokensDetails.CachedTokens)
	require.Greater(t, chunks, 5)

	// Streaming without include_usage: no usage chunk, exactly as OpenAI.
	stream = client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("short")},
	})
	for stream.Next() {
		require.Zero(t, stream.Current().Usage.TotalTokens)
	}
	require.NoError(t, stream.Err())

	// The edge reported every call on its Report stream.
	require.Eventually(t, func() bool { return s.decider.ReportsReceived() >= 4 }, 10*time.Second, 20*time.Millisecond)
	require.Len(t, s.decider.Edges(), 1)

	// Models list.
	models, err := client.Models.List(ctx)
	require.NoError(t, err)
	require.Equal(t, model, models.Data[0].ID)
	// created is a real time: when the decider first served the model (its
	// catalog was loaded after the test began), not 0.
	require.GreaterOrEqual(t, models.Data[0].Created, began.Unix())
	require.LessOrEqual(t, models.Data[0].Created, time.Now().Unix())

	// The credential never shows up in the edge's logs.
	require.NotContains(t, s.logText(), alphaCred)
	require.NotContains(t, s.logText(), testKey)
}

func TestRoutingOptionsThroughEdge(t *testing.T) {
	s := startSystem(t)
	tests := []struct {
		name     string
		provider string
		want     string
	}{
		{"default is cheapest", ``, "alpha"},
		{"order", `"provider":{"order":["gamma","beta"]},`, "gamma"},
		{"ignore", `"provider":{"ignore":["alpha"]},`, "beta"},
		{"only", `"provider":{"only":["gamma"]},`, "gamma"},
		{"max_price", `"provider":{"max_price":{"prompt":0.15}},`, "alpha"},
		{"max_price moves past the cheapest", `"provider":{"ignore":["alpha"],"max_price":{"prompt":0.22,"completion":1}},`, "beta"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := s.post(t, testKey, `{"model":"`+model+`",`+tt.provider+`"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, http.StatusOK, code, "%v", body)
			require.Equal(t, tt.want, body["provider"])
			require.Equal(t, tt.want, hdr.Get("x-switchboard-provider"))
			require.Contains(t, hdr.Get("x-switchboard-route"), "provider="+tt.want)
		})
	}
}

func TestErrorPathsThroughEdge(t *testing.T) {
	s := startSystem(t, "--max-body-bytes=65536")
	msg := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		key    string
		body   string
		status int
		code   string // error.code or error.type, whichever is set
		param  string
	}{
		{"malformed json", testKey, `{"model":`, 400, "", ""},
		{"messages missing", testKey, `{"model":"` + model + `"}`, 400, "", "messages"},
		{"bad provider option", testKey, `{"model":"` + model + `","provider":{"sort":"vibes"},` + msg + `}`, 400, "", "provider.sort"},
		{"unknown provider", testKey, `{"model":"` + model + `","provider":{"only":["nobody"]},` + msg + `}`, 400, "", ""},
		{"no key", "", `{"model":"` + model + `",` + msg + `}`, 401, "", ""},
		{"bad key", "sk-wrong", `{"model":"` + model + `",` + msg + `}`, 401, "", ""},
		{"unknown model", testKey, `{"model":"nope/nothing",` + msg + `}`, 404, "", ""},
		{"oversized body", testKey, `{"model":"` + model + `","messages":[{"role":"user","content":"` + longPrompt(20000) + `"}]}`, 413, "", ""},
		{"every provider fails", testKey, `{"model":"` + model + `","messages":[{"role":"user","content":"[[provsim:fault=unavailable]]"}]}`, 503, "", ""},
		{"every provider rate limits", testKey, `{"model":"` + model + `","messages":[{"role":"user","content":"[[provsim:fault=rate_limit]]"}]}`, 429, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := s.post(t, tt.key, tt.body)
			require.Equal(t, tt.status, code, "%v", body)
			e, ok := body["error"].(map[string]any)
			require.True(t, ok, "OpenAI error JSON: %v", body)
			require.NotEmpty(t, e["message"])
			if tt.param != "" {
				require.Equal(t, tt.param, e["param"])
			}
			if code == 429 {
				require.NotEmpty(t, hdr.Get("Retry-After"))
			}
			if code == 502 {
				for _, p := range []string{"alpha", "beta", "gamma"} {
					require.Contains(t, e["message"], p, "the message lists every attempt")
				}
			}
		})
	}
}

func TestRetryOnAnotherProvider(t *testing.T) {
	s := startSystem(t)
	// alpha (the cheapest) now fails every call with a 503.
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{
		ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: "unavailable", Rate: 1}},
	}))
	client := s.client()
	resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	require.NoError(t, err)
	require.Equal(t, `"beta"`, resp.JSON.ExtraFields["provider"].Raw(), "the next provider in the fallback order served it")
	require.Equal(t, int64(1), s.sim.Provider("alpha").Stats().Models[simModel].Outcomes.Unavailable)
}

func TestMidStreamFailureAndClientDisconnect(t *testing.T) {
	s := startSystem(t)
	client := s.client()

	// The provider dies after a few tokens: bytes already reached the client,
	// so the stream ends with an error rather than silently or by retrying.
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("[[provsim:fault=drop]] one two three four five six")},
		MaxTokens: openai.Int(50),
	})
	got := 0
	for stream.Next() {
		got++
	}
	require.Error(t, stream.Err())
	require.Positive(t, got, "some chunks arrived before the failure")
	require.Zero(t, s.sim.Provider("beta").Stats().Models[simModel].Requests, "no retry once bytes reached the client")

	// A client that gives up cancels the upstream call. It gives up once
	// the call reached the provider, however long that took.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before := s.sim.Provider("alpha").Stats().Requests
	errc := make(chan error, 1)
	go func() {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("[[provsim:fault=hang]]")},
		})
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.sim.Provider("alpha").Stats().Requests > before },
		20*time.Second, 10*time.Millisecond, "the hanging call reaches the provider")
	cancel()
	require.Error(t, <-errc)
	require.Eventually(t, func() bool {
		return s.sim.Provider("alpha").Stats().Models[simModel].Outcomes.Hang+s.sim.Provider("alpha").Stats().Models[simModel].Outcomes.Cancelled >= 1
	}, 5*time.Second, 20*time.Millisecond, "the upstream saw the cancellation")
}
