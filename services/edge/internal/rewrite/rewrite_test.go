package rewrite

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
)

func TestRewrite(t *testing.T) {
	model, prov := String("m"), String("p")
	tests := []struct {
		name      string
		in        string
		keepUsage bool
		wantOut   bool
		wantToken bool
		wantErr   bool
		wantError bool
	}{
		{name: "role only", in: `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, wantOut: true},
		{name: "content", in: `{"choices":[{"delta":{"content":"x"}}]}`, wantOut: true, wantToken: true},
		{name: "reasoning", in: `{"choices":[{"delta":{"reasoning_content":"x"}}]}`, wantOut: true, wantToken: true},
		{name: "tool call", in: `{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, wantOut: true, wantToken: true},
		{name: "finish", in: `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, wantOut: true, wantToken: true},
		{name: "usage dropped", in: `{"choices":[],"usage":{"prompt_tokens":1}}`},
		{name: "usage kept", in: `{"choices":[],"usage":{"prompt_tokens":1}}`, keepUsage: true, wantOut: true},
		{name: "not json", in: `{"choices":`, wantErr: true},
		{name: "null", in: `null`, wantErr: true},
		{name: "no choices", in: `{"id":"x"}`, wantErr: true},
		{name: "choices wrong type", in: `{"choices":{}}`, wantErr: true},
		{name: "error object", in: `{"error":{"message":"boom"}}`, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rw := Rewriter{Model: model, Provider: prov, KeepUsage: tt.keepUsage}
			out, info, err := rw.Rewrite([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantOut, out != nil)
			require.Equal(t, tt.wantToken, info.Token)
			require.Equal(t, tt.wantError, info.ErrMsg != "")
			if out != nil {
				var m map[string]any
				require.NoError(t, json.Unmarshal(out, &m))
				require.Equal(t, "m", m["model"])
				require.Equal(t, "p", m["provider"])
			}
		})
	}
}

func BenchmarkRewrite(b *testing.B) {
	model, prov := String("org/model"), String("alpha")
	cases := []struct {
		name  string
		chunk string
	}{
		{name: "content chunk", chunk: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`},
		{name: "usage chunk", chunk: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":30}}}`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.chunk)
			rw := Rewriter{ID: String("gen-abc"), Model: model, Provider: prov, KeepUsage: true,
				Cost: func(u pricing.Usage) float64 {
					c, _ := invoice.Charge(u, &switchboardv1.Price{Input: 1, CachedInput: 0.1, Output: 2}, invoice.Caps{})
					return c
				}}
			for b.Loop() {
				if _, _, err := rw.Rewrite(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchChunks are a stream's content chunk and its final usage chunk.
var benchChunks = []struct {
	name  string
	chunk string
}{
	{name: "content chunk", chunk: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`},
	{name: "usage chunk", chunk: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":30}}}`},
}

// benchRewriter is the rewriter of a streamed call that asked for usage.
func benchRewriter() Rewriter {
	price := &switchboardv1.Price{Input: 1, CachedInput: 0.1, Output: 2}
	return Rewriter{ID: String("gen-abc"), Model: String("org/model"), Provider: String("alpha"), KeepUsage: true,
		Cost: func(u pricing.Usage) float64 {
			c, _ := invoice.Charge(u, price, invoice.Caps{})
			return c
		}}
}

// BenchmarkAppend is the relay's use: each chunk rewritten into a buffer
// reused from chunk to chunk.
func BenchmarkAppend(b *testing.B) {
	for _, c := range benchChunks {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.chunk)
			rw := benchRewriter()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, _, _, err = rw.Append(buf[:0], data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAppendAllocatesNothing: an ordinary content chunk is rewritten into
// a reused buffer without an allocation.
// TestCacheWriteUsage: prompt_tokens_details' cache_write_tokens (every
// cache write) and cache_write_1h_tokens (the hour-long ones among them)
// are read into the usage priced.
func TestCacheWriteUsage(t *testing.T) {
	rw := Rewriter{Model: String("m"), Provider: String("p"), KeepUsage: true}
	_, info, err := rw.Rewrite([]byte(`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,` +
		`"prompt_tokens_details":{"cached_tokens":40,"cache_write_tokens":50,"cache_write_1h_tokens":20}}}`))
	require.NoError(t, err)
	require.Equal(t, &pricing.Usage{Input: 100, CachedInput: 40, CacheWrite: 30, CacheWrite1h: 20, Output: 3}, info.Usage)
	_, info, err = rw.Rewrite([]byte(`{"choices":[],"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cache_write_tokens":-5,"cache_write_1h_tokens":9}}}`))
	require.NoError(t, err)
	require.Equal(t, &pricing.Usage{Input: 100}, info.Usage, "negative writes are none")
}

func TestAppendAllocatesNothing(t *testing.T) {
	rw := benchRewriter()
	data := []byte(benchChunks[0].chunk)
	buf, _, _, err := rw.Append(nil, data)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		buf, _, _, err = rw.Append(buf[:0], data)
	})
	require.NoError(t, err)
	require.Zero(t, allocs)
}
