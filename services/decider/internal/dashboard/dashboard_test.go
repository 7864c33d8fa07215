package dashboard

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

const (
	opToken   = "op-secret-token-1"
	edgeToken = "edge-secret-token-1"
	acmeKey   = "sk-acme-key-1"
	globexKey = "sk-globex-key-1"
)

func testCatalog(withOperator bool) string {
	ops := ""
	if withOperator {
		ops = "  - {id: ops, role: operator, tokens_sha256: [" + catalog.HashKey(opToken) + "]}\n"
	}
	return `
models:
  - id: m
    endpoints:
      - {provider: alpha, base_url: "http://127.0.0.1:1/v1", price: {input: 1, output: 2}}
tenants:
  - {id: acme, api_keys_sha256: [` + catalog.HashKey(acmeKey) + `]}
  - {id: globex, api_keys_sha256: [` + catalog.HashKey(globexKey) + `]}
callers:
  - {id: edges, role: edge, tokens_sha256: [` + catalog.HashKey(edgeToken) + `]}
` + ops
}

func views(t *testing.T, yaml string) *gate.Views {
	t.Helper()
	v, err := gate.New(routing.Sources{}).Prepare([]byte(yaml))
	require.NoError(t, err)
	return v.At(1)
}

// fakeRPC answers as the server would and records who each call was for.
type fakeRPC struct {
	at    time.Time // when its records were made
	mu    sync.Mutex
	calls []string // "method principal-role:tenants identity-tenant"
}

func (f *fakeRPC) record(ctx context.Context, method, tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	who := "none"
	if p := auth.FromContext(ctx); p != nil {
		who = p.Role + ":" + strings.Join(p.Tenants, ",")
	}
	pinned := "unpinned"
	if gate.FromContext(ctx) != nil {
		pinned = "pinned"
	}
	f.calls = append(f.calls, method+" "+who+" "+tenant+" "+pinned)
}

func (f *fakeRPC) ListActivity(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	f.record(ctx, "ListActivity", req.GetIdentity().GetTenantId())
	tenant := req.GetIdentity().GetTenantId()
	return &switchboardv1.ListActivityResponse{Records: []*switchboardv1.ActivityRecord{
		{Id: "gen-1", TenantId: tenant, CreateTime: timestamppb.New(f.at), Model: "m", Provider: "alpha", CostUsd: 0.5,
			Status: switchboardv1.CallStatus_CALL_STATUS_OK, Grant: []byte("grant-bytes"), Duration: durationpb.New(time.Second)},
		{Id: "gen-other", TenantId: "someone-else", CreateTime: timestamppb.New(f.at), Status: switchboardv1.CallStatus_CALL_STATUS_OK},
	}}, nil
}

func (f *fakeRPC) Explain(ctx context.Context, req *switchboardv1.ExplainRequest) (*switchboardv1.ExplainResponse, error) {
	f.record(ctx, "Explain", req.GetIdentity().GetTenantId())
	return &switchboardv1.ExplainResponse{Endpoint: &switchboardv1.Endpoint{Id: "alpha/m"}}, nil
}

func (f *fakeRPC) GetEndpointStats(ctx context.Context, req *switchboardv1.GetEndpointStatsRequest) (*switchboardv1.GetEndpointStatsResponse, error) {
	f.record(ctx, "GetEndpointStats", req.GetTenantId())
	return &switchboardv1.GetEndpointStatsResponse{Models: []*switchboardv1.ModelStats{{Model: "m", Endpoints: []*switchboardv1.EndpointStats{{
		EndpointId: "alpha/m", Provider: "alpha", Price: &switchboardv1.Price{Input: 1, Output: 2}, TrafficShare: 1,
		Ttft: []*switchboardv1.BucketTtft{{Bucket: switchboardv1.SizeBucket_SIZE_BUCKET_UNDER_8K, Typical: durationpb.New(250 * time.Millisecond), Samples: 3}},
	}}}}}, nil
}

func (f *fakeRPC) GetBroker(ctx context.Context, _ *switchboardv1.GetBrokerRequest) (*switchboardv1.GetBrokerResponse, error) {
	f.record(ctx, "GetBroker", "")
	return &switchboardv1.GetBrokerResponse{Owner: "r1", HedgeBudget: &switchboardv1.HedgeBudget{DailyUsd: 5}}, nil
}

func (f *fakeRPC) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type fixture struct {
	d   *Dashboard
	cur *gate.Current
	rpc *fakeRPC
	now time.Time
	mu  sync.Mutex
}

