package anthropic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
