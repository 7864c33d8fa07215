package app_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/provsim/app"
)

// post sends a Messages body with the given headers, straight over HTTP, to
// see what the SDK hides: header checks, event names, pings, quota headers.
func post(t *testing.T, p *app.Provider, body string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL()+"/messages", strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// sseEvents reads a stream's events as (event name, data type) pairs, and
// the error that ended the read (nil at a clean end).
func sseEvents(t *testing.T, r io.Reader) ([][2]string, error) {
	t.Helper()
	var out [][2]string
	sc := bufio.NewScanner(r)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Type string `json:"type"`
			}
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d), line)
			out = append(out, [2]string{name, d.Type})
		}
	}
	return out, sc.Err()
}

const hello = `{"model":"claude-sim","max_tokens":64,"messages":[{"role":"user","content":"hello"}]`

func TestMessagesWire(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", DefaultOutputTokens: 2, TokensPerSecond: 2000,
		Limits: app.LimitsConfig{RequestsPerMinute: 100, TokensPerMinute: 100000}})
	version := "2023-06-01"
	tests := []struct {
		name       string
		body       string
		headers    map[string]string
		wantStatus int
		wantError  string // error.type, "" for a message
	}{
		{name: "x-api-key", body: hello + `}`, headers: map[string]string{"X-Api-Key": "sk-test", "Anthropic-Version": version}, wantStatus: 200},
		{name: "bearer", body: hello + `}`, headers: map[string]string{"Authorization": "Bearer sk-test", "Anthropic-Version": version}, wantStatus: 200},
		{name: "no key", body: hello + `}`, headers: map[string]string{"Anthropic-Version": version}, wantStatus: 401, wantError: "authentication_error"},
		{name: "wrong x-api-key wins over a right bearer", body: hello + `}`,
			headers: map[string]string{"X-Api-Key": "sk-nope", "Authorization": "Bearer sk-test", "Anthropic-Version": version}, wantStatus: 401, wantError: "authentication_error"},
		{name: "no anthropic-version", body: hello + `}`, headers: map[string]string{"X-Api-Key": "sk-test"}, wantStatus: 400, wantError: "invalid_request_error"},
		{name: "bad body", body: `{"model":`, headers: map[string]string{"X-Api-Key": "sk-test", "Anthropic-Version": version}, wantStatus: 400, wantError: "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, p, tt.body, tt.headers)
			require.Equal(t, tt.wantStatus, resp.StatusCode)
			require.True(t, strings.HasPrefix(resp.Header.Get("Request-Id"), "req_"))
			var body struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			if tt.wantError == "" {
				require.Equal(t, "message", body.Type)
				require.Equal(t, "100", resp.Header.Get("Anthropic-Ratelimit-Requests-Limit"))
				require.NotEmpty(t, resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining"))
				require.NotEmpty(t, resp.Header.Get("Anthropic-Ratelimit-Tokens-Remaining"))
				require.NotEmpty(t, resp.Header.Get("Anthropic-Ratelimit-Tokens-Reset"))
				require.Empty(t, resp.Header.Get("X-Ratelimit-Remaining-Requests"), "OpenAI's headers are for chat completions")
				return
			}
			require.Equal(t, "error", body.Type)
			require.Equal(t, tt.wantError, body.Error.Type)
			require.NotEmpty(t, body.Error.Message)
			require.Equal(t, resp.Header.Get("Request-Id"), body.RequestID)
		})
	}
	st := p.Stats()
	require.Equal(t, int64(len(tests)), st.Messages)
	require.Equal(t, int64(2), st.Unauthorized)
}

func TestMessagesStreamWire(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", DefaultOutputTokens: 2, TokensPerSecond: 2000})
	headers := map[string]string{"X-Api-Key": "sk-test", "Anthropic-Version": "2023-06-01"}
	stream := func(text string) string {
		return `{"model":"claude-sim","max_tokens":2048,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},
			"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	block := func(delta ...string) [][2]string {
		out := [][2]string{{"content_block_start", "content_block_start"}}
		for range delta {
			out = append(out, [2]string{"content_block_delta", "content_block_delta"})
		}
		return append(out, [2]string{"content_block_stop", "content_block_stop"})
	}
	t.Run("every event named as its type, a ping after the first block start", func(t *testing.T) {
		resp := post(t, p, stream("go [[provsim:tool=lookup]]"), headers)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		got, err := sseEvents(t, resp.Body)
		require.NoError(t, err)
		want := [][2]string{{"message_start", "message_start"}}
		thinking := block("thinking", "thinking", "signature")
		want = append(want, thinking[0], [2]string{"ping", "ping"})
		want = append(want, thinking[1:]...)
		want = append(want, block("text", "text")...)
		want = append(want, block("json", "json")...)
		want = append(want, [2]string{"message_delta", "message_delta"}, [2]string{"message_stop", "message_stop"})
		require.Equal(t, want, got)
	})
	t.Run("an error mid-stream is an error event", func(t *testing.T) {
		resp := post(t, p, stream("go [[provsim:fault=stream_error]]"), headers)
		require.Equal(t, 200, resp.StatusCode)
		got, err := sseEvents(t, resp.Body)
		require.NoError(t, err)
		require.Equal(t, [2]string{"error", "error"}, got[len(got)-1])
		require.NotContains(t, got, [2]string{"message_stop", "message_stop"})
	})
	t.Run("a drop cuts the stream", func(t *testing.T) {
		resp := post(t, p, stream("go [[provsim:fault=drop]]"), headers)
		require.Equal(t, 200, resp.StatusCode)
		got, err := sseEvents(t, resp.Body)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.Equal(t, [2]string{"message_start", "message_start"}, got[0])
	})
	st := p.Stats().Models["claude-sim"]
	require.Equal(t, int64(1), st.Outcomes.OK)
	require.Equal(t, int64(1), st.Outcomes.Unavailable)
	require.Equal(t, int64(1), st.Outcomes.Drop)
	// Thinking (2) and text (2) of the full reply, and the 3 tokens the
	// stream_error and the drop each sent.
	require.Equal(t, int64(4+3+3), st.CompletionTokens)
}

func TestStreamErrorFaultOnChat(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "m", TokensPerSecond: 2000})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL()+"/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a b [[provsim:fault=stream_error]]"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	require.Len(t, events, 1+3+1, "role chunk, 3 tokens, the error")
	require.JSONEq(t, `{"error":{"message":"The server had an error while processing your request (simulated).","type":"server_error","param":null,"code":null}}`,
		strings.TrimPrefix(events[len(events)-1], "data: "))
	require.Equal(t, int64(1), p.Stats().Models["m"].Outcomes.Unavailable)
}
