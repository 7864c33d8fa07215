package chatreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// FuzzParseChatRequest checks that no body makes the parser panic, that every
// failure is an *Error with a code and a message, naming the field at fault
// unless the body as a whole is (not JSON, not an object), that every
// accepted body is valid UTF-8, and that it yields a valid JSON upstream
// body without the provider field (and without top_k for an endpoint that
// does not list it).
func FuzzParseChatRequest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error is not *Error: %T %v", err, err)
			}
			if perr.Code == "" || perr.Message == "" {
				t.Fatalf("refusal without a code or message: %+v", perr)
			}
			whole := perr.Code == CodeInvalidJSON || (perr.Code == CodeInvalidType && !isObject(body))
			if perr.Param == "" && !whole {
				t.Fatalf("refusal of a field without its param: %+v", perr)
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not UTF-8: %q", body)
		}
		if r.Model == "" || r.InputTokens <= 0 || r.MaxOutputTokens < 0 {
			t.Fatalf("accepted request with bad view: %+v", r)
		}
		ep := &switchboardv1.Endpoint{UpstreamModel: "upstream"}
		if len(body)%2 == 0 {
			ep.SupportedParameters = EndpointParameters
		}
		out, err := r.UpstreamBody(ep)
		if err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("upstream body is not JSON: %v", err)
		}
		if _, ok := m["provider"]; ok {
			t.Fatal("provider forwarded upstream")
		}
		want, err := referenceUpstreamBody(r, ep)
		if err != nil || !bytes.Equal(out, want) {
			t.Fatalf("upstream body differs from the reference (%v):\n got %s\nwant %s", err, out, want)
		}
	})
}

// fuzzSeeds are bodies good and bad, for the fuzz test and the upstream
// body's differential test.
var fuzzSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[]}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
	`{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"only":["a"],"sort":"price","max_price":{"prompt":1},"preferred_max_latency":2.5}}`,
	`{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"bogus":1}}`,
	`{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"q"}]}`,
	`{"model":1}`,
	`{"model":"m","messages":[1]}`,
	`[]`,
	`{`,
	`null`,
	``,
	"{\"model\":\"\xff\",\"messages\":[]}",
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xe9\"}]}",
	`{"model":"m","messages":[{"role":"wizard","content":"q"}]}`,
	`{"model":"m","temperature":-5,"top_p":"x","messages":[{"role":"user","content":"q"}]}`,
	`{"model":"m","max_tokens":0,"stop":["a",1],"messages":[{"role":"user","content":"q"}]}`,
	`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"messages":[{"role":"user","content":"q"}]}`,
	`{"model":"m","response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}},"messages":[{"role":"user","content":"q"}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"r"}]}`,
	`{"model":"m","logit_bias":{"1":5},"metadata":{"k":"v"},"seed":3,"top_logprobs":2,"logprobs":true,"messages":[{"role":"user","content":"q"}]}`,
}
