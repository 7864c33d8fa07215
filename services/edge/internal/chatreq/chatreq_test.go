package chatreq

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, r *Request)
	}{
		{
			name: "minimal",
			body: `{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
			check: func(t *testing.T, r *Request) {
				require.Equal(t, "m", r.Model)
				require.False(t, r.Stream)
				require.Nil(t, r.Provider)
				require.Empty(t, r.Parameters)
				require.NotZero(t, r.PromptHash)
				require.Len(t, r.Prefixes, 1, "a single message's only leading part is the whole prompt")
				require.Equal(t, r.PromptHash, r.Prefixes[0].Hash)
				want := tokens.Prompt([]tokens.Message{{Role: "user", Content: "hello"}})
				require.Equal(t, want, r.InputTokens)
			},
		},
		{
			name: "parts, stream, usage, max tokens",
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"max_completion_tokens":7,
				"messages":[{"role":"system","content":"sys"},{"role":"user","name":"bob","content":[{"type":"text","text":"ab"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"cd"}]}]}`,
			check: func(t *testing.T, r *Request) {
				require.True(t, r.Stream)
				require.True(t, r.IncludeUsage)
				require.EqualValues(t, 7, r.MaxOutputTokens)
				require.Equal(t, []string{"max_tokens"}, r.Parameters)
				want := tokens.Prompt([]tokens.Message{{Role: "system", Content: "sys"}, {Role: "user", Name: "bob", Content: "abcd"}})
				require.Equal(t, want, r.InputTokens)
				require.Len(t, r.Prefixes, 2)
				require.Equal(t, int64(tokens.PromptOverhead)+tokens.MessageTokens(tokens.Message{Role: "system", Content: "sys"}), r.Prefixes[0].Tokens)
				require.Equal(t, r.PromptHash, r.Prefixes[1].Hash, "the whole prompt last")
			},
		},
		{
			name: "assistant tool call with null content, tools counted",
			body: `{"model":"m","tools":[ {"type":"function"} ],"temperature":0.2,"tool_choice":null,
				"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},{"role":"tool","content":"r"}]}`,
			check: func(t *testing.T, r *Request) {
				require.Equal(t, []string{"tools", "temperature"}, r.Parameters)
				msgs := []tokens.Message{{Role: "user", Content: "q"}, {Role: "assistant"}, {Role: "tool", Content: "r"}}
				want := tokens.Prompt(msgs) + tokens.Text(`[{"type":"function"}]`)
				require.Equal(t, want, r.InputTokens)
			},
		},
		{
			name: "provider options",
			body: `{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"only":["a","b"],"ignore":["c"],"order":["b"],
				"sort":"latency","max_price":{"prompt":1.5,"completion":0},"allow_fallbacks":false,"require_parameters":true,
				"data_collection":"deny","zdr":true,"quantizations":["fp8"],"preferred_min_throughput":50,"preferred_max_latency":1.5}}`,
			check: func(t *testing.T, r *Request) {
				prompt, completion, minTP, no := 1.5, 0.0, 50.0, false
				want := &switchboardv1.ProviderPreferences{
					Only: []string{"a", "b"}, Ignore: []string{"c"}, Order: []string{"b"},
					Sort:                   switchboardv1.Sort_SORT_LATENCY,
					MaxPrice:               &switchboardv1.MaxPrice{Prompt: &prompt, Completion: &completion},
					AllowFallbacks:         &no,
					RequireParameters:      true,
					DataCollection:         switchboardv1.DataCollection_DATA_COLLECTION_DENY,
					Zdr:                    true,
					Quantizations:          []string{"fp8"},
					PreferredMinThroughput: &minTP,
					PreferredMaxLatency:    durationpb.New(1500 * time.Millisecond),
				}
				require.True(t, proto.Equal(want, r.Provider), "got %v", r.Provider)
			},
		},
		{
			name: "largest max_tokens and n of 1",
			body: `{"model":"m","n":1,"max_tokens":2147483647,"messages":[{"role":"user","content":"q"}]}`,
			check: func(t *testing.T, r *Request) {
				require.EqualValues(t, MaxTokens, r.MaxOutputTokens)
			},
		},
		{
			name: "null optional fields are absent",
			body: `{"model":"m","messages":[{"role":"user","content":"q"}],"stream":null,"max_tokens":null,"stream_options":null,"provider":null}`,
			check: func(t *testing.T, r *Request) {
				require.False(t, r.Stream)
				require.Nil(t, r.Provider)
				require.Empty(t, r.Parameters)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body))
			require.NoError(t, err)
			tt.check(t, r)
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		param string
	}{
		{name: "empty", body: ``, param: ""},
		{name: "not an object", body: `[1]`, param: ""},
		{name: "malformed", body: `{"model":`, param: ""},
		{name: "trailing garbage", body: `{"model":"m"} x`, param: ""},
		{name: "missing model", body: `{"messages":[{"role":"user","content":"q"}]}`, param: "model"},
		{name: "empty model", body: `{"model":"","messages":[{"role":"user","content":"q"}]}`, param: "model"},
		{name: "model number", body: `{"model":1,"messages":[{"role":"user","content":"q"}]}`, param: "model"},
		{name: "missing messages", body: `{"model":"m"}`, param: "messages"},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, param: "messages"},
		{name: "messages object", body: `{"model":"m","messages":{}}`, param: "messages"},
		{name: "message not object", body: `{"model":"m","messages":["x"]}`, param: "messages[0]"},
		{name: "role missing", body: `{"model":"m","messages":[{"content":"q"}]}`, param: "messages[0].role"},
		{name: "role number", body: `{"model":"m","messages":[{"role":1,"content":"q"}]}`, param: "messages[0].role"},
		{name: "content number", body: `{"model":"m","messages":[{"role":"user","content":1}]}`, param: "messages[0].content"},
		{name: "content null for user", body: `{"model":"m","messages":[{"role":"user","content":null}]}`, param: "messages[0].content"},
		{name: "part without type", body: `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`, param: "messages[0].content[0].type"},
		{name: "text part number", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":3}]}]}`, param: "messages[0].content[0].text"},
		{name: "name number", body: `{"model":"m","messages":[{"role":"user","name":2,"content":"q"}]}`, param: "messages[0].name"},
		{name: "stream string", body: `{"model":"m","stream":"yes","messages":[{"role":"user","content":"q"}]}`, param: "stream"},
		{name: "max_tokens negative", body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"q"}]}`, param: "max_tokens"},
		{name: "max_tokens fraction", body: `{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"q"}]}`, param: "max_tokens"},
		{name: "max_tokens near 2^63", body: `{"model":"m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"q"}]}`, param: "max_tokens"},
		{name: "max_tokens beyond int64", body: `{"model":"m","max_tokens":99999999999999999999,"messages":[{"role":"user","content":"q"}]}`, param: "max_tokens"},
		{name: "max_tokens above 2^31-1", body: `{"model":"m","max_tokens":2147483648,"messages":[{"role":"user","content":"q"}]}`, param: "max_tokens"},
		{name: "max_completion_tokens near 2^63", body: `{"model":"m","max_completion_tokens":9223372036854775000,"messages":[{"role":"user","content":"q"}]}`, param: "max_completion_tokens"},
		{name: "n above 1", body: `{"model":"m","n":2,"messages":[{"role":"user","content":"q"}]}`, param: "n"},
		{name: "n zero", body: `{"model":"m","n":0,"messages":[{"role":"user","content":"q"}]}`, param: "n"},
		{name: "n string", body: `{"model":"m","n":"1","messages":[{"role":"user","content":"q"}]}`, param: "n"},
		{name: "max_completion_tokens string", body: `{"model":"m","max_completion_tokens":"9","messages":[{"role":"user","content":"q"}]}`, param: "max_completion_tokens"},
		{name: "stream_options array", body: `{"model":"m","stream_options":[],"messages":[{"role":"user","content":"q"}]}`, param: "stream_options"},
		{name: "include_usage string", body: `{"model":"m","stream_options":{"include_usage":"y"},"messages":[{"role":"user","content":"q"}]}`, param: "stream_options.include_usage"},
		{name: "provider array", body: `{"model":"m","provider":[],"messages":[{"role":"user","content":"q"}]}`, param: "provider"},
		{name: "provider unknown key", body: `{"model":"m","provider":{"sortt":"price"},"messages":[{"role":"user","content":"q"}]}`, param: "provider.sortt"},
		{name: "provider sort", body: `{"model":"m","provider":{"sort":"fast"},"messages":[{"role":"user","content":"q"}]}`, param: "provider.sort"},
		{name: "provider only type", body: `{"model":"m","provider":{"only":"a"},"messages":[{"role":"user","content":"q"}]}`, param: "provider.only"},
		{name: "provider order item", body: `{"model":"m","provider":{"order":["a",2]},"messages":[{"role":"user","content":"q"}]}`, param: "provider.order[1]"},
		{name: "provider max_price negative", body: `{"model":"m","provider":{"max_price":{"prompt":-1}},"messages":[{"role":"user","content":"q"}]}`, param: "provider.max_price.prompt"},
		{name: "provider max_price key", body: `{"model":"m","provider":{"max_price":{"image":1}},"messages":[{"role":"user","content":"q"}]}`, param: "provider.max_price.image"},
		{name: "provider max_price string", body: `{"model":"m","provider":{"max_price":{"completion":"1"}},"messages":[{"role":"user","content":"q"}]}`, param: "provider.max_price.completion"},
		{name: "provider allow_fallbacks", body: `{"model":"m","provider":{"allow_fallbacks":1},"messages":[{"role":"user","content":"q"}]}`, param: "provider.allow_fallbacks"},
		{name: "provider data_collection", body: `{"model":"m","provider":{"data_collection":"maybe"},"messages":[{"role":"user","content":"q"}]}`, param: "provider.data_collection"},
		{name: "provider zdr", body: `{"model":"m","provider":{"zdr":"true"},"messages":[{"role":"user","content":"q"}]}`, param: "provider.zdr"},
		{name: "provider latency huge", body: `{"model":"m","provider":{"preferred_max_latency":1e300},"messages":[{"role":"user","content":"q"}]}`, param: "provider.preferred_max_latency"},
		{name: "provider throughput negative", body: `{"model":"m","provider":{"preferred_min_throughput":-3},"messages":[{"role":"user","content":"q"}]}`, param: "provider.preferred_min_throughput"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body))
			require.Error(t, err)
			var perr *Error
			require.ErrorAs(t, err, &perr)
			require.Equal(t, tt.param, perr.Param, "message: %s", perr.Message)
			require.NotEmpty(t, perr.Message)
		})
	}
}

