package httpapi

import "net/http"

// HeaderSession names the conversation a request belongs to. The decider
// keeps a conversation's later turns on the endpoint holding its prompt
// cache; without the header it recognises the conversation by its prompt.
const HeaderSession = "X-Session-Id"

// HeaderClaudeCodeSession is the session id Claude Code sends with every
// request of a session: the conversation, when HeaderSession is absent.
const HeaderClaudeCodeSession = "X-Claude-Code-Session-Id"

// The headers Codex CLI names its conversation by, with every request of
// it: "session_id" (with "conversation_id", the same id, in its older
// releases), or "session-id" and "thread-id" in its newer ones. They name
// the conversation when neither header above is present.
const (
	HeaderCodexSession      = "Session_id"
	HeaderCodexSessionID    = "Session-Id"
	HeaderCodexThread       = "Thread-Id"
	HeaderCodexConversation = "Conversation_id"
)

// sessionHeaders are the headers naming a request's conversation, the
// first present winning.
var sessionHeaders = []string{HeaderSession, HeaderClaudeCodeSession, HeaderCodexSession, HeaderCodexSessionID,
	HeaderCodexThread, HeaderCodexConversation}

// maxSessionID bounds a session id's length.
const maxSessionID = 128

// sessionID is the conversation the request names: the first of
// sessionHeaders present, else fromBody (what the body names, as the
// Responses API's prompt_cache_key), when it is a valid id: 1 to 128
// ASCII letters, digits, '-', '_', '.' or ':'. Anything else is ignored,
// not refused: the id only helps routing, and the conversation is still
// recognised by its prompt.
func sessionID(r *http.Request, fromBody string) string {
	s := fromBody
	for _, h := range sessionHeaders {
		if v := r.Header.Get(h); v != "" {
			s = v
			break
		}
	}
	if len(s) == 0 || len(s) > maxSessionID {
		return ""
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return ""
		}
	}
	return s
}
