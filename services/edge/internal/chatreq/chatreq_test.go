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
			body: `{"model":"m","tools":[ {"type":"function","function":{"name":"f"}} ],"temperature":0.2,"tool_choice":null,
				"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"1","content":"r"}]}`,
			check: func(t *testing.T, r *Request) {
				require.Equal(t, []string{"tools", "temperature"}, r.Parameters)
				msgs := []tokens.Message{{Role: "user", Content: "q"}, {Role: "assistant"}, {Role: "tool", Content: "r"}}
				want := tokens.Prompt(msgs) + tokens.Text(`[{"type":"function","function":{"name":"f"}}]`)
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
			name: "every checked field valid, unknown fields passed on",
			body: `{"model":"m","temperature":2,"top_p":0,"presence_penalty":-2,"frequency_penalty":1.5,"seed":-42,"n":1,
				"logprobs":true,"top_logprobs":20,"stop":["a","b","c","d"],"logit_bias":{"50256":-100,"1":100},"user":"u",
				"parallel_tool_calls":false,"store":true,"metadata":{"k":"v"},"max_completion_tokens":1,"x_unknown":{"any":[1]},
				"tools":[{"type":"function","function":{"name":"get_weather-2","description":"d","parameters":{"type":"object"},"strict":true}},
					{"type":"custom","custom":{"name":"grammar"}}],
				"tool_choice":{"type":"function","function":{"name":"get_weather-2"}},
				"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"},"strict":true}},
				"messages":[{"role":"developer","content":[{"type":"text","text":"d"}]},{"role":"system","content":"s"},
					{"role":"user","name":"bob","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}},
						{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}},{"type":"file","file":{"file_id":"f1"}}]},
					{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},
					{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather-2","arguments":"{}"}},
						{"id":"c2","type":"custom","custom":{"name":"grammar","input":"x"}}]},
					{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"sunny"}]},
					{"role":"assistant","function_call":{"name":"f","arguments":"{}"}},
					{"role":"function","name":"f","content":"r"},{"role":"function","name":"f","content":null}]}`,
			check: func(t *testing.T, r *Request) {
				require.EqualValues(t, 1, r.MaxOutputTokens)
				require.Contains(t, r.Fields, "x_unknown")
			},
		},
		{
			name: "stop string, tool_choice strings, json_object",
			body: `{"model":"m","stop":"\n","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required",
				"response_format":{"type":"json_object"},"messages":[{"role":"user","content":"q"}]}`,
			check: func(t *testing.T, r *Request) {
				require.Contains(t, r.Parameters, "tool_choice")
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
	const q = `"messages":[{"role":"user","content":"q"}]`
	// with is a valid request with extra top-level members.
	with := func(extra string) string { return `{"model":"m",` + q + `,` + extra + `}` }
	// msg is a request whose only message is m.
	msg := func(m string) string { return `{"model":"m","messages":[` + m + `]}` }
	tool := func(def string) string { return with(`"tools":[` + def + `]`) }
	const fn = `{"type":"function","function":{"name":"f"}}`
	tests := []struct {
		name  string
		body  string
		param string
		code  string
	}{
		{name: "empty", body: ``, param: "", code: CodeInvalidJSON},
		{name: "not an object", body: `[1]`, param: "", code: CodeInvalidType},
		{name: "null", body: `null`, param: "", code: CodeInvalidType},
		{name: "malformed", body: `{"model":`, param: "", code: CodeInvalidJSON},
		{name: "trailing garbage", body: `{"model":"m"} x`, param: "", code: CodeInvalidJSON},
		{name: "invalid UTF-8 in content", body: msg("{\"role\":\"user\",\"content\":\"caf\xe9\"}"), param: "messages", code: CodeInvalidValue},
		{name: "invalid UTF-8 in an unknown field", body: with("\"x_note\":\"\xff\""), param: "x_note", code: CodeInvalidValue},
		{name: "invalid UTF-8 in a member name", body: with("\"\xff\":1"), param: "", code: CodeInvalidJSON},
		{name: "missing model", body: `{` + q + `}`, param: "model", code: CodeMissing},
		{name: "empty model", body: `{"model":"",` + q + `}`, param: "model", code: CodeEmptyString},
		{name: "model number", body: `{"model":1,` + q + `}`, param: "model", code: CodeInvalidType},
		{name: "missing messages", body: `{"model":"m"}`, param: "messages", code: CodeMissing},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, param: "messages", code: CodeEmptyArray},
		{name: "messages object", body: `{"model":"m","messages":{}}`, param: "messages", code: CodeInvalidType},
		{name: "message not object", body: `{"model":"m","messages":["x"]}`, param: "messages[0]", code: CodeInvalidType},
		{name: "role missing", body: msg(`{"content":"q"}`), param: "messages[0].role", code: CodeMissing},
		{name: "role number", body: msg(`{"role":1,"content":"q"}`), param: "messages[0].role", code: CodeInvalidType},
		{name: "role wizard", body: msg(`{"role":"wizard","content":"q"}`), param: "messages[0].role", code: CodeInvalidValue},
		{name: "content number", body: msg(`{"role":"user","content":1}`), param: "messages[0].content", code: CodeInvalidType},
		{name: "content null for user", body: msg(`{"role":"user","content":null}`), param: "messages[0].content", code: CodeMissing},
		{name: "content empty array", body: msg(`{"role":"user","content":[]}`), param: "messages[0].content", code: CodeEmptyArray},
		{name: "part not an object", body: msg(`{"role":"user","content":["a"]}`), param: "messages[0].content[0]", code: CodeInvalidType},
		{name: "part without type", body: msg(`{"role":"user","content":[{"text":"a"}]}`), param: "messages[0].content[0].type", code: CodeMissing},
		{name: "part type unknown", body: msg(`{"role":"user","content":[{"type":"video","video":{}}]}`), param: "messages[0].content[0].type", code: CodeInvalidValue},
		{name: "image part for system", body: msg(`{"role":"system","content":[{"type":"image_url","image_url":{"url":"u"}}]}`), param: "messages[0].content[0].type", code: CodeInvalidValue},
		{name: "refusal part for user", body: msg(`{"role":"user","content":[{"type":"refusal","refusal":"no"}]}`), param: "messages[0].content[0].type", code: CodeInvalidValue},
		{name: "text part number", body: msg(`{"role":"user","content":[{"type":"text","text":3}]}`), param: "messages[0].content[0].text", code: CodeInvalidType},
		{name: "text part without text", body: msg(`{"role":"user","content":[{"type":"text"}]}`), param: "messages[0].content[0].text", code: CodeMissing},
		{name: "image part without url", body: msg(`{"role":"user","content":[{"type":"image_url","image_url":{}}]}`), param: "messages[0].content[0].image_url.url", code: CodeMissing},
		{name: "image part a string", body: msg(`{"role":"user","content":[{"type":"image_url","image_url":"u"}]}`), param: "messages[0].content[0].image_url", code: CodeInvalidType},
		{name: "audio part format", body: msg(`{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"ogg"}}]}`), param: "messages[0].content[0].input_audio.format", code: CodeInvalidValue},
		{name: "file part without file", body: msg(`{"role":"user","content":[{"type":"file"}]}`), param: "messages[0].content[0].file", code: CodeMissing},
		{name: "refusal part without refusal", body: msg(`{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"refusal"}]}`), param: "messages[1].content[0].refusal", code: CodeMissing},
		{name: "name number", body: msg(`{"role":"user","name":2,"content":"q"}`), param: "messages[0].name", code: CodeInvalidType},
		{name: "function message without name", body: msg(`{"role":"function","content":"q"}`), param: "messages[0].name", code: CodeMissing},
		{name: "tool message without tool_call_id", body: msg(`{"role":"tool","content":"r"}`), param: "messages[0].tool_call_id", code: CodeMissing},
		{name: "tool_call_id number", body: msg(`{"role":"tool","tool_call_id":1,"content":"r"}`), param: "messages[0].tool_call_id", code: CodeInvalidType},
		{name: "tool_calls empty", body: msg(`{"role":"assistant","content":null,"tool_calls":[]}`), param: "messages[0].tool_calls", code: CodeEmptyArray},
		{name: "tool_calls object", body: msg(`{"role":"assistant","content":null,"tool_calls":{}}`), param: "messages[0].tool_calls", code: CodeInvalidType},
		{name: "tool call without id", body: msg(`{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), param: "messages[0].tool_calls[0].id", code: CodeMissing},
		{name: "tool call type", body: msg(`{"role":"assistant","tool_calls":[{"id":"1","type":"fn","function":{"name":"f","arguments":"{}"}}]}`), param: "messages[0].tool_calls[0].type", code: CodeInvalidValue},
		{name: "tool call arguments object", body: msg(`{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":{}}}]}`), param: "messages[0].tool_calls[0].function.arguments", code: CodeInvalidType},
		{name: "tool call without function", body: msg(`{"role":"assistant","tool_calls":[{"id":"1","type":"function"}]}`), param: "messages[0].tool_calls[0].function", code: CodeMissing},
		{name: "function_call without arguments", body: msg(`{"role":"assistant","function_call":{"name":"f"}}`), param: "messages[0].function_call.arguments", code: CodeMissing},
		{name: "stream string", body: with(`"stream":"yes"`), param: "stream", code: CodeInvalidType},
		{name: "temperature negative", body: with(`"temperature":-5`), param: "temperature", code: CodeDecimalBelowMin},
		{name: "temperature above 2", body: with(`"temperature":2.5`), param: "temperature", code: CodeDecimalAboveMax},
		{name: "temperature huge", body: with(`"temperature":1e999`), param: "temperature", code: CodeDecimalAboveMax},
		{name: "temperature string", body: with(`"temperature":"hot"`), param: "temperature", code: CodeInvalidType},
		{name: "top_p above 1", body: with(`"top_p":1.01`), param: "top_p", code: CodeDecimalAboveMax},
		{name: "presence_penalty below -2", body: with(`"presence_penalty":-2.5`), param: "presence_penalty", code: CodeDecimalBelowMin},
		{name: "frequency_penalty bool", body: with(`"frequency_penalty":true`), param: "frequency_penalty", code: CodeInvalidType},
		{name: "seed fraction", body: with(`"seed":1.5`), param: "seed", code: CodeInvalidType},
		{name: "seed string", body: with(`"seed":"1"`), param: "seed", code: CodeInvalidType},
		{name: "logprobs string", body: with(`"logprobs":"true"`), param: "logprobs", code: CodeInvalidType},
		{name: "top_logprobs 21", body: with(`"top_logprobs":21`), param: "top_logprobs", code: CodeIntegerAboveMax},
		{name: "top_logprobs -1", body: with(`"top_logprobs":-1`), param: "top_logprobs", code: CodeIntegerBelowMin},
		{name: "stop number", body: with(`"stop":1`), param: "stop", code: CodeInvalidType},
		{name: "stop five", body: with(`"stop":["a","b","c","d","e"]`), param: "stop", code: CodeArrayTooLong},
		{name: "stop item number", body: with(`"stop":["a",1]`), param: "stop[1]", code: CodeInvalidType},
		{name: "logit_bias array", body: with(`"logit_bias":[1]`), param: "logit_bias", code: CodeInvalidType},
		{name: "logit_bias out of range", body: with(`"logit_bias":{"50256":-101}`), param: "logit_bias.50256", code: CodeDecimalBelowMin},
		{name: "logit_bias string value", body: with(`"logit_bias":{"1":"x"}`), param: "logit_bias.1", code: CodeInvalidType},
		{name: "user number", body: with(`"user":7`), param: "user", code: CodeInvalidType},
		{name: "parallel_tool_calls string", body: with(`"parallel_tool_calls":"no"`), param: "parallel_tool_calls", code: CodeInvalidType},
		{name: "metadata string", body: with(`"metadata":"x"`), param: "metadata", code: CodeInvalidType},
		{name: "metadata value number", body: with(`"metadata":{"k":7}`), param: "metadata.k", code: CodeInvalidType},
		{name: "metadata value too long", body: with(`"metadata":{"k":"` + strings.Repeat("x", 513) + `"}`), param: "metadata.k", code: CodeStringTooLong},
		{name: "metadata 17 keys", body: with(`"metadata":{` + manyKeys(17) + `}`), param: "metadata", code: CodeTooManyProperties},
		{name: "max_tokens zero", body: with(`"max_tokens":0`), param: "max_tokens", code: CodeIntegerBelowMin},
		{name: "max_tokens negative", body: with(`"max_tokens":-1`), param: "max_tokens", code: CodeIntegerBelowMin},
		{name: "max_tokens fraction", body: with(`"max_tokens":1.5`), param: "max_tokens", code: CodeInvalidType},
		{name: "max_tokens near 2^63", body: with(`"max_tokens":9223372036854775807`), param: "max_tokens", code: CodeIntegerAboveMax},
		{name: "max_tokens beyond int64", body: with(`"max_tokens":99999999999999999999`), param: "max_tokens", code: CodeIntegerAboveMax},
		{name: "max_tokens above 2^31-1", body: with(`"max_tokens":2147483648`), param: "max_tokens", code: CodeIntegerAboveMax},
		{name: "max_completion_tokens near 2^63", body: with(`"max_completion_tokens":9223372036854775000`), param: "max_completion_tokens", code: CodeIntegerAboveMax},
		{name: "max_completion_tokens string", body: with(`"max_completion_tokens":"9"`), param: "max_completion_tokens", code: CodeInvalidType},
		{name: "n above 1", body: with(`"n":2`), param: "n", code: CodeUnsupportedValue},
		{name: "n huge", body: with(`"n":99999999999999999999`), param: "n", code: CodeUnsupportedValue},
		{name: "n zero", body: with(`"n":0`), param: "n", code: CodeIntegerBelowMin},
		{name: "n string", body: with(`"n":"1"`), param: "n", code: CodeInvalidType},
		{name: "stream_options array", body: with(`"stream_options":[]`), param: "stream_options", code: CodeInvalidType},
		{name: "include_usage string", body: with(`"stream_options":{"include_usage":"y"}`), param: "stream_options.include_usage", code: CodeInvalidType},
		{name: "tools string", body: with(`"tools":"all"`), param: "tools", code: CodeInvalidType},
		{name: "tools 129", body: with(`"tools":[` + strings.TrimSuffix(strings.Repeat(fn+",", 129), ",") + `]`), param: "tools", code: CodeArrayTooLong},
		{name: "tool not an object", body: tool(`1`), param: "tools[0]", code: CodeInvalidType},
		{name: "tool without type", body: tool(`{"function":{"name":"f"}}`), param: "tools[0].type", code: CodeMissing},
		{name: "tool type", body: tool(`{"type":"plugin","function":{"name":"f"}}`), param: "tools[0].type", code: CodeInvalidValue},
		{name: "tool without function", body: tool(`{"type":"function"}`), param: "tools[0].function", code: CodeMissing},
		{name: "tool without name", body: tool(`{"type":"function","function":{"parameters":{}}}`), param: "tools[0].function.name", code: CodeMissing},
		{name: "tool name pattern", body: tool(`{"type":"function","function":{"name":"get weather"}}`), param: "tools[0].function.name", code: CodeInvalidValue},
		{name: "tool name empty", body: tool(`{"type":"function","function":{"name":""}}`), param: "tools[0].function.name", code: CodeEmptyString},
		{name: "tool name 65", body: tool(`{"type":"function","function":{"name":"` + strings.Repeat("a", 65) + `"}}`), param: "tools[0].function.name", code: CodeStringTooLong},
		{name: "tool description number", body: tool(`{"type":"function","function":{"name":"f","description":1}}`), param: "tools[0].function.description", code: CodeInvalidType},
		{name: "tool parameters array", body: tool(`{"type":"function","function":{"name":"f","parameters":[]}}`), param: "tools[0].function.parameters", code: CodeInvalidType},
		{name: "tool strict string", body: tool(`{"type":"function","function":{"name":"f","strict":"yes"}}`), param: "tools[0].function.strict", code: CodeInvalidType},
		{name: "second tool bad", body: with(`"tools":[` + fn + `,{"type":"function","function":{"name":"a.b"}}]`), param: "tools[1].function.name", code: CodeInvalidValue},
		{name: "tool_choice unknown", body: with(`"tools":[` + fn + `],"tool_choice":"sometimes"`), param: "tool_choice", code: CodeInvalidValue},
		{name: "tool_choice number", body: with(`"tool_choice":7`), param: "tool_choice", code: CodeInvalidType},
		{name: "tool_choice type", body: with(`"tools":[` + fn + `],"tool_choice":{"type":"bogus"}`), param: "tool_choice.type", code: CodeInvalidValue},
		{name: "tool_choice without function", body: with(`"tools":[` + fn + `],"tool_choice":{"type":"function"}`), param: "tool_choice.function", code: CodeMissing},
		{name: "tool_choice without name", body: with(`"tools":[` + fn + `],"tool_choice":{"type":"function","function":{}}`), param: "tool_choice.function.name", code: CodeMissing},
		{name: "tool_choice undeclared", body: with(`"tools":[` + fn + `],"tool_choice":{"type":"function","function":{"name":"g"}}`), param: "tool_choice.function.name", code: CodeInvalidValue},
		{name: "tool_choice without tools", body: with(`"tool_choice":{"type":"function","function":{"name":"f"}}`), param: "tool_choice.function.name", code: CodeInvalidValue},
		{name: "response_format string", body: with(`"response_format":"json"`), param: "response_format", code: CodeInvalidType},
		{name: "response_format without type", body: with(`"response_format":{}`), param: "response_format.type", code: CodeMissing},
		{name: "response_format xml", body: with(`"response_format":{"type":"xml"}`), param: "response_format.type", code: CodeInvalidValue},
		{name: "json_schema missing", body: with(`"response_format":{"type":"json_schema"}`), param: "response_format.json_schema", code: CodeMissing},
		{name: "json_schema without name", body: with(`"response_format":{"type":"json_schema","json_schema":{"schema":{}}}`), param: "response_format.json_schema.name", code: CodeMissing},
		{name: "json_schema schema string", body: with(`"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":"x"}}`), param: "response_format.json_schema.schema", code: CodeInvalidType},
		{name: "json_schema strict string", body: with(`"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":"t"}}`), param: "response_format.json_schema.strict", code: CodeInvalidType},
		{name: "provider array", body: with(`"provider":[]`), param: "provider", code: CodeInvalidValue},
		{name: "provider unknown key", body: with(`"provider":{"sortt":"price"}`), param: "provider.sortt", code: CodeInvalidValue},
		{name: "provider sort", body: with(`"provider":{"sort":"fast"}`), param: "provider.sort", code: CodeInvalidValue},
		{name: "provider only type", body: with(`"provider":{"only":"a"}`), param: "provider.only", code: CodeInvalidValue},
		{name: "provider order item", body: with(`"provider":{"order":["a",2]}`), param: "provider.order[1]", code: CodeInvalidValue},
		{name: "provider max_price negative", body: with(`"provider":{"max_price":{"prompt":-1}}`), param: "provider.max_price.prompt", code: CodeInvalidValue},
		{name: "provider max_price key", body: with(`"provider":{"max_price":{"image":1}}`), param: "provider.max_price.image", code: CodeInvalidValue},
		{name: "provider max_price string", body: with(`"provider":{"max_price":{"completion":"1"}}`), param: "provider.max_price.completion", code: CodeInvalidValue},
		{name: "provider allow_fallbacks", body: with(`"provider":{"allow_fallbacks":1}`), param: "provider.allow_fallbacks", code: CodeInvalidValue},
		{name: "provider data_collection", body: with(`"provider":{"data_collection":"maybe"}`), param: "provider.data_collection", code: CodeInvalidValue},
		{name: "provider zdr", body: with(`"provider":{"zdr":"true"}`), param: "provider.zdr", code: CodeInvalidValue},
		{name: "provider latency huge", body: with(`"provider":{"preferred_max_latency":1e300}`), param: "provider.preferred_max_latency", code: CodeInvalidValue},
		{name: "provider throughput negative", body: with(`"provider":{"preferred_min_throughput":-3}`), param: "provider.preferred_min_throughput", code: CodeInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body))
			require.Error(t, err)
			var perr *Error
			require.ErrorAs(t, err, &perr)
			require.Equal(t, tt.param, perr.Param, "message: %s", perr.Message)
			require.Equal(t, tt.code, perr.Code, "message: %s", perr.Message)
			require.NotEmpty(t, perr.Message)
			require.Less(t, len(perr.Message), 400, "the message does not echo the body back")
		})
	}
}

