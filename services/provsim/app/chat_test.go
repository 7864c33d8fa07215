package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
)

func TestChatRejections(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "secret", ModelConfig{ID: "m"})
	c := newClient(t)
	auth := map[string]string{"Authorization": "Bearer secret"}
	tests := []struct {
		name     string
		body     string
		header   map[string]string
		status   int
		typ      string
		code     string // "" means null
		contains string
	}{
		{name: "no key", body: chatBody(t, userMsg("m", "hi")), status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "wrong key", body: chatBody(t, userMsg("m", "hi")), header: map[string]string{"Authorization": "Bearer nope"}, status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "malformed json", body: `{"model":`, header: auth, status: 400, typ: "invalid_request_error", contains: "not valid JSON"},
		{name: "no messages", body: `{"model":"m","messages":[]}`, header: auth, status: 400, typ: "invalid_request_error", contains: "messages"},
		{name: "unknown model", body: chatBody(t, userMsg("zzz", "hi")), header: auth, status: 404, typ: "invalid_request_error", code: "model_not_found", contains: "zzz"},
		{name: "bad max_tokens", body: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, header: auth, status: 400, typ: "invalid_request_error", contains: "max_tokens"},
		{name: "unknown fault directive", body: chatBody(t, userMsg("m", "[[provsim:fault=boom]]")), header: auth, status: 400, typ: "invalid_request_error", contains: "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", tt.body, tt.header)
			require.Equal(t, tt.status, resp.status, string(resp.body))
			require.Equal(t, "application/json", resp.header.Get("Content-Type"))
			e := decodeError(t, resp.body)
			require.Equal(t, tt.typ, e.Type)
			if tt.code == "" {
				require.Nil(t, e.Code)
			} else {
				require.NotNil(t, e.Code)
				require.Equal(t, tt.code, *e.Code)
			}
			require.Contains(t, e.Message, tt.contains)
		})
	}
	st := p.Stats()
	require.Equal(t, int64(7), st.Requests)
	require.Equal(t, int64(2), st.Unauthorized)
	require.Equal(t, int64(3), st.BadRequest, "bodies the parser refused")
	require.Equal(t, int64(1), st.UnknownModel)
	require.Equal(t, Outcomes{BadRequest: 1}, st.Models["m"].Outcomes, "the bad directive")
	require.Zero(t, st.Models["m"].PromptTokens)
}

func TestNonStreamCompletion(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", DefaultOutputTokens: 5})
	c := newClient(t)
	tests := []struct {
		name       string
		body       map[string]any
		wantPrompt int64
		wantText   string
		wantFinish string
	}{
		{
			name:       "default length cycles the last user message",
			body:       userMsg("m", "hello big world"),
			wantPrompt: tokens.Prompt([]tokens.Message{{Role: "user", Content: "hello big world"}}),
			wantText:   "hello big world hello big ",
			wantFinish: "stop",
		},
		{
			name: "max_tokens, parts, system and tools",
			body: map[string]any{
				"model":      "m",
				"max_tokens": 3,
				"messages": []any{
					map[string]any{"role": "system", "content": "be brief"},
					map[string]any{"role": "user", "content": []any{
						map[string]any{"type": "text", "text": "alpha "},
						map[string]any{"type": "text", "text": "beta"},
					}},
				},
				"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
			},
			wantPrompt: tokens.Prompt([]tokens.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "alpha beta"}}) +
				tokens.Text(`[{"function":{"name":"f"},"type":"function"}]`),
			wantText:   "alpha beta alpha ",
			wantFinish: "length",
		},
		{
			name: "no user message says ok",
			body: map[string]any{"model": "m", "max_completion_tokens": 2, "messages": []any{
				map[string]any{"role": "system", "content": "s"},
			}},
			wantPrompt: tokens.Prompt([]tokens.Message{{Role: "system", Content: "s"}}),
			wantText:   "ok ok ",
			wantFinish: "length",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, tt.body), nil)
			require.Equal(t, 200, resp.status, string(resp.body))
			var got chatapi.Completion
			require.NoError(t, json.Unmarshal(resp.body, &got))
			require.True(t, strings.HasPrefix(got.ID, "chatcmpl-"))
			require.Equal(t, "chat.completion", got.Object)
			require.Equal(t, "m", got.Model)
			require.NotZero(t, got.Created)
			require.Len(t, got.Choices, 1)
			require.Equal(t, "assistant", got.Choices[0].Message.Role)
			require.Equal(t, tt.wantText, got.Choices[0].Message.Content)
			require.Equal(t, tt.wantFinish, *got.Choices[0].FinishReason)
			n := int64(len(strings.Fields(tt.wantText)))
			require.Equal(t, chatapi.Usage{PromptTokens: tt.wantPrompt, CompletionTokens: n, TotalTokens: tt.wantPrompt + n}, *got.Usage)
		})
	}
}

