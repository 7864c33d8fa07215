package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSessionID(t *testing.T) {
	tests := []struct {
		name, header, want string
	}{
		{name: "none"},
		{name: "an id", header: "conv-42_a.b:c", want: "conv-42_a.b:c"},
		{name: "a uuid", header: "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab", want: "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab"},
		{name: "longest", header: strings.Repeat("a", maxSessionID), want: strings.Repeat("a", maxSessionID)},
		{name: "too long", header: strings.Repeat("a", maxSessionID+1)},
		{name: "a space", header: "conv 42"},
		{name: "a slash", header: "a/b"},
		{name: "not ascii", header: "sessión"},
		{name: "a control character", header: "a\x01b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
			if tt.header != "" {
				r.Header.Set(HeaderSession, tt.header)
			}
			require.Equal(t, tt.want, sessionID(r, ""))
		})
	}
}

func TestSessionIDFromClaudeCode(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	r.Header.Set(HeaderClaudeCodeSession, "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab")
	require.Equal(t, "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab", sessionID(r, ""))
	r.Header.Set(HeaderSession, "mine")
	require.Equal(t, "mine", sessionID(r, ""), "X-Session-Id wins")
	r.Header.Del(HeaderSession)
	r.Header.Set(HeaderClaudeCodeSession, "not valid")
	require.Empty(t, sessionID(r, ""))
}

// TestSessionIDFromCodex: Codex CLI's session_id header (and its older
// conversation_id) name the conversation as written, lower case and
// underscore; the body's id (prompt_cache_key) counts only without a
// header.
func TestSessionIDFromCodex(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/responses", nil)
	require.Equal(t, "from-body", sessionID(r, "from-body"))
	require.Empty(t, sessionID(r, "not valid"))
	r.Header.Set("conversation_id", "conv-1")
	require.Equal(t, "conv-1", sessionID(r, "from-body"))
	r.Header.Set("session_id", "019a9544-7ab1-73c1-837e-1fa681f4462b")
	require.Equal(t, "019a9544-7ab1-73c1-837e-1fa681f4462b", sessionID(r, "from-body"), "session_id wins over conversation_id")
	r.Header.Set(HeaderClaudeCodeSession, "cc")
	require.Equal(t, "cc", sessionID(r, "from-body"))

	// Codex's newer releases.
	r = httptest.NewRequest("POST", "/v1/responses", nil)
	r.Header.Set("thread-id", "t-1")
	require.Equal(t, "t-1", sessionID(r, "from-body"))
	r.Header.Set("session-id", "s-1")
	require.Equal(t, "s-1", sessionID(r, "from-body"))
}