func TestUpstreamBody(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, got map[string]any)
	}{
		{
			name: "non-stream keeps unknown fields, drops provider",
			body: `{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"sort":"price"},"x_custom":{"a":[1,2]},"temperature":0.5}`,
			check: func(t *testing.T, got map[string]any) {
				require.Equal(t, "up-m", got["model"])
				require.NotContains(t, got, "provider")
				require.NotContains(t, got, "stream_options")
				require.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, got["x_custom"])
				require.Equal(t, 0.5, got["temperature"])
			},
		},
		{
			name: "stream forces include_usage and keeps other options",
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":false,"other":1},"messages":[{"role":"user","content":"q"}]}`,
			check: func(t *testing.T, got map[string]any) {
				require.Equal(t, map[string]any{"include_usage": true, "other": 1.0}, got["stream_options"])
			},
		},
		{
			name: "stream without options",
			body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`,
			check: func(t *testing.T, got map[string]any) {
				require.Equal(t, map[string]any{"include_usage": true}, got["stream_options"])
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body))
			require.NoError(t, err)
			b, err := r.UpstreamBody("up-m")
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(b, &got))
			tt.check(t, got)
		})
	}
}

func TestPrefixChain(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{
			name: "whitespace and key order do not matter",
			a:    `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}`,
			b:    `{"model":"m","messages":[ {"content":"s", "role":"system"} ,{"role":"user","content":"other"}]}`,
			same: true,
		},
		{
			name: "different prefix differs",
			a:    `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`,
			b:    `{"model":"m","messages":[{"role":"system","content":"t"},{"role":"user","content":"q"}]}`,
			same: false,
		},
		{
			name: "message boundaries matter",
			a:    `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]}`,
			b:    `{"model":"m","messages":[{"role":"user","content":"ab"},{"role":"user","content":"c"}]}`,
			same: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra, err := Parse([]byte(tt.a))
			require.NoError(t, err)
			rb, err := Parse([]byte(tt.b))
			require.NoError(t, err)
			// The leading parts before the last message (the last prefix is
			// the whole prompt).
			pa, pb := ra.Prefixes[:len(ra.Prefixes)-1], rb.Prefixes[:len(rb.Prefixes)-1]
			if tt.same {
				require.Equal(t, pa, pb)
			} else {
				require.NotEqual(t, pa, pb)
			}
		})
	}
}

// TestPromptHashIsNextTurnsPrefix is why the chain exists: the hash of the
// whole prompt of turn n is one of the prefix hashes of turn n+1, so the
// decider finds where turn n was served, and its cache.
func TestPromptHashIsNextTurnsPrefix(t *testing.T) {
	turn1, err := Parse([]byte(`{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}`))
	require.NoError(t, err)
	turn2, err := Parse([]byte(`{"model":"m","tools":[ {"type": "function"} ],"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},
		{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]}`))
	require.NoError(t, err)
	require.Len(t, turn2.Prefixes, 5, "the tool block, then each message boundary")
	require.Equal(t, turn1.PromptHash, turn2.Prefixes[2].Hash)
	require.Equal(t, turn1.InputTokens, turn2.Prefixes[2].Tokens, "a prefix's tokens are the earlier prompt's size")
	require.NotEqual(t, turn1.PromptHash, turn2.PromptHash)

	other, err := Parse([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}`))
	require.NoError(t, err)
	require.NotEqual(t, turn1.PromptHash, other.PromptHash, "tools are part of the cached prefix")

	var long strings.Builder
	long.WriteString(`{"model":"m","messages":[`)
	for i := range 50 {
		if i > 0 {
			long.WriteString(",")
		}
		fmt.Fprintf(&long, `{"role":"user","content":"m%d"}`, i)
	}
	long.WriteString("]}")
	r, err := Parse([]byte(long.String()))
	require.NoError(t, err)
	require.Len(t, r.Prefixes, MaxPrefixes)
	require.Less(t, r.Prefixes[0].Tokens, r.Prefixes[MaxPrefixes-1].Tokens, "longest last")
}

