package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// The roles a session signs in as.
const (
	roleOperator = "operator"
	roleTenant   = "tenant"
)

// session is what the cookie carries, signed: who signed in and until
// when. Never the credential: an operator is named by its caller id, a
// tenant by its id and the id of the key it signed in with.
type session struct {
	Role    string `json:"r"`
	Subject string `json:"s"`
	Tenant  string `json:"t,omitempty"`
	Expires int64  `json:"e"`
}

// sealer signs and checks session cookies with a key of its own, drawn
// when the process starts: a restart signs everyone out.
type sealer struct {
	key [32]byte
}

func newSealer() *sealer {
	s := &sealer{}
	_, _ = rand.Read(s.key[:]) // never fails (crypto/rand)
	return s
}

var (
	errBadSession = errors.New("session cookie is not one this decider signed")
	errExpired    = errors.New("session expired: sign in again")
)

// seal returns the cookie value of v: base64url(JSON) "." base64url(HMAC-SHA256).
func (s *sealer) seal(v session) string {
	body, _ := json.Marshal(v) // a struct of strings and an int
	p := base64.RawURLEncoding.EncodeToString(body)
	return p + "." + base64.RawURLEncoding.EncodeToString(s.mac(p))
}

func (s *sealer) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// open checks a cookie value's signature and expiry at now and returns its session.
func (s *sealer) open(c string, now time.Time) (session, error) {
	p, sig, ok := strings.Cut(c, ".")
	if !ok {
		return session{}, errBadSession
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(p)) {
		return session{}, errBadSession
	}
	body, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return session{}, errBadSession
	}
	var v session
	if err := json.Unmarshal(body, &v); err != nil || (v.Role != roleOperator && v.Role != roleTenant) {
		return session{}, errBadSession
	}
	if now.Unix() >= v.Expires {
		return session{}, errExpired
	}
	return v, nil
}
