package anthropic

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/upstream")

// golden compares got, indented and with every "created" set to 0, with
// testdata/upstream/name; -update rewrites the file instead.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(got, &v), "%s", got)
	zeroCreated(v)
	out, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	out = append(out, '\n')
	path := filepath.Join("testdata", "upstream", name)
	if *update {
		require.NoError(t, os.WriteFile(path, out, 0o600))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run %s -update to write it", t.Name())
	require.Equal(t, string(want), string(out))
}

func zeroCreated(v any) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["created"]; ok {
			x["created"] = 0
		}
		for _, e := range x {
			zeroCreated(e)
		}
	case []any:
		for _, e := range x {
			zeroCreated(e)
		}
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream", name))
	require.NoError(t, err)
	return b
}

// TestFromChatRequestGolden: a chat request becomes the Messages request
// an anthropic endpoint is sent.
func TestFromChatRequestGolden(t *testing.T) {
	for _, name := range []string{"chat_request", "chat_request_minimal"} {
		t.Run(name, func(t *testing.T) {
			got, err := FromChatRequest(readTestdata(t, name+".in.json"), "glm-5-upstream")
			require.NoError(t, err)
			golden(t, name+".out.json", got)
		})
	}
}

func TestFromChatRequestRefusesWhatIsNotChat(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     `{`,
		"unknown role": `{"messages":[{"role":"robot","content":"x"}]}`,
		"bad content":  `{"messages":[{"role":"user","content":42}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromChatRequest([]byte(body), "m")
			require.Error(t, err)
		})
	}
}

// TestChatAnswerGolden: a Messages answer becomes a chat completion, its
// usage with the whole prompt, cache reads and both cache writes.
func TestChatAnswerGolden(t *testing.T) {
	got, err := ChatAnswer(readTestdata(t, "message.in.json"))
	require.NoError(t, err)
	golden(t, "message.out.json", got)
}

// events returns the events of testdata/upstream/stream.in.json, each as
// its own data.
func events(t *testing.T) [][]byte {
	t.Helper()
	var evs []json.RawMessage
	require.NoError(t, json.Unmarshal(readTestdata(t, "stream.in.json"), &evs))
	out := make([][]byte, len(evs))
	for i, e := range evs {
		out[i] = e
	}
	return out
}

// TestChatStreamGolden: a Messages stream becomes chat chunks.
func TestChatStreamGolden(t *testing.T) {
	var s ChatStream
	var chunks [][]byte
	for _, ev := range events(t) {
		var err error
		chunks, err = s.Event(chunks, ev)
		require.NoError(t, err)
	}
	require.True(t, s.Ended())
	golden(t, "stream.chat.json", append(append([]byte("["), bytes.Join(chunks, []byte(","))...), ']'))
}

// TestRelayStream: a relayed stream is the endpoint's, event for event
// (the signature delta included), with the edge's message id and model;
// what the pipeline reads of it is its first token, finish and usage.
func TestRelayStream(t *testing.T) {
	r := Relay{ID: "msg_abc", Model: "zai/glm-5"}
	var out []byte
	var token, finish bool
	var usage *pricing.Usage
	for i, ev := range events(t) {
		var info rewrite.Info
		var err error
		out, info, err = r.Append(out, ev)
		require.NoError(t, err)
		if info.Token && !token {
			require.Equal(t, 3, i, "the first token is the first thinking delta")
		}
		token, finish = token || info.Token, finish || info.Finish
		if info.Usage != nil {
			usage = info.Usage
		}
	}
	require.True(t, r.Ended())
	require.True(t, finish)
	require.Equal(t, &pricing.Usage{Input: 25 + 4096, CachedInput: 4096, Output: 31}, usage)
	require.Contains(t, string(out), "event: content_block_delta\ndata: "+
		`{"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDyU"}}`+"\n\n")
	require.Contains(t, string(out), `"id":"msg_abc"`)
	require.Contains(t, string(out), `"model":"zai/glm-5"`)
	require.NotContains(t, string(out), "msg_upstream_2")
	require.Equal(t, 15, bytes.Count(out, []byte("\nevent: "))+1, "every event, ping included")

	// An error event ends the stream for the pipeline, which tells the client.
	failed := &Relay{}
	require.Equal(t, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the provider's stream was interrupted: stream idle\"}}\n\n",
		string(failed.Interrupted(nil, "stream idle")))
	_, info, err := failed.Append(nil, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	require.NoError(t, err)
	require.Equal(t, "overloaded_error: Overloaded", info.ErrMsg)
	require.Equal(t, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		string(failed.Interrupted(nil, "provider sent an error")), "the endpoint's own error goes to the client")
	_, _, err = (&Relay{}).Append(nil, []byte(`[1]`))
	require.Error(t, err)
}

// TestRelayBody: a relayed answer keeps its blocks (the thinking block's
// signature) and gets the edge's id and model.
func TestRelayBody(t *testing.T) {
	r := Relay{ID: "msg_abc", Model: "zai/glm-5"}
	out, info, err := r.Rewrite(readTestdata(t, "message.in.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	require.Equal(t, "msg_abc", m["id"])
	require.Equal(t, "zai/glm-5", m["model"])
	require.Equal(t, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDyU", m["content"].([]any)[0].(map[string]any)["signature"])
	require.Equal(t, &pricing.Usage{Input: 12 + 3000 + 2000, CachedInput: 2000, CacheWrite: 1000, CacheWrite1h: 2000, Output: 40}, info.Usage)
	require.True(t, info.Finish)

	_, info, err = r.Rewrite([]byte(`{"type":"error","error":{"type":"api_error","message":"boom"}}`))
	require.NoError(t, err)
	require.Equal(t, "api_error: boom", info.ErrMsg)
}

// TestNativeBody: only the model changes and the edge's provider options
// go; cache_control and thinking signatures stay byte for byte.
func TestNativeBody(t *testing.T) {
	in := `{"model":"zai/glm-5","max_tokens":64,"provider":{"sort":"price"},` +
		`"system":[{"type":"text","text":"long","cache_control":{"type":"ephemeral","ttl":"1h"}}],` +
		`"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig=="}]}]}`
	out, err := NativeBody([]byte(in), "glm-5-upstream")
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out, &m))
	require.JSONEq(t, `"glm-5-upstream"`, string(m["model"]))
	require.NotContains(t, m, "provider")
	require.Equal(t, `[{"type":"text","text":"long","cache_control":{"type":"ephemeral","ttl":"1h"}}]`, string(m["system"]))
	require.Equal(t, `[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig=="}]}]`, string(m["messages"]))
	_, err = NativeBody([]byte(`[]`), "m")
	require.Error(t, err)
}

