package responses

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

var fuzzSeeds = []string{
	`{"model":"m","input":"hi"}`,
	`{"model":"m","instructions":"i","stream":true,"max_output_tokens":16,"temperature":1,"top_p":0.5,"user":"u","store":false,
		"metadata":{"a":"b"},"reasoning":{"effort":"low"},"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}},
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}],"tool_choice":{"type":"function","name":"f"},
		"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:image/png;base64,AA"}]},
		{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},
		{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"r"}]}]}`,
	`{"model":"m","input":[]}`,
	`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":""}]}`,
	`{"model":"m","input":"","tool_choice":"none","top_p":1.5,"temperature":3}`,
	`{"model":"m","input":"x","previous_response_id":"resp_1"}`,
	`{"model":"","input":null}`,
	`[]`,
	`{"model":"m","input":[{"role":"developer","content":"\u0000"}],"provider":{"sort":"price"},"max_output_tokens":15}`,
	`{"model":"m","input":"x","unknown":1,"text":{"format":{"type":"xml"}}}`,
}

// FuzzParseResponses checks that no body makes the translation panic,
// that every failure is a *chatreq.Error, and that every body it accepts
// becomes a chat request the chat parser accepts too, but for what it
// passes on for the chat parser to check: the routing options, the
// sampling ranges, and an input with nothing to send.
func FuzzParseResponses(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, req, err := ToChat(body)
		if err != nil {
			var perr *chatreq.Error
			if !errors.As(err, &perr) || perr.Message == "" {
				t.Fatalf("error is not a *chatreq.Error with a message: %T %v", err, err)
			}
			return
		}
		if !json.Valid(out) || req.Model == "" {
			t.Fatalf("accepted %q as invalid chat body %q", body, out)
		}
		if _, err := chatreq.Parse(out); err != nil {
			var perr *chatreq.Error
			if !errors.As(err, &perr) {
				t.Fatalf("chat parser error is not a *chatreq.Error: %v", err)
			}
			passed := strings.HasPrefix(perr.Param, "provider") || perr.Param == "temperature" || perr.Param == "top_p" ||
				strings.HasPrefix(perr.Param, "messages")
			if !passed {
				t.Fatalf("translation of %q not accepted by the chat parser: %v (%s)\n%s", body, err, perr.Param, out)
			}
		}
	})
}

// FuzzStream checks that no chat stream (a provider's chunks, as the
// pipeline passes them on) makes the stream translation panic, and that
// whatever it reads, the client's stream ends once, with
// response.completed, response.incomplete or response.failed, its events
// numbered in order.
func FuzzStream(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":"Hi"}}]}`), []byte(`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"f","arguments":"{"}}]},"finish_reason":"length"}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"reasoning":"r"}}]}`), []byte(`{"error":{"message":"x"}}`))
	f.Add([]byte(`not json`), []byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		s := NewStream("gen-abc", Request{Model: "m"}, 3)
		var out []byte
		for _, data := range [][]byte{a, b, []byte("[DONE]")} {
			out = s.Event(out, data)
		}
		if !s.Ended() {
			t.Fatalf("the stream did not end")
		}
		var seq float64
		var last string
		for ev := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			_, data, _ := strings.Cut(ev, "\ndata: ")
			var v map[string]any
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("event %q is not JSON: %v", ev, err)
			}
			if v["sequence_number"] != seq {
				t.Fatalf("event %q out of order", ev)
			}
			seq++
			last, _ = v["type"].(string)
		}
		switch last {
		case "response.completed", "response.incomplete", "response.failed":
		default:
			t.Fatalf("the stream ended with %q", last)
		}
	})
}