func newFixture(t *testing.T, secure bool) *fixture {
	now := time.Unix(1_800_000_000, 0)
	f := &fixture{cur: gate.NewCurrent(views(t, testCatalog(true))), rpc: &fakeRPC{at: now.Add(-time.Minute)}, now: now}
	f.d = New(Options{Catalog: f.cur, RPC: f.rpc, Secure: secure, SessionTTL: 10 * time.Minute, SampleEvery: time.Second, History: 3 * time.Second,
		Now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }})
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fixture) do(method, path, body string, cookie *http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if cookie != nil {
		r.AddCookie(cookie)
	}
	w := httptest.NewRecorder()
	f.d.Handler().ServeHTTP(w, r)
	return w
}

func (f *fixture) signIn(t *testing.T, cred string) (*httptest.ResponseRecorder, *http.Cookie) {
	t.Helper()
	b, err := json.Marshal(map[string]string{"credential": cred})
	require.NoError(t, err)
	w := f.do(http.MethodPost, "/dashboard/api/session", string(b), nil)
	for _, c := range w.Result().Cookies() {
		if c.Name == CookieName {
			return w, c
		}
	}
	return w, nil
}

// noCredential checks that nothing the dashboard answered holds a
// credential or its digest.
func noCredential(t *testing.T, w *httptest.ResponseRecorder, creds ...string) {
	t.Helper()
	all := w.Body.String()
	for k, v := range w.Header() {
		all += k + ": " + strings.Join(v, ",") + "\n"
	}
	for _, c := range creds {
		assert.NotContains(t, all, c)
		assert.NotContains(t, all, catalog.HashKey(c))
	}
}

func TestSignInByRole(t *testing.T) {
	f := newFixture(t, false)
	w, c := f.signIn(t, opToken)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.NotNil(t, c)
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.False(t, c.Secure, "plain HTTP")
	assert.Equal(t, Prefix, c.Path)
	assert.Equal(t, 600, c.MaxAge)
	assert.Contains(t, w.Body.String(), `"role":"operator"`)
	noCredential(t, w, opToken)

	w, c = f.signIn(t, acmeKey)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `"tenant":"acme"`)
	noCredential(t, w, acmeKey)
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(c.Value, ".")[0])
	require.NoError(t, err)
	assert.Contains(t, string(payload), `"t":"acme"`, "the cookie names the tenant, not its key")

	for _, bad := range []string{edgeToken, "sk-unknown", catalog.HashKey(acmeKey)} {
		w, c = f.signIn(t, bad)
		assert.Equal(t, http.StatusUnauthorized, w.Code, "an edge's token, an unknown key, a key's digest")
		assert.Nil(t, c)
		assert.Contains(t, w.Body.String(), "neither an operator token nor a tenant's API key")
		noCredential(t, w, bad)
	}

	f2 := newFixture(t, true)
	_, c = f2.signIn(t, opToken)
	require.NotNil(t, c)
	assert.True(t, c.Secure, "Secure when the decider serves TLS")
}

func TestSignInBadRequests(t *testing.T) {
	f := newFixture(t, false)
	r := httptest.NewRequest(http.MethodPost, "/dashboard/api/session", strings.NewReader(`{"credential":"x"}`))
	w := httptest.NewRecorder()
	f.d.Handler().ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnsupportedMediaType, w.Code, "a form post from another site is no JSON")
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodPost, "/dashboard/api/session", "{", nil).Code)
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodPost, "/dashboard/api/session", `{"credential":"   "}`, nil).Code)
	big := `{"credential":"` + strings.Repeat("a", 8<<10) + `"}`
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodPost, "/dashboard/api/session", big, nil).Code)
	w = f.do(http.MethodGet, "/dashboard/api/operator/overview", "", nil)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	var e struct {
		Error struct{ Message, Type string }
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), "errors in OpenAI's format")
	assert.Equal(t, "sign in first", e.Error.Message)
}

