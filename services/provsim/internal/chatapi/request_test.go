package chatapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

func TestParseRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		want    Request
		wantErr []string // substrings that must all appear in the error
	}{
		{
			name: "string content",
			body: `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`,
			want: Request{Model: "m", Messages: []tokens.Message{{Role: "user", Content: "hello there"}}},
		},
		{
			name: "array of parts joins text parts only",
			body: `{"model":"m","messages":[{"role":"user","name":"bob","content":[{"type":"text","text":"ab"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"cd"}]}]}`,
			want: Request{Model: "m", Messages: []tokens.Message{{Role: "user", Name: "bob", Content: "abcd"}}},
		},
		{
			name: "null content, stream with usage, max_completion_tokens wins",
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":9,"max_completion_tokens":4,
				"messages":[{"role":"assistant","content":null},{"role":"user","content":"x"}],"temperature":0.2}`,
			want: Request{
				Model: "m", Stream: true, IncludeUsage: true, MaxTokens: ptr(int64(4)),
				Messages: []tokens.Message{{Role: "assistant"}, {Role: "user", Content: "x"}},
			},
		},
		{
			name: "tools are compacted",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[ {"type": "function"} ]}`,
			want: Request{Model: "m", Messages: []tokens.Message{{Role: "user", Content: "x"}}, Tools: []byte(`[{"type":"function"}]`)},
		},
		{name: "not json", body: `{"model":`, wantErr: []string{"not valid JSON"}},
		{name: "wrong type", body: `{"model":"m","messages":[],"stream":"yes"}`, wantErr: []string{"not valid JSON"}},
		{
			name:    "all problems at once",
			body:    `{"messages":[{"content":5}],"max_tokens":0}`,
			wantErr: []string{"model: required", "messages[0].role: required", "messages[0].content", "max_tokens: must be at least 1"},
		},
		{name: "no messages", body: `{"model":"m"}`, wantErr: []string{"messages: at least one"}},
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
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPromptTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want int64
	}{
		{
			// 3 + (4 + ceil(4/4) + ceil(8/4)) = 10
			name: "one user message",
			body: `{"model":"m","messages":[{"role":"user","content":"abcdefgh"}]}`,
			want: 10,
		},
		{
			// 3 + (4 + 2 + 1) + (4 + 1 + 0 + 1) = 16
			name: "system and named user",
			body: `{"model":"m","messages":[{"role":"system","content":"hi"},{"role":"user","name":"x","content":"yo"}]}`,
			want: 3 + (4 + 2 + 1) + (4 + 1 + 1 + 1),
		},
		{
			// tools JSON [{"type":"function"}] is 21 bytes: 6 tokens.
			name: "tools add their compact JSON",
			body: `{"model":"m","messages":[{"role":"user","content":"abcd"}],"tools":[ {"type": "function"} ]}`,
			want: 3 + (4 + 1 + 1) + 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRequest([]byte(tt.body))
			require.NoError(t, err)
			require.Equal(t, tt.want, r.PromptTokens())
		})
	}
}

func TestLastUserText(t *testing.T) {
	t.Parallel()
	r := Request{Messages: []tokens.Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}, {Role: "assistant", Content: "c"}}}
	require.Equal(t, "b", r.LastUserText())
	require.Empty(t, Request{Messages: []tokens.Message{{Role: "system", Content: "s"}}}.LastUserText())
}

// FuzzParseRequest checks that no body makes the parser panic and that an
// accepted request always has what the handler relies on.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":null}],"max_tokens":3,"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"m","messages":[{"role":"user","content":{"a":1}}],"max_completion_tokens":-1}`,
		`[]`, `null`, `{"model":`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error does not wrap ErrInvalidRequest: %v", err)
			}
			return
		}
		if r.Model == "" || len(r.Messages) == 0 {
			t.Fatalf("accepted request without model or messages: %+v", r)
		}
		if r.MaxTokens != nil && *r.MaxTokens < 1 {
			t.Fatalf("accepted max tokens %d", *r.MaxTokens)
		}
		if r.PromptTokens() < tokens.PromptOverhead {
			t.Fatalf("prompt tokens %d below overhead", r.PromptTokens())
		}
	})
}

func ptr[T any](v T) *T { return &v }
