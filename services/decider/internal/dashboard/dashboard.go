// Package dashboard is the decider's web dashboard, served on its admin
// listener under /dashboard/: plain HTML, JavaScript and CSS embedded in
// the binary (static/), charts drawn by the vendored uPlot, and the JSON
// endpoints behind the pages under /dashboard/api/.
//
// Who may see what: an operator signs in with an operator token (a caller
// of role operator in the catalog) and sees the routing (each endpoint's
// first-token time per size bucket over time, price, traffic share,
// cool-downs, the current choice per bucket with its explanation) and the
// limits (hedge budget, broker buckets and queues); a tenant signs in with
// one of its API keys and sees only its own calls and spend. Sign-in sets
// a session cookie (HttpOnly, SameSite=Strict, Secure when the decider
// serves TLS) signed with a key drawn when the process starts, naming the
// role and the caller or tenant, never the credential, and expiring after
// Options.SessionTTL.
//
// The pages read what the gRPC API answers, in-process, with the context
// the auth interceptor would give the call (the catalog views pinned, the
// caller's principal): the tenant's calls and spend through
// RouterService.ListActivity; the operator's figures through
// OperatorService.GetEndpointStats, GetBroker (the broker's owner's, forwarded
// there) and Explain. A history of each endpoint's first-token times,
// sampled from GetEndpointStats every SampleEvery, is kept in memory for
// History.
package dashboard

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
)

//go:embed static
var static embed.FS

// Prefix is where the dashboard is mounted on the admin listener.
const Prefix = "/dashboard/"

// CookieName is the session cookie's name.
const CookieName = "switchboard_session"

// csp allows the pages nothing from another origin: scripts, styles,
// images and fetches from the dashboard itself only, no inline script, no
// framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// RPC is the decider's gRPC server, called in-process (server.Server).
type RPC interface {
	ListActivity(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error)
	Explain(ctx context.Context, req *switchboardv1.ExplainRequest) (*switchboardv1.ExplainResponse, error)
	GetEndpointStats(ctx context.Context, req *switchboardv1.GetEndpointStatsRequest) (*switchboardv1.GetEndpointStatsResponse, error)
	GetBroker(ctx context.Context, req *switchboardv1.GetBrokerRequest) (*switchboardv1.GetBrokerResponse, error)
}

// Options configure a [Dashboard].
type Options struct {
	// Catalog is the decider's applied catalog. (Required)
	Catalog *gate.Current
	// RPC serves every page's figures. (Required)
	RPC RPC
	// Secure marks the cookie Secure: the decider serves TLS, so whoever
	// reaches the admin listener does so behind TLS too. (Optional)
	Secure bool
	// SessionTTL is how long a session lasts. (Optional) Defaults to 30m.
	SessionTTL time.Duration
	// SampleEvery is how often the first-token times are sampled into the
	// history, and History how long the history keeps. (Optional)
	// Default 5s and 1h.
	SampleEvery, History time.Duration
	// Now is the clock. (Optional) Defaults to time.Now.
	Now func() time.Time
	// Logger logs sign-ins and refusals, never a credential. (Optional)
	Logger *slog.Logger
}

// Dashboard serves the pages and their JSON.
type Dashboard struct {
	o       Options
	seal    *sealer
	fails   *pacer
	hist    *history
	handler http.Handler
}

// New returns a dashboard; Run samples its history.
func New(o Options) *Dashboard {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 30 * time.Minute
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.History <= 0 {
		o.History = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{o: o, seal: newSealer(), fails: newPacer(), hist: newHistory(int(o.History / o.SampleEvery))}
	files, _ := fs.Sub(static, "static") // the embedded folder exists
	mux := http.NewServeMux()
	mux.Handle("GET /dashboard/static/", http.StripPrefix("/dashboard/static/", http.FileServerFS(files)))
	mux.HandleFunc("GET /dashboard/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	})
	mux.HandleFunc("POST /dashboard/api/session", d.signIn)
	mux.HandleFunc("DELETE /dashboard/api/session", d.signOut)
	mux.HandleFunc("GET /dashboard/api/session", d.who)
	mux.HandleFunc("GET /dashboard/api/operator/overview", d.operator(d.overview))
	mux.HandleFunc("GET /dashboard/api/operator/ttft", d.operator(d.ttft))
	mux.HandleFunc("GET /dashboard/api/operator/choices", d.operator(d.choices))
	mux.HandleFunc("GET /dashboard/api/operator/limits", d.operator(d.limits))
	mux.HandleFunc("GET /dashboard/api/tenant/calls", d.tenant(d.calls))
	mux.HandleFunc("GET /dashboard/api/tenant/spend", d.tenant(d.spend))
	mux.HandleFunc("/dashboard/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such dashboard API")
	})
	d.handler = headers(mux)
	return d
}

// Handler serves the dashboard under Prefix.
func (d *Dashboard) Handler() http.Handler { return d.handler }

// headers sets what every answer carries: the Content-Security-Policy and
// its companions.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(r.URL.Path, "/dashboard/api/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON writes v with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an error in OpenAI's format, as the edge's API does.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
}

// maxSignInBytes bounds a sign-in body: a credential and its JSON.
const maxSignInBytes = 4 << 10

