package messagesapi

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

func TestParseRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		wantMsgs []tokens.Message
		wantTTLs []time.Duration // per piece
		check    func(t *testing.T, r Request)
		wantErr  []string // substrings that must all appear in the error
	}{
		{
			name:     "string content",
			body:     `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`,
			wantMsgs: []tokens.Message{{Role: "user", Content: "hello"}},
			wantTTLs: []time.Duration{0},
			check: func(t *testing.T, r Request) {
				require.Equal(t, "m", r.Model)
				require.Equal(t, int64(5), r.MaxTokens)
				require.False(t, r.Stream)
			},
		},
		{
			name: "system blocks, tool turn, breakpoints with ttls",
			body: `{"model":"m","max_tokens":5,"stream":true,
				"tools":[{"name":"t1","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1h"}}],
				"system":[{"type":"text","text":"be brief"},{"type":"text","text":" always","cache_control":{"type":"ephemeral"}}],
				"messages":[
					{"role":"user","content":[{"type":"text","text":"q"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
					{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_1","name":"t1","input":{"a": 1}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"42"}]},{"type":"text","text":"thanks","cache_control":{"type":"ephemeral","ttl":"5m"}}]}
				]}`,
			wantMsgs: []tokens.Message{
				{Role: "system", Content: "be brief always"},
				{Role: "user", Content: "q"},
				{Role: "assistant", Content: `hmcallingt1{"a":1}`},
				{Role: "tool", Content: "42"},
				{Role: "user", Content: "thanks"},
			},
			wantTTLs: []time.Duration{TTL1h, 0, TTL5m, 0, 0, 0, 0, 0, 0, TTL5m},
			check: func(t *testing.T, r Request) {
				require.True(t, r.Stream)
				require.Equal(t, []string{"t1"}, r.ToolNames)
				require.JSONEq(t, `[{"name":"t1","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1h"}}]`, string(r.ToolsJSON()))
			},
		},
		{
			name:     "system as a string, a system message, stop sequences, thinking",
			body:     `{"model":"m","max_tokens":2048,"system":"sys","stop_sequences":["END"],"thinking":{"type":"enabled","budget_tokens":1024,"display":"omitted"},"messages":[{"role":"system","content":[{"type":"text","text":"more"}]},{"role":"user","content":"x"}]}`,
			wantMsgs: []tokens.Message{{Role: "system", Content: "sys"}, {Role: "system", Content: "more"}, {Role: "user", Content: "x"}},
			wantTTLs: []time.Duration{0, 0, 0},
			check: func(t *testing.T, r Request) {
				require.Equal(t, []string{"END"}, r.StopSequences)
				require.True(t, r.Thinking)
				require.True(t, r.ThinkingOmitted)
				require.Equal(t, int64(1024), r.ThinkingBudget)
			},
		},
		{
			name:     "top-level cache_control marks the last block; tool_choice",
			body:     `{"model":"m","max_tokens":5,"cache_control":{"type":"ephemeral","ttl":"1h"},"tools":[{"name":"t"}],"tool_choice":{"type":"tool","name":"t"},"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`,
			wantMsgs: []tokens.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}},
			wantTTLs: []time.Duration{0, 0, 0, TTL1h},
			check: func(t *testing.T, r Request) {
				require.Equal(t, "tool", r.ToolChoice)
				require.Equal(t, "t", r.ToolChoiceName)
			},
		},
		{name: "not json", body: `{"model":`, wantErr: []string{"not valid JSON"}},
		{name: "wrong type", body: `{"model":"m","max_tokens":"5","messages":[]}`, wantErr: []string{"not valid JSON"}},
		{
			name:    "all problems at once",
			body:    `{"max_tokens":0,"temperature":3,"messages":[{"role":"bot","content":"x"},{"role":"user","content":[{"type":"tool_use","id":"i","name":"n"}]},{"role":"user","content":[{"type":"video"}]}]}`,
			wantErr: []string{"model: Field required", "max_tokens: must be at least 1", "temperature", "messages[0].role", "messages[1].content[0]: tool_use blocks are only allowed in assistant", "messages[2].content[0].type: unsupported"},
		},
		{name: "max_tokens missing", body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`, wantErr: []string{"max_tokens: Field required"}},
		{name: "no messages", body: `{"model":"m","max_tokens":1}`, wantErr: []string{"messages: at least one"}},
		{
			name: "five breakpoints",
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` +
				`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}},` +
				`{"type":"text","text":"c","cache_control":{"type":"ephemeral"}},{"type":"text","text":"d","cache_control":{"type":"ephemeral"}},` +
				`{"type":"text","text":"e","cache_control":{"type":"ephemeral"}}]}]}`,
			wantErr: []string{"A maximum of 4 blocks with cache_control may be provided. Found 5."},
		},
		{
			name:    "1h after 5m",
			body:    `{"model":"m","max_tokens":1,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
			wantErr: []string{"ttl='1h' cache_control block must not come after a ttl='5m'"},
		},
		{
			name:    "bad cache_control",
			body:    `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"b","cache_control":{"type":"persistent","ttl":"1d"}}]}]}`,
			wantErr: []string{"messages[0].content[0].cache_control.type: must be 'ephemeral'"},
		},
		{
			name:    "thinking budget must fit max_tokens",
			body:    `{"model":"m","max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`,
			wantErr: []string{"`max_tokens` must be greater than `thinking.budget_tokens`"},
		},
		{
			name:    "tool_choice any without tools",
			body:    `{"model":"m","max_tokens":1,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`,
			wantErr: []string{"tools must be provided"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRequest([]byte(tt.body))
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				require.True(t, errors.Is(err, ErrInvalidRequest))
				for _, s := range tt.wantErr {
					require.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantMsgs, got.ChatMessages())
			ttls := make([]time.Duration, len(got.Pieces))
			for i, pc := range got.Pieces {
				ttls[i] = pc.TTL
			}
			require.Equal(t, tt.wantTTLs, ttls)
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func TestPrefixKeysIgnoreBreakpointsAndSpacing(t *testing.T) {
	t.Parallel()
	a, err := ParseRequest([]byte(`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]}`))
	require.NoError(t, err)
	b, err := ParseRequest([]byte(`{"model":"m","max_tokens":1,"system":[ {"text":"s", "type":"text"} ],"messages":[{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`))
	require.NoError(t, err)
	require.Equal(t, a.PrefixKeys(), b.PrefixKeys())
	c, err := ParseRequest([]byte(`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"Q"}]}]}`))
	require.NoError(t, err)
	ka, kc := a.PrefixKeys(), c.PrefixKeys()
	require.Equal(t, ka[0], kc[0], "the same system prefix")
	require.NotEqual(t, ka[1], kc[1], "a different message")
}

func TestPrefixTokensGrowToThePrompt(t *testing.T) {
	t.Parallel()
	r, err := ParseRequest([]byte(`{"model":"m","max_tokens":1,"tools":[{"name":"search"}],"system":"you help","messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":" world"}]},{"role":"assistant","content":"hi"}]}`))
	require.NoError(t, err)
	msgs := r.ChatMessages()
	total := tokens.Prompt(msgs) + tokens.Text(string(r.ToolsJSON()))
	prev := int64(0)
	for i := range r.Pieces {
		n := r.PrefixTokens(i)
		require.GreaterOrEqual(t, n, prev, "piece %d", i)
		prev = n
	}
	require.Equal(t, total, prev)
	require.Equal(t, tokens.Prompt(nil)+tokens.Text(`[{"name":"search"}]`), r.PrefixTokens(0))
	require.Equal(t, tokens.Prompt(msgs[:1])+tokens.Text(`[{"name":"search"}]`), r.PrefixTokens(1))
}

func FuzzParseMessagesRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","max_tokens":5,"cache_control":{"type":"ephemeral"},"tools":[{"name":"t"}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"},{"type":"text","text":"q"}]}]}`,
		`{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"n","input":{}}]}]}`,
		`{"messages":[{"content":[{"type":"document","source":{"type":"text","data":"d"}}]}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidRequest)
			return
		}
		require.NotEmpty(t, r.Model)
		require.Positive(t, r.MaxTokens)
		require.LessOrEqual(t, breakpoints(r.Pieces), MaxBreakpoints)
		total := tokens.Prompt(r.ChatMessages()) + tokens.Text(string(r.ToolsJSON()))
		require.Len(t, r.PrefixKeys(), len(r.Pieces))
		if n := len(r.Pieces); n > 0 {
			require.Equal(t, total, r.PrefixTokens(n-1))
		}
	})
}
