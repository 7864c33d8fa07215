package httpapi

import "net/http"

// HeaderSession names the conversation a request belongs to. The decider
// keeps a conversation's later turns on the endpoint holding its prompt
// cache; without the header it recognises the conversation by its prompt.
const HeaderSession = "X-Session-Id"

// HeaderClaudeCodeSession is the session id Claude Code sends with every
// request of a session: the conversation, when HeaderSession is absent.
const HeaderClaudeCodeSession = "X-Claude-Code-Session-Id"

// maxSessionID bounds a session id's length.
const maxSessionID = 128

// sessionID is the request's X-Session-Id (else its
// X-Claude-Code-Session-Id) when it is a valid id: 1 to 128
// ASCII letters, digits, '-', '_', '.' or ':'. Anything else is ignored,
// not refused: the header only helps routing, and the conversation is
// still recognised by its prompt.
func sessionID(r *http.Request) string {
	s := r.Header.Get(HeaderSession)
	if s == "" {
		s = r.Header.Get(HeaderClaudeCodeSession)
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