// TestUsagePricing: Anthropic's usage in the pipeline's terms.
func TestUsagePricing(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		u    upstreamUsage
		want pricing.Usage
	}{
		{"writes without a split are 5-minute writes", upstreamUsage{InputTokens: n(10), CacheCreationInputTokens: n(500), OutputTokens: n(3)},
			pricing.Usage{Input: 510, CacheWrite: 500, Output: 3}},
		{"the split", upstreamUsage{InputTokens: n(10), CacheCreationInputTokens: n(500), CacheReadInputTokens: n(7),
			CacheCreation: &struct {
				Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
				Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
			}{Ephemeral5m: n(100), Ephemeral1h: n(400)}},
			pricing.Usage{Input: 517, CachedInput: 7, CacheWrite: 100, CacheWrite1h: 400}},
		{"negative counts are zero", upstreamUsage{InputTokens: n(-4), CacheReadInputTokens: n(-1)}, pricing.Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.u.Pricing())
		})
	}
}

// TestWriterNative: a relayed answer passes the Writer untranslated; a
// relayed stream cut before its end gets the error event.
func TestWriterNative(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		for _, cut := range []bool{false, true} {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "text/event-stream")
			w := NewWriter(rec, "gen-abc")
			w.Native()
			w.WriteHeader(http.StatusOK)
			events := "event: ping\ndata: {\"type\":\"ping\"}\n\n"
			if !cut {
				events += "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
			}
			_, err := w.Write([]byte(events))
			require.NoError(t, err)
			w.Finish()
			if cut {
				require.Equal(t, events+"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the answer's stream ended early\"}}\n\n", rec.Body.String())
			} else {
				require.Equal(t, events, rec.Body.String())
			}
		}
	})
	t.Run("body", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.Native()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		body := `{"id":"msg_abc","type":"message","content":[{"type":"thinking","thinking":"t","signature":"s"}]}`
		_, _ = w.Write([]byte(body))
		w.Finish()
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, body, rec.Body.String())
	})
}

// TestCacheBreakpoints: the prompt up to the last breakpoint, in
// Anthropic's cache order (tools, system, messages), and up to the last
// 1-hour one, for the decider to price the writes.
func TestCacheBreakpoints(t *testing.T) {
	tool := `{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1h"}}`
	sys := `{"type":"text","text":"` + strings.Repeat("s", 400) + `","cache_control":{"type":"ephemeral"}}`
	user := `{"type":"text","text":"` + strings.Repeat("u", 800) + `"}`
	body := `{"model":"m","max_tokens":5,"tools":[` + tool + `],"system":[` + sys + `],"messages":[{"role":"user","content":[` + user + `]}]}`
	_, req, err := ToChat([]byte(body), Options{})
	require.NoError(t, err)
	hour := tokens.PromptOverhead + tokens.Text(tool)
	require.Equal(t, hour, req.CacheWrite1hTokens, "up to the tools' 1-hour breakpoint")
	require.Equal(t, hour+tokens.Text(sys), req.CacheWriteTokens, "up to the system's, the last: the user text after it is not written")

	_, req, err = ToChat([]byte(`{"model":"m","max_tokens":5,"system":"plain","messages":[{"role":"user","content":"hi"}]}`), Options{})
	require.NoError(t, err)
	require.Zero(t, req.CacheWriteTokens+req.CacheWrite1hTokens, "no breakpoints, no writes")
}