// sseEvents reads a whole event stream and returns the data of each event.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q", line)
		events = append(events, data)
	}
	require.NoError(t, sc.Err())
	require.True(t, bytes.HasSuffix(body, []byte("\n\n")), "every event ends with a blank line")
	return events
}

func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m"})
	c := newClient(t)
	for _, includeUsage := range []bool{false, true} {
		t.Run(map[bool]string{false: "without usage", true: "with usage"}[includeUsage], func(t *testing.T) {
			body := userMsg("m", "one two")
			body["stream"] = true
			body["max_tokens"] = 3
			body["stream_options"] = map[string]any{"include_usage": includeUsage}
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
			require.Equal(t, 200, resp.status)
			require.Equal(t, "text/event-stream", resp.header.Get("Content-Type"))
			require.Equal(t, "no-cache", resp.header.Get("Cache-Control"))
			events := sseEvents(t, resp.body)
			want := 1 + 3 + 1 + 1 // role, tokens, finish, [DONE]
			if includeUsage {
				want++
			}
			require.Len(t, events, want)
			require.Equal(t, "[DONE]", events[len(events)-1])

			var chunks []map[string]any
			for _, e := range events[:len(events)-1] {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(e), &m), e)
				require.Equal(t, "chat.completion.chunk", m["object"])
				chunks = append(chunks, m)
			}
			id := chunks[0]["id"]
			for _, ch := range chunks {
				require.Equal(t, id, ch["id"], "one id for the whole stream")
			}
			choice := func(i int) map[string]any { return chunks[i]["choices"].([]any)[0].(map[string]any) }
			require.Equal(t, map[string]any{"role": "assistant", "content": ""}, choice(0)["delta"])
			require.Nil(t, choice(0)["finish_reason"])
			for i, w := range []string{"one ", "two ", "one "} {
				require.Equal(t, map[string]any{"content": w}, choice(1 + i)["delta"])
			}
			require.Equal(t, map[string]any{}, choice(4)["delta"])
			require.Equal(t, "length", choice(4)["finish_reason"])
			if includeUsage {
				last := chunks[5]
				require.Equal(t, []any{}, last["choices"])
				prompt := float64(tokens.Prompt([]tokens.Message{{Role: "user", Content: "one two"}}))
				require.Equal(t, map[string]any{
					"prompt_tokens": prompt, "completion_tokens": 3.0, "total_tokens": prompt + 3,
					"prompt_tokens_details": map[string]any{"cached_tokens": 0.0},
				}, last["usage"])
			}
			for _, ch := range chunks[:5] {
				require.NotContains(t, ch, "usage")
			}
		})
	}
	require.Equal(t, Outcomes{OK: 2}, p.Stats().Models["m"].Outcomes)
	require.Equal(t, int64(6), p.Stats().Models["m"].CompletionTokens)
}