func TestTamperedCookiesAreRefused(t *testing.T) {
	f := newFixture(t, false)
	_, c := f.signIn(t, acmeKey)
	require.NotNil(t, c)
	require.Equal(t, http.StatusOK, f.do(http.MethodGet, "/dashboard/api/tenant/calls", "", c).Code)

	payload, sig, _ := strings.Cut(c.Value, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	require.NoError(t, err)
	forged := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), `"r":"tenant"`, `"r":"operator"`, 1)))
	other := newFixture(t, false)
	_, foreign := other.signIn(t, opToken)
	for name, v := range map[string]string{
		"role changed":         forged + "." + sig,
		"tenant changed":       base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "acme", "globex", 1))) + "." + sig,
		"signature changed":    payload + "." + base64.RawURLEncoding.EncodeToString([]byte("not the mac")),
		"no signature":         payload,
		"garbage":              "!!!.???",
		"another process's":    foreign.Value,
		"expiry pushed, unsig": base64.RawURLEncoding.EncodeToString([]byte(`{"r":"operator","s":"ops","e":9999999999}`)) + "." + sig,
	} {
		w := f.do(http.MethodGet, "/dashboard/api/operator/overview", "", &http.Cookie{Name: CookieName, Value: v})
		assert.Equal(t, http.StatusUnauthorized, w.Code, name)
		w = f.do(http.MethodGet, "/dashboard/api/session", "", &http.Cookie{Name: CookieName, Value: v})
		assert.Contains(t, w.Body.String(), `"role":""`, name)
	}
}

func TestSessionsExpire(t *testing.T) {
	f := newFixture(t, false)
	_, c := f.signIn(t, opToken)
	require.NotNil(t, c)
	f.advance(9 * time.Minute)
	require.Equal(t, http.StatusOK, f.do(http.MethodGet, "/dashboard/api/operator/limits", "", c).Code)
	f.advance(time.Minute)
	w := f.do(http.MethodGet, "/dashboard/api/operator/limits", "", c)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, w.Body.String(), "expired")
}

func TestSessionEndsWithItsCaller(t *testing.T) {
	f := newFixture(t, false)
	_, c := f.signIn(t, opToken)
	require.NotNil(t, c)
	require.Equal(t, http.StatusOK, f.do(http.MethodGet, "/dashboard/api/operator/limits", "", c).Code)
	f.cur.Apply(views(t, testCatalog(false)), func(*gate.Views) {})
	w := f.do(http.MethodGet, "/dashboard/api/operator/limits", "", c)
	assert.Equal(t, http.StatusUnauthorized, w.Code, "the operator left the catalog")
}

func TestRolesKeepToTheirPages(t *testing.T) {
	f := newFixture(t, false)
	_, tenant := f.signIn(t, acmeKey)
	_, op := f.signIn(t, opToken)
	for _, p := range []string{"overview", "ttft?model=m", "choices?model=m&tenant=acme", "limits"} {
		assert.Equal(t, http.StatusForbidden, f.do(http.MethodGet, "/dashboard/api/operator/"+p, "", tenant).Code, p)
		assert.Equal(t, http.StatusOK, f.do(http.MethodGet, "/dashboard/api/operator/"+p, "", op).Code, p)
	}
	for _, p := range []string{"calls", "spend"} {
		assert.Equal(t, http.StatusForbidden, f.do(http.MethodGet, "/dashboard/api/tenant/"+p, "", op).Code, p)
	}

	w := f.do(http.MethodGet, "/dashboard/api/tenant/calls", "", tenant)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), "gen-1")
	assert.NotContains(t, w.Body.String(), "gen-other", "never another tenant's record")
	assert.NotContains(t, w.Body.String(), "grant", "the grant is not shown")
	w = f.do(http.MethodGet, "/dashboard/api/tenant/spend?hours=1", "", tenant)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `"total_usd":0.5`)
	for _, c := range f.rpc.seen() {
		if strings.HasPrefix(c, "ListActivity") {
			assert.Equal(t, "ListActivity service:acme acme pinned", c, "a tenant's calls are read as a caller acting for it alone")
		}
		if strings.HasPrefix(c, "GetBroker") {
			assert.Equal(t, "GetBroker operator:  pinned", c, "an operator's as its catalog caller")
		}
	}
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodGet, "/dashboard/api/tenant/calls?limit=0", "", tenant).Code)
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodGet, "/dashboard/api/tenant/calls?status=weird", "", tenant).Code)
	assert.Equal(t, http.StatusBadRequest, f.do(http.MethodGet, "/dashboard/api/tenant/spend?hours=1000", "", tenant).Code)
	assert.Equal(t, http.StatusNotFound, f.do(http.MethodGet, "/dashboard/api/operator/ttft?model=nope", "", op).Code)
}

