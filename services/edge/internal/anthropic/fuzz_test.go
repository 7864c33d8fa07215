package anthropic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

var fuzzSeeds = []string{
	`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","max_tokens":10,"system":[{"type":"text","text":"s"}],"stream":true,"stop_sequences":["x"],"temperature":1,"top_k":3,
		"metadata":{"user_id":"u"},"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},
		"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]},
		{"role":"assistant","content":[{"type":"text","text":"b"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"type":"text","text":"r"}]}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":""}],"tool_choice":{"type":"none"},"top_p":1.5,"temperature":3}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"x"}]}]}`,
	`{"model":"","messages":null}`,
	`[]`,
	`{"model":"m","max_tokens":1,"stop_sequences":["a","b","c","d"],"tools":[{"name":"a-b_c"}],"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"\u0000"}],"provider":{"sort":"price"}}`,
}

// FuzzParseMessages checks that no body makes the translation panic, that
// every failure is a *chatreq.Error, and that every body it accepts
// becomes a chat request the chat parser accepts too.
func FuzzParseMessages(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, o := range []Options{{}, {CountOnly: true}} {
			out, req, err := ToChat(body, o)
			if err != nil {
				var perr *chatreq.Error
				if !errors.As(err, &perr) {
					t.Fatalf("error is not *chatreq.Error: %T %v", err, err)
				}
				continue
			}
			if !json.Valid(out) || req.Model == "" {
				t.Fatalf("accepted %q as invalid chat body %q", body, out)
			}
			// Only the routing options pass untranslated, for the chat
			// parser to check.
			if _, err := chatreq.Parse(out); err != nil {
				var perr *chatreq.Error
				if !errors.As(err, &perr) || !strings.HasPrefix(perr.Param, "provider") {
					t.Fatalf("translation of %q not accepted by the chat parser: %v\n%s", body, err, out)
				}
			}
		}
	})
}

// FuzzUpstreamAnswer checks that no answer or stream event of an anthropic
// endpoint makes its reading panic, that what is relayed is framed as one
// event, that what is translated is chat JSON, and that no usage read is
// negative or splits more of the prompt than the prompt.
func FuzzUpstreamAnswer(f *testing.F) {
	for _, s := range []string{
		`{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":3,"cache_read_input_tokens":2,"cache_creation_input_tokens":9,"cache_creation":{"ephemeral_1h_input_tokens":12}}}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":-4}}`,
		`{"type":"message_stop"}`, `{"type":"error","error":{"type":"overloaded_error","message":"o"}}`,
		`{"type":"message","id":"m","content":[{"type":"text","text":"a"},{"type":"tool_use","input":null}],"stop_reason":"max_tokens"}`,
		`{"type":"message_start","message":[]}`, `null`, `[]`,
		`{"messages":[{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"r"}]},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"x"}}]}],"tools":[{"function":{"name":"f"}}],"tool_choice":"none","parallel_tool_calls":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(u *pricing.Usage) {
			if u != nil && (u.Input < 0 || u.CachedInput < 0 || u.Output < 0 || u.CacheWrite < 0 || u.CacheWrite1h < 0 ||
				u.CachedInput+u.CacheWrite+u.CacheWrite1h > u.Input) {
				t.Fatalf("usage %+v of %s", u, data)
			}
		}
		r := Relay{ID: "msg_1", Model: "m"}
		out, info, err := r.Append(nil, data)
		check(info.Usage)
		if err == nil && info.ErrMsg == "" && (!strings.HasPrefix(string(out), "event: ") || !strings.HasSuffix(string(out), "\n\n")) {
			t.Fatalf("relayed %q as %q", data, out)
		}
		_, info, _ = r.Rewrite(data)
		check(info.Usage)
		var s ChatStream
		chunks, _ := s.Event(nil, data)
		for _, c := range chunks {
			if !json.Valid(c) {
				t.Fatalf("chunk %q of %q", c, data)
			}
		}
		if chat, err := ChatAnswer(data); err == nil && !json.Valid(chat) {
			t.Fatalf("answer %q of %q", chat, data)
		}
		if m, err := FromChatRequest(data, "m"); err == nil && !json.Valid(m) {
			t.Fatalf("request %q of %q", m, data)
		}
	})
}