// TestTTFTLowerBound checks the delay is really waited, with a loose lower
// bound only (CI machines are slow; they are never fast).
func TestTTFTLowerBound(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{
		ID:              "m",
		TTFT:            TTFTConfig{Base: Duration(100 * time.Millisecond), Per1KTokens: Duration(100 * time.Millisecond)},
		TokensPerSecond: 100,
	})
	c := newClient(t)
	content := strings.Repeat("x", 4096) // about 1k tokens: ~200 ms TTFT
	for _, stream := range []bool{false, true} {
		body := userMsg("m", content)
		body["stream"] = stream
		body["max_tokens"] = 5
		start := time.Now()
		resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
		require.Equal(t, 200, resp.status)
		// TTFT plus 4 or 5 intervals of 10 ms.
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond+40*time.Millisecond)
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", Cache: CacheConfig{Enabled: true}}, ModelConfig{ID: "nocache"})
	c := newClient(t)
	long := strings.Repeat("lorem ipsum dolor sit amet ", 400) // 10800 bytes, ~2.7k tokens
	// Canonical form "user\n" + content + "\n": whole 512-byte blocks of 128 tokens.
	fullBlocks := int64((5 + len(long) + 1) / 512)
	send := func(model, content string) chatapi.Usage {
		resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg(model, content)), nil)
		require.Equal(t, 200, resp.status, string(resp.body))
		var got chatapi.Completion
		require.NoError(t, json.Unmarshal(resp.body, &got))
		return *got.Usage
	}
	// Sequential steps: each depends on what the previous ones recorded.
	steps := []struct {
		name    string
		model   string
		content string
		want    int64
	}{
		{name: "first long prompt is cold", model: "m", content: long, want: 0},
		{name: "same prompt hits", model: "m", content: long, want: fullBlocks * 128},
		{name: "same prefix, new tail hits the prefix", model: "m", content: long + " and more", want: fullBlocks * 128},
		{name: "different first block misses", model: "m", content: "X" + long, want: 0},
		{name: "short prompt never caches", model: "m", content: "short", want: 0},
		{name: "short prompt again", model: "m", content: "short", want: 0},
		{name: "caching off", model: "nocache", content: long, want: 0},
		{name: "caching off, again", model: "nocache", content: long, want: 0},
	}
	var total int64
	for _, s := range steps {
		u := send(s.model, s.content)
		require.Equal(t, s.want, u.PromptTokensDetails.CachedTokens, s.name)
		total += s.want
	}
	require.Equal(t, total, p.Stats().Models["m"].CachedTokens)

	// A new cache configuration starts cold; SetModel without cache changes keeps it warm.
	require.NoError(t, p.SetModel(ModelConfig{ID: "m", Cache: CacheConfig{Enabled: true}, TokensPerSecond: 1000}))
	require.Equal(t, fullBlocks*128, send("m", long).PromptTokensDetails.CachedTokens)
	require.NoError(t, p.SetModel(ModelConfig{ID: "m", Cache: CacheConfig{Enabled: true, BlockTokens: 64}}))
	require.Zero(t, send("m", long).PromptTokensDetails.CachedTokens)
}