func TestHeadersAndStaticFiles(t *testing.T) {
	f := newFixture(t, false)
	_, op := f.signIn(t, opToken)
	for path, ctype := range map[string]string{
		"/dashboard/":                                "text/html",
		"/dashboard/static/app.js":                   "javascript",
		"/dashboard/static/style.css":                "text/css",
		"/dashboard/static/vendor/uPlot.iife.min.js": "javascript",
		"/dashboard/static/vendor/uPlot.min.css":     "text/css",
		"/dashboard/api/operator/overview":           "application/json",
	} {
		w := f.do(http.MethodGet, path, "", op)
		require.Equal(t, http.StatusOK, w.Code, path)
		assert.Contains(t, w.Header().Get("Content-Type"), ctype, path)
		csp := w.Header().Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", path)
		assert.Contains(t, csp, "script-src 'self'", path)
		assert.NotContains(t, csp, "unsafe-inline", path)
		assert.NotContains(t, csp, "http", path, "no other origin")
		assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), path)
		assert.Equal(t, "DENY", w.Header().Get("X-Frame-Options"), path)
	}
	w := f.do(http.MethodGet, "/dashboard/", "", nil)
	body, err := io.ReadAll(w.Result().Body)
	require.NoError(t, err)
	assert.NotContains(t, string(body), "<script>", "no inline script")
	assert.NotContains(t, string(body), "style=", "no inline style")
	assert.NotContains(t, string(body), "//", "no URL of another origin")
	assert.Equal(t, http.StatusNotFound, f.do(http.MethodGet, "/dashboard/api/nothing", "", op).Code)
	assert.Equal(t, "no-store", f.do(http.MethodGet, "/dashboard/api/session", "", op).Header().Get("Cache-Control"))
}

func TestHistoryIsBounded(t *testing.T) {
	f := newFixture(t, false) // History 3s / SampleEvery 1s: 3 samples
	for range 5 {
		f.d.Sample(context.Background(), f.now)
		f.advance(time.Second)
	}
	s := f.d.hist.samples()
	require.Len(t, s, 3)
	for i := 1; i < len(s); i++ {
		assert.True(t, s[i].at.After(s[i-1].at), "oldest first")
	}
	assert.Equal(t, f.now.Add(-time.Second), s[2].at)
	_, op := f.signIn(t, opToken)
	w := f.do(http.MethodGet, "/dashboard/api/operator/ttft?model=m", "", op)
	require.Equal(t, http.StatusOK, w.Code)
	var got struct {
		Times  []int64
		Series [][]struct {
			Endpoint string
			Values   []*float64
		}
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.Len(t, got.Times, 4, "the history and now")
	require.Len(t, got.Series, 4, "a series set per size bucket")
	require.Equal(t, "alpha/m", got.Series[0][0].Endpoint)
	require.NotNil(t, got.Series[0][0].Values[3])
	assert.InDelta(t, 250, *got.Series[0][0].Values[3], 1e-9)
	assert.Nil(t, got.Series[1][0].Values[3], "no figure for 8k-32k")
}

func TestRefusedSignInsArePaced(t *testing.T) {
	f := newFixture(t, false)
	for i := range failBurst {
		w, _ := f.signIn(t, "sk-guess")
		require.Equal(t, http.StatusUnauthorized, w.Code, "guess %d", i)
	}
	w, c := f.signIn(t, opToken)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "even a right credential waits once the guesses are used up")
	assert.Nil(t, c)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	f.advance(failEvery)
	w, c = f.signIn(t, opToken)
	require.Equal(t, http.StatusOK, w.Code)
	require.NotNil(t, c)
	w, _ = f.signIn(t, "sk-guess")
	assert.Equal(t, http.StatusUnauthorized, w.Code, "the second's allowance")
	w, _ = f.signIn(t, "sk-guess")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)

	r := httptest.NewRequest(http.MethodPost, "/dashboard/api/session", strings.NewReader(`{"credential":"`+opToken+`"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "192.0.2.7:4000"
	rec := httptest.NewRecorder()
	f.d.Handler().ServeHTTP(rec, r)
	assert.Equal(t, http.StatusOK, rec.Code, "another address is not held up")
}

func TestPacerForgetsTheIdle(t *testing.T) {
	p := newPacer()
	now := time.Unix(0, 0)
	for i := range maxClients {
		p.refused("10.0.0."+strconv.Itoa(i), now)
	}
	require.Len(t, p.clients, maxClients)
	p.refused("newcomer", now.Add(time.Minute))
	assert.Len(t, p.clients, 1, "the refilled are forgotten")
	assert.False(t, p.blocked("newcomer", now.Add(time.Minute)))
}
