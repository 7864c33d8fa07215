package rewrite

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
)

// differentialSeeds are answers and chunks that exercise what the rewriting
// reads: ordinary chunks, and what only a careless or hostile provider
// sends (names escaped, in other cases or named twice, values of the wrong
// type, numbers out of range, broken text).
var differentialSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":30},"cost":0.5}}`,
	`{"id":"x","choices":[{"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"tool_calls":[ ]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":"x"}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[1,{"function":{"name":"f"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f"},"function":{"arguments":"ab"}},null]}}]}`,
	`{"choices":[{"delta":{"tool_calls":{"function":{"name":"f"}}}}]}`,
	`{"choices":[{"Delta":{"CONTENT":"x"},"FINISH_REASON":"stop"}]}`,
	`{"choices":[{"deltа":{"content":"x"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"x\",\"reasoning_conten\u212a\":\"y\"}}]}",
	`{"choices":[{"delta":{"content":"x"},"delta":{"reasoning":"yy"}}]}`,
	`{"choices":[{"delta":{"content":"x"},"delta":null,"delta":{}}]}`,
	`{"choices":[{"delta":{"content":"\u00e9\ud83d\ude00\ud800x\udc00\\"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\xe2\x82\"}}]}",
	`{"choices":[{"delta":{"content":5}}]}`,
	`{"choices":[{"delta":"x"}]}`,
	`{"choices":[{"message":"x"}]}`,
	`{"choices":[{"message":{"content":5,"reasoning":null,"reasoning_content":[1]}}]}`,
	`{"choices":[{"message":{"content":"abc","content":null}}]}`,
	`{"choices":[{"finish_reason":5}]}`,
	`{"choices":[{"finish_reason":""}]}`,
	`{"choices":[null,{"delta":{}}]}`,
	`{"choices":["x"]}`,
	`{"choices":null,"usage":{"prompt_tokens":1}}`,
	`{"choices":{}}`,
	`{"choices":[],"choices":[{"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"content":"x"}}],"choices":[]}`,
	`{"\u0063hoices":[{"delta":{"content":"x"}}],"\u0069d":"y","mod\u0065l":"z"}`,
	`{"id":"a","id":"b","model":"c","provider":"d","provider":"e","x":1,"x":2}`,
	`{"choices":[],"usage":{"prompt_tokens":1.5}}`,
	`{"choices":[],"usage":{"prompt_tokens":"3"}}`,
	`{"choices":[],"usage":{"prompt_tokens":99999999999999999999}}`,
	`{"choices":[],"usage":{"prompt_tokens":-9223372036854775808,"completion_tokens":9223372036854775807}}`,
	`{"choices":[],"usage":{"prompt_tokens":9223372036854775808}}`,
	`{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":null}}`,
	`{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":2},"prompt_tokens_details":null,"prompt_cache_hit_tokens":3}}`,
	`{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":2},"prompt_tokens_details":{}}}`,
	`{"choices":[],"usage":{"prompt_tokens_details":5}}`,
	`{"choices":[],"usage":{"prompt_cache_hit_tokens":"1"}}`,
	`{"choices":[],"usage":{"cost":1,"co\u0073t":2,"x":[1, 2]}}`,
	`{"choices":[],"usage":[1]}`,
	`{"choices":[],"usage":null}`,
	`{"choices":[{"delta":{"content":"x"}}],"usage":null}`,
	`{"usage":{"prompt_tokens":1},"usage":null}`,
	`{"choices":[{"message":{"content":"x"}}],"usage":5}`,
	`{"error":{"message":"boom","code":"x"}}`,
	`{"error":null,"choices":[]}`,
	`{"error":null}`,
	`{"error":"x","choices":[]}`,
	`{"error":{"message":"a"},"error":null}`,
	`{"message":"over quota"}`,
	`{"id":"x"}`,
	`{}`,
	` {"choices":[]} `,
	"\t{\n\"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] ,\r\n\"id\":1}\n",
	`{"choices":[]}x`,
	`{"choices":[],}`,
	`{"choices":[1,]}`,
	`{"choices":[01]}`,
	`{"choices":[-]}`,
	`{"choices":[1.]}`,
	`{"choices":[1e]}`,
	`{"choices":[1E+5, -0.5e-3, 0]}`,
	`{"choices":["\x"]}`,
	`{"choices":["\u12"]}`,
	"{\"choices\":[\"\x01\"]}",
	`{"choices":[tru]}`,
	`{"choices":[nul]}`,
	`{"a" 1}`,
	`{"a":}`,
	`{"a":1`,
	`{`,
	`null`,
	`[]`,
	`"x"`,
	`1`,
	``,
	`{"choices":[{"delta":{"content":"x"}}],"a":{"b":[{"c":[]}]}}`,
}

// FuzzRewriteMatchesReference holds the rewriting on the bytes to the
// decode and re-encode it replaced, on every input: the same error or
// none, the same Info, and the same JSON for the client (members in
// another order, as a decoder reads it: keys named twice keep their last
// value).
func FuzzRewriteMatchesReference(f *testing.F) {
	for _, s := range differentialSeeds {
		for _, opts := range []uint8{0, 1, 2, 15} {
			f.Add([]byte(s), opts)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, opts uint8) {
		checkAgainstReference(t, data, opts)
	})
}

// TestRewriteMatchesReference runs the differential check on the seeds,
// and on nesting at encoding/json's depth limit and just past it.
func TestRewriteMatchesReference(t *testing.T) {
	for _, in := range differentialSeeds {
		for opts := range uint8(16) {
			checkAgainstReference(t, []byte(in), opts)
		}
	}
	var inputs []string
	for _, depth := range []int{jsonscan.MaxDepth - 8, jsonscan.MaxDepth - 7, jsonscan.MaxDepth - 2, jsonscan.MaxDepth - 1, jsonscan.MaxDepth, jsonscan.MaxDepth + 1} {
		nested := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		for _, tmpl := range []string{
			`{"x":%s}`,
			`{"choices":[{"delta":{"x":%s}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"function":{"name":%s}}]}}]}`,
			`{"choices":[],"usage":{"prompt_tokens":%s}}`,
			`{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":%s}}}`,
			`{"choices":[{"message":{"content":%s}}]}`,
			`{"choices":[{"finish_reason":%s}]}`,
		} {
			inputs = append(inputs, strings.Replace(tmpl, "%s", nested, 1))
		}
	}
	for _, in := range inputs {
		for _, opts := range []uint8{0, 15} {
			checkAgainstReference(t, []byte(in), opts)
		}
	}
}

// checkAgainstReference compares Rewrite and Append with referenceRewrite
// on data, under the rewriter opts picks.
func checkAgainstReference(t *testing.T, data []byte, opts uint8) {
	t.Helper()
	price := &switchboardv1.Price{Input: 1, CachedInput: 0.5, Output: 2}
	rw := Rewriter{Model: String("m"), Provider: String("p"), KeepUsage: opts&1 != 0}
	if opts&2 != 0 {
		rw.ID = String("gen-1")
	}
	if opts&4 != 0 {
		rw.Cost = func(u pricing.Usage) float64 {
			c, _ := invoice.Charge(u, price, invoice.Caps{MaxOutputTokens: 5})
			return c
		}
	}
	if opts&8 != 0 {
		rw.AddUsage = func(n int64) json.RawMessage {
			return UsageJSON(pricing.Usage{Input: 1, Output: invoice.TextTokens(n)}, 0.5)
		}
	}
	want, wantInfo, wantErr := rw.referenceRewrite(bytes.Clone(data))
	got, info, err := rw.Rewrite(data)
	if errClass(err) != errClass(wantErr) {
		t.Fatalf("%q: error %v, the reference's %v", data, err, wantErr)
	}
	if !reflect.DeepEqual(info, wantInfo) {
		t.Fatalf("%q: info %+v (usage %v), the reference's %+v (usage %v)", data, info, info.Usage, wantInfo, wantInfo.Usage)
	}
	if (got == nil) != (want == nil) {
		t.Fatalf("%q: output %q, the reference's %q", data, got, want)
	}
	if want != nil && !reflect.DeepEqual(canonical(t, got), canonical(t, want)) {
		t.Fatalf("%q: output %s, the reference's %s", data, got, want)
	}

	// Append on a used rewriter, after a prefix, gives the same bytes.
	_, _, _, _ = rw.Append(nil, []byte(differentialSeeds[1]))
	prefix := []byte("data: ")
	out, info2, forward, err := rw.Append(bytes.Clone(prefix), data)
	require.Equal(t, errClass(err), errClass(wantErr))
	require.Equal(t, wantInfo, info2)
	require.Equal(t, got != nil, forward)
	if forward {
		require.Equal(t, string(prefix)+string(got), string(out))
	} else {
		require.Equal(t, string(prefix), string(out))
	}

	// So does a rewriter that gave its scratch space back, and one that
	// took another's.
	rw.Release()
	again, _, _ := rw.Rewrite(data)
	require.Equal(t, string(got), string(again))
	other := Rewriter{Model: rw.Model, Provider: rw.Provider, ID: rw.ID, KeepUsage: rw.KeepUsage, Cost: rw.Cost, AddUsage: rw.AddUsage}
	again, _, _ = other.Rewrite(data)
	other.Release()
	require.Equal(t, string(got), string(again))
}

// errClass is which malformation err reports, "" for none.
func errClass(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range []string{"not a JSON object", "no choices", "choices:"} {
		if strings.HasPrefix(err.Error(), "malformed answer: "+c) {
			return c
		}
	}
	return "other: " + err.Error()
}

// canonical is the JSON text b as a decoder reads it, numbers as written.
func canonical(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("output is not JSON: %v\n%q", err, b)
	}
	return v
}