// TestCacheClock checks TTL expiry through the handler with an injected clock.
func TestCacheClock(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	sim, err := start(t.Context(), Config{Providers: []ProviderConfig{{
		Name: "p", Listen: "127.0.0.1:0",
		Models: []ModelConfig{{ID: "m", Cache: CacheConfig{Enabled: true, TTL: Duration(time.Minute)}}},
	}}}, nil, options{now: clock, grace: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	p := sim.Provider("p")
	c := newClient(t)
	long := strings.Repeat("abcd", 2048)
	cached := func() int64 {
		resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", long)), nil)
		var got chatapi.Completion
		require.NoError(t, json.Unmarshal(resp.body, &got))
		return got.Usage.PromptTokensDetails.CachedTokens
	}
	require.Zero(t, cached())
	require.NotZero(t, cached())
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	require.Zero(t, cached())
}

func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", DefaultOutputTokens: 4, Limits: LimitsConfig{RequestsPerMinute: 2, TokensPerMinute: 1000}},
		ModelConfig{ID: "free"})
	c := newClient(t)
	body := chatBody(t, userMsg("m", "hi"))
	cost := tokens.Prompt([]tokens.Message{{Role: "user", Content: "hi"}}) + 4
	for i := range 3 {
		resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", body, nil)
		h := resp.header
		require.Equal(t, "2", h.Get("X-Ratelimit-Limit-Requests"))
		require.Equal(t, "1000", h.Get("X-Ratelimit-Limit-Tokens"))
		reset, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-Requests"))
		require.NoError(t, err)
		require.Greater(t, reset, 50*time.Second)
		require.LessOrEqual(t, reset, time.Minute)
		_, err = time.ParseDuration(h.Get("X-Ratelimit-Reset-Tokens"))
		require.NoError(t, err)
		admitted := int64(min(i+1, 2))
		require.Equal(t, []string{itoa(2 - admitted)}, h.Values("X-Ratelimit-Remaining-Requests"))
		require.Equal(t, itoa(1000-admitted*cost), h.Get("X-Ratelimit-Remaining-Tokens"))
		if i < 2 {
			require.Equal(t, 200, resp.status)
			continue
		}
		require.Equal(t, 429, resp.status)
		retry := h.Get("Retry-After")
		require.NotEmpty(t, retry)
		require.Equal(t, "rate_limit_error", decodeError(t, resp.body).Type)
	}
	st := p.Stats().Models["m"]
	require.Equal(t, Outcomes{OK: 2, RateLimited: 1}, st.Outcomes)

	// A model without limits sends no rate-limit headers.
	resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("free", "hi")), nil)
	require.Empty(t, resp.header.Get("X-Ratelimit-Limit-Requests"))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestModelsHealthAndAdmin(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "k", ModelConfig{ID: "a"}, ModelConfig{ID: "b"})
	c := newClient(t)
	auth := map[string]string{"Authorization": "Bearer k"}

	resp := do(t, c, http.MethodGet, p.URL()+"/models", "", nil)
	require.Equal(t, 401, resp.status)
	resp = do(t, c, http.MethodGet, p.URL()+"/models", "", auth)
	require.Equal(t, 200, resp.status)
	var list chatapi.ModelList
	require.NoError(t, json.Unmarshal(resp.body, &list))
	require.Equal(t, "list", list.Object)
	require.Equal(t, []string{"a", "b"}, []string{list.Data[0].ID, list.Data[1].ID})
	require.Equal(t, "model", list.Data[0].Object)
	require.Equal(t, "p", list.Data[0].OwnedBy)

	base := "http://" + p.Addr()
	resp = do(t, c, http.MethodGet, base+"/healthz", "", nil)
	require.Equal(t, 200, resp.status)

	tests := []struct {
		name   string
		path   string
		body   string
		status int
		want   string
	}{
		{name: "new model by path id", path: "/admin/models/c", body: `{"tokens_per_second": 5000, "ttft": {"base": "10ms"}}`, status: 200, want: `"default_output_tokens":16`},
		{name: "mismatched id", path: "/admin/models/c", body: `{"id":"d"}`, status: 400, want: "does not match"},
		{name: "unknown field", path: "/admin/models/c", body: `{"speed": 1}`, status: 400, want: "unknown field"},
		{name: "invalid config", path: "/admin/models/c", body: `{"faults":[{"kind":"nope"}]}`, status: 400, want: "model.faults[0].kind"},
		{name: "bad duration", path: "/admin/models/c", body: `{"ttft":{"base":"fast"}}`, status: 400, want: "invalid duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, c, http.MethodPut, base+tt.path, tt.body, nil)
			require.Equal(t, tt.status, resp.status, string(resp.body))
			require.Contains(t, string(resp.body), tt.want)
		})
	}
	resp = do(t, c, http.MethodGet, p.URL()+"/models", "", auth)
	require.NoError(t, json.Unmarshal(resp.body, &list))
	require.Len(t, list.Data, 3)

	// Read-modify-write through the admin API round-trips the config.
	resp = do(t, c, http.MethodGet, base+"/admin/models/c", "", nil)
	require.Equal(t, 200, resp.status)
	var mc ModelConfig
	require.NoError(t, json.Unmarshal(resp.body, &mc))
	require.Equal(t, Duration(10*time.Millisecond), mc.TTFT.Base)
	mc.DefaultOutputTokens = 2
	b, err := json.Marshal(mc)
	require.NoError(t, err)
	resp = do(t, c, http.MethodPut, base+"/admin/models/c", string(b), nil)
	require.Equal(t, 200, resp.status, string(resp.body))
	resp = do(t, c, http.MethodGet, base+"/admin/models/c", "", nil)
	var again ModelConfig
	require.NoError(t, json.Unmarshal(resp.body, &again))
	require.Equal(t, mc, again)
	mc.DefaultOutputTokens = 16
	b, err = json.Marshal(mc)
	require.NoError(t, err)
	require.Equal(t, 200, do(t, c, http.MethodPut, base+"/admin/models/c", string(b), nil).status)
	require.Equal(t, 404, do(t, c, http.MethodGet, base+"/admin/models/zzz", "", nil).status)

	resp = do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("c", "x")), auth)
	require.Equal(t, 200, resp.status)
	resp = do(t, c, http.MethodGet, base+"/admin/stats", "", nil)
	require.Equal(t, 200, resp.status)
	var st Stats
	require.NoError(t, json.Unmarshal(resp.body, &st))
	require.Equal(t, p.Stats(), st)
	require.Equal(t, int64(1), st.Models["c"].Outcomes.OK)
	require.Contains(t, string(resp.body), `"completion_tokens":16`)
	require.Contains(t, string(resp.body), `"rate_limited":0`)
}