// signIn takes {"credential": "..."}: an operator's bearer token or a
// tenant's API key. The answer names who signed in; the credential is
// neither stored, logged nor sent back.
func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "send the credential as JSON: {\"credential\": \"...\"}")
		return
	}
	var body struct {
		Credential string `json:"credential"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSignInBytes)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "send the credential as JSON: {\"credential\": \"...\"}")
		return
	}
	cred := strings.TrimSpace(body.Credential)
	if cred == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "enter an operator token or an API key")
		return
	}
	_, v := d.o.Catalog.Pin(r.Context())
	if v == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the decider is starting: try again in a moment")
		return
	}
	now, from := d.o.Now(), client(r.RemoteAddr)
	if d.fails.blocked(from, now) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "too many refused sign-ins from this address: try again in a moment")
		return
	}
	s, ok := d.identify(v, cred)
	if !ok {
		d.fails.refused(from, now)
		d.o.Logger.Warn("dashboard sign-in refused", "remote", r.RemoteAddr)
		writeError(w, http.StatusUnauthorized, "invalid_credential",
			"this credential is neither an operator token nor a tenant's API key of this decider's catalog")
		return
	}
	s.Expires = now.Add(d.o.SessionTTL).Unix()
	d.setCookie(w, d.seal.seal(s), int(d.o.SessionTTL/time.Second))
	d.o.Logger.Info("dashboard sign-in", "role", s.Role, "subject", s.Subject, "tenant", s.Tenant)
	writeJSON(w, whoAnswer(s))
}

// identify finds who cred signs in as: an operator caller's token, else a
// tenant's API key (by its SHA-256, as the catalog holds keys). A token of
// a caller of another role signs in no one.
func (d *Dashboard) identify(v *gate.Views, cred string) (session, bool) {
	if p := v.Auth.Caller(cred); p != nil {
		if p.Role != catalog.RoleOperator {
			return session{}, false
		}
		return session{Role: roleOperator, Subject: p.ID}, true
	}
	sum := sha256.Sum256([]byte(cred))
	id, err := v.Auth.Resolve(&switchboardv1.Identity{ApiKeySha256: hex.EncodeToString(sum[:])})
	if err != nil {
		return session{}, false
	}
	return session{Role: roleTenant, Subject: id.GetApiKeyId(), Tenant: id.GetTenantId()}, true
}

// setCookie sets the session cookie (maxAge -1 deletes it): HttpOnly,
// SameSite=Strict, for the dashboard's paths only, and Secure when the
// decider serves TLS. On a plain-HTTP decider it cannot be Secure: a
// browser would not keep it for a listener reached over plain HTTP.
func (d *Dashboard) setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: Secure follows the decider's TLS (above); HttpOnly and SameSite=Strict always.
		Name: CookieName, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, Secure: d.o.Secure, SameSite: http.SameSiteStrictMode,
	})
}

func whoAnswer(s session) map[string]any {
	return map[string]any{"role": s.Role, "subject": s.Subject, "tenant": s.Tenant, "expires": time.Unix(s.Expires, 0).UTC()}
}

func (d *Dashboard) signOut(w http.ResponseWriter, _ *http.Request) {
	d.setCookie(w, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

// who says who the request's session signed in as; without one (none,
// expired, not this process's) {"role": ""} and why, with status 200: the
// page asks before anyone signed in, which is no error.
func (d *Dashboard) who(w http.ResponseWriter, r *http.Request) {
	s, err := d.current(r)
	if err != nil {
		writeJSON(w, map[string]any{"role": "", "message": err.Error()})
		return
	}
	writeJSON(w, whoAnswer(s))
}

var (
	errNoSession = errors.New("sign in first")
	errGone      = errors.New("who this session signed in as is no longer in the catalog: sign in again")
)

// current is the request's session. A session whose operator or tenant
// the catalog no longer has has ended.
func (d *Dashboard) current(r *http.Request) (session, error) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return session{}, errNoSession
	}
	s, err := d.seal.open(c.Value, d.o.Now())
	if err != nil {
		return session{}, err
	}
	_, v := d.o.Catalog.Pin(r.Context())
	if v == nil || !d.stillValid(v, s) {
		return session{}, errGone
	}
	return s, nil
}

// session returns the request's session, or answers 401 and false.
func (d *Dashboard) session(w http.ResponseWriter, r *http.Request) (session, bool) {
	s, err := d.current(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return session{}, false
	}
	return s, true
}

func (d *Dashboard) stillValid(v *gate.Views, s session) bool {
	if s.Role == roleOperator {
		p := v.Auth.CallerByID(s.Subject)
		return p != nil && p.Role == catalog.RoleOperator
	}
	_, err := v.Auth.Resolve(&switchboardv1.Identity{TenantId: s.Tenant})
	return err == nil
}

// operator serves h to operator sessions only: a tenant's is refused.
func (d *Dashboard) operator(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return d.only(roleOperator, "operator pages need an operator's sign-in", h)
}

// tenant serves h to tenant sessions: the pages of one tenant's own calls.
func (d *Dashboard) tenant(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return d.only(roleTenant, "tenant pages show one tenant's calls: sign in with its API key", h)
}

// only serves h to sessions of role, refusing others with refusal.
func (d *Dashboard) only(role, refusal string, h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := d.session(w, r)
		if !ok {
			return
		}
		if s.Role != role {
			writeError(w, http.StatusForbidden, "permission_denied", refusal)
			return
		}
		h(w, r, s)
	}
}

// callContext is the context the auth interceptor would give a call of
// the session's caller: the catalog views pinned, and its principal. An
// operator acts as its catalog caller; a tenant as a caller acting for
// that tenant alone (role service, its one tenant), so the server's own
// scoping keeps it to its records.
func (d *Dashboard) callContext(ctx context.Context, v *gate.Views, s session) (context.Context, error) {
	if s.Role == roleOperator {
		p := v.Auth.CallerByID(s.Subject)
		if p == nil {
			return nil, errors.New("operator no longer in the catalog")
		}
		return auth.NewContext(ctx, p), nil
	}
	return auth.NewContext(ctx, &auth.Principal{ID: "dashboard:" + s.Tenant, Role: catalog.RoleService, Tenants: []string{s.Tenant}}), nil
}