// TestPrefixesAtCacheBoundaries: a prompt's prefixes are the tool block
// alone, the end of the leading system and developer messages, and each
// message boundary, shortest first; two requests that share the tools and
// system prompt but not the question share those prefixes; in a long
// conversation the tool and system boundaries stay among the MaxPrefixes
// kept.
func TestPrefixesAtCacheBoundaries(t *testing.T) {
	const tools = `"tools":[{"type":"function","function":{"name":"grep"}}],`
	parse := func(body string) *Request {
		t.Helper()
		r, err := Parse([]byte(body))
		require.NoError(t, err)
		return r
	}
	a := parse(`{"model":"m",` + tools + `"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"q1"}]}`)
	b := parse(`{"model":"m",` + tools + `"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"q2"}]}`)
	require.Len(t, a.Prefixes, 4, "tools, system, system+developer, the whole prompt")
	require.Equal(t, a.Prefixes[:3], b.Prefixes[:3], "the tool block and the system prompt are shared")
	require.NotEqual(t, a.PromptHash, b.PromptHash)
	require.Equal(t, int64(tokens.PromptOverhead)+tokens.Text(`[{"type":"function","function":{"name":"grep"}}]`), a.Prefixes[0].Tokens, "the tool block's size")
	for i := 1; i < len(a.Prefixes); i++ {
		require.Less(t, a.Prefixes[i-1].Tokens, a.Prefixes[i].Tokens, "shortest first")
	}
	noTools := parse(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}`)
	require.Len(t, noTools.Prefixes, 2, "no tool block without tools")

	// A long conversation: the tool and system boundaries are kept first.
	var long strings.Builder
	long.WriteString(`{"model":"m",` + tools + `"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"}`)
	for i := range 60 {
		fmt.Fprintf(&long, `,{"role":"user","content":"m%d"}`, i)
	}
	long.WriteString("]}")
	r := parse(long.String())
	require.Len(t, r.Prefixes, MaxPrefixes)
	require.Equal(t, a.Prefixes[0], r.Prefixes[0], "the tool block")
	require.Equal(t, a.Prefixes[2], r.Prefixes[1], "the end of the leading system messages")
	require.Equal(t, r.PromptHash, r.Prefixes[MaxPrefixes-1].Hash, "the whole prompt last")
	for i := 1; i < len(r.Prefixes); i++ {
		require.Less(t, r.Prefixes[i-1].Tokens, r.Prefixes[i].Tokens, "shortest first")
	}
}

func BenchmarkParse(b *testing.B) {
	long := strings.Repeat("lorem ipsum dolor sit amet ", 4000)
	cases := []struct {
		name string
		body string
	}{
		{name: "short", body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`},
		{name: "100KB conversation", body: `{"model":"m","stream":true,"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"q"}],"provider":{"sort":"price"}}`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r, err := Parse(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.UpstreamBody("up"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