// A scripted refusal answers every request whose messages contain its
// marker with its status and error, whatever the quotas and faults would
// have said, and leaves every other request alone.
func TestScriptedRefusals(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", Refusals: []RefusalConfig{
		{Match: "POISON-500", Status: 500},
		{Match: "POISON-403", Status: 403, Type: "permission_error", Code: "content_blocked", Message: "blocked"},
	}})
	c := newClient(t)
	tests := []struct {
		name, content string
		status        int
		typ, code     string // code "" means null
		message       string
	}{
		{name: "5xx with defaults", content: "x POISON-500 y", status: 500, typ: "server_error", message: "request refused (simulated)"},
		{name: "4xx as configured", content: "POISON-403", status: 403, typ: "permission_error", code: "content_blocked", message: "blocked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", tt.content)), nil)
			require.Equal(t, tt.status, resp.status, string(resp.body))
			e := decodeError(t, resp.body)
			require.Equal(t, tt.typ, e.Type)
			require.Equal(t, tt.message, e.Message)
			if tt.code == "" {
				require.Nil(t, e.Code)
			} else {
				require.NotNil(t, e.Code)
				require.Equal(t, tt.code, *e.Code)
			}
		})
	}
	// A system message carries the marker as well as a user message does.
	body := chatBody(t, map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "system", "content": "POISON-500"}, map[string]any{"role": "user", "content": "hi"}}})
	require.Equal(t, 500, do(t, c, http.MethodPost, p.URL()+"/chat/completions", body, nil).status)
	ok := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", "a normal question")), nil)
	require.Equal(t, 200, ok.status, string(ok.body))
	st := p.Stats().Models["m"]
	require.Equal(t, int64(4), st.Requests)
	require.Equal(t, int64(3), st.Outcomes.Refused)
	require.Equal(t, int64(1), st.Outcomes.OK)
}