// manyKeys is n members "k0":"v" ... of an object.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":"v"`, i)
	}
	return b.String()
}

func TestUpstreamBody(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		supported []string // the endpoint's supported_parameters
		check     func(t *testing.T, got map[string]any)
	}{
		{
			name:      "top_k reaches an endpoint that lists it",
			body:      `{"model":"m","messages":[{"role":"user","content":"q"}],"top_k":40,"top_p":0.9}`,
			supported: []string{"top_p", "top_k"},
			check: func(t *testing.T, got map[string]any) {
				require.Equal(t, 40.0, got["top_k"])
				require.Equal(t, 0.9, got["top_p"])
			},
		},
		{
			name:      "top_k is dropped for an endpoint that does not list it; the rest is kept",
			body:      `{"top_k":40,"model":"m","messages":[{"role":"user","content":"q"}],"top_p":0.9}`,
			supported: []string{"top_p"},
			check: func(t *testing.T, got map[string]any) {
				require.NotContains(t, got, "top_k")
				require.Equal(t, 0.9, got["top_p"], "a parameter the endpoint does not list is sent as before: only EndpointParameters are dropped")
				require.Equal(t, "up-m", got["model"])
			},
		},
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
			b, err := r.UpstreamBody(&switchboardv1.Endpoint{UpstreamModel: "up-m", SupportedParameters: tt.supported})
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
	turn1, err := Parse([]byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}`))
	require.NoError(t, err)
	turn2, err := Parse([]byte(`{"model":"m","tools":[ {"type": "function", "function": {"name": "f"}} ],"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},
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
				if _, err := r.UpstreamBody(&switchboardv1.Endpoint{UpstreamModel: "up"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
