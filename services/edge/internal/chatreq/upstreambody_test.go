package chatreq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
)

// referenceUpstreamBody is the upstream body as the edge first built it,
// re-encoding the fields for every call: the reference the laid-out body
// must match byte for byte.
func referenceUpstreamBody(r *Request, ep *switchboardv1.Endpoint) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.Fields)+1)
	for k, v := range r.Fields {
		if k == "provider" || slices.Contains(EndpointParameters, k) && !slices.Contains(ep.GetSupportedParameters(), k) {
			continue
		}
		out[k] = v
	}
	m, err := json.Marshal(ep.GetUpstreamModel())
	if err != nil {
		return nil, fmt.Errorf("encode upstream model: %w", err)
	}
	out["model"] = m
	if r.Stream {
		opts := map[string]json.RawMessage{}
		if raw, ok := out["stream_options"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &opts); err != nil {
				return nil, fmt.Errorf("decode stream_options: %w", err)
			}
		}
		opts["include_usage"] = json.RawMessage("true")
		out["stream_options"] = jsonobj.Encode(opts)
	}
	return jsonobj.Encode(out), nil
}

// TestUpstreamBodyMatchesReference: the body laid out once by Parse is,
// for every accepted body and upstream model, byte for byte the one the
// fields re-encoded per call give; so is the one a Request not made by
// Parse builds.
func TestUpstreamBodyMatchesReference(t *testing.T) {
	bodies := append([]string{
		` { "model" : "m" , "messages" : [ {"role":"user","content":"q"} ] , "temperature" : 0.5 } `,
		`{"zeta":1,"model":"m","alpha":"a","messages":[{"role":"user","content":"q"}],"provider":{"sort":"price"}}`,
		`{"model":"m","model":"n","messages":[{"role":"user","content":"q"}],"x":1,"x":2}`,
		`{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream":false,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream":true,"stream_options":{ "other" : [1, 2] ,"include_usage":false},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream":true,"stream_options":{},"messages":[{"role":"user","content":"q"}],"provider":null}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"a<b":1,"\u00e9t\u00e9":2,"tab\there":3,"quo\"te":4,"back\\slash":5,"\u2028":6,"amp&":7}`,
		`{"messages":[{"role":"user","content":"q"}],"model":"m","{":"}","":0,"~":null}`,
		`{"top_k":40,"model":"m","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"top_k":null,"zz":1}`,
	}, fuzzSeeds...)
	models := []string{"up", "", "org/model-7b:free", `we"ird`, "<html>&", "caf\u00e9", "bad\xffutf8", "line\nbreak", "\u2029"}
	accepted := 0
	for _, body := range bodies {
		r, err := Parse([]byte(body))
		if err != nil {
			continue
		}
		accepted++
		bare := &Request{Fields: r.Fields, Stream: r.Stream}
		for i, model := range models {
			// Every other endpoint takes top_k.
			ep := &switchboardv1.Endpoint{UpstreamModel: model}
			if i%2 == 1 {
				ep.SupportedParameters = []string{"tools", "top_k"}
			}
			want, err := referenceUpstreamBody(r, ep)
			require.NoError(t, err)
			got, err := r.UpstreamBody(ep)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "body %s, model %q", body, model)
			got, err = bare.UpstreamBody(ep)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "not parsed: body %s, model %q", body, model)
		}
	}
	require.Greater(t, accepted, 10)
}

// BenchmarkUpstreamBody is the upstream body of one leg of a parsed
// streamed request, laid out by Parse and, for comparison, re-encoded from
// the fields as the reference does.
func BenchmarkUpstreamBody(b *testing.B) {
	r, err := Parse([]byte(`{"model":"org/model","stream":true,"temperature":0.2,"max_tokens":512,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello."}]}`))
	require.NoError(b, err)
	ep := &switchboardv1.Endpoint{UpstreamModel: "up-model"}
	for name, build := range map[string]func(*switchboardv1.Endpoint) ([]byte, error){
		"laid-out":  r.UpstreamBody,
		"reference": func(ep *switchboardv1.Endpoint) ([]byte, error) { return referenceUpstreamBody(r, ep) },
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := build(ep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAsStringMatchesUnmarshal: a JSON string is read as encoding/json
// reads it, whether or not it has anything to unescape.
func TestAsStringMatchesUnmarshal(t *testing.T) {
	for _, raw := range []string{`""`, `"m"`, ` "org/model" `, `"caf\u00e9"`, "\"caf\xc3\xa9\"", "\"bad\xff\"", `"a\"b"`,
		`"a\\b"`, "\"tab\there\"", `"`, `"a`, `a"`, `1`, `null`, `"a" "b"`, `"<&>"`} {
		got, ok := asString(json.RawMessage(raw))
		var want string
		wantOK := json.Unmarshal([]byte(raw), &want) == nil && len(bytes.TrimSpace([]byte(raw))) > 0 && bytes.TrimSpace([]byte(raw))[0] == '"'
		require.Equal(t, wantOK, ok, "%q", raw)
		require.Equal(t, want, got, "%q", raw)
	}
}
