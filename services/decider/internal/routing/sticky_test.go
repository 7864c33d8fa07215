package routing

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// A conversation whose last turn (prompt hash 7) the reseller served. With
// every endpoint equally fast, the smart policy would move it to fast,
// whose cache reads are cheapest over the turns to come.
var conversation = []*switchboardv1.PromptPrefix{{Hash: 3, Tokens: 2000}, {Hash: 7, Tokens: 60000}}

// stickyCatalog is policyCatalog with a reseller whose cache reads, dearer
// than fast's, keep its cost for a conversation's turn within the
// competitive margin (10%) of fast's: the policy alone would move the
// conversation to fast (by 4%), the sticky step keeps it on its cache.
// With policyCatalog's reseller (cache reads at 0.07) the turn costs 15%
// more there than on fast, and the conversation moves.
const stickyCatalog = `
models:
  - id: m
    list_price: {input: 1.00, cached_input: 0.25, output: 4.00}
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.05,   output: 0.80}}
      - {provider: fast,     base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.0013, output: 1.10}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.21, cached_input: 0.063,  output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`

// stickyEnv is a policy environment and a twin without stickiness, fed the
// same statistics, so a test can say "the policy's ranking" without
// restating it.
type stickyEnv struct {
	*policyEnv
	twin *policyEnv
}

func newSticky(t *testing.T, yaml string, o Options) *stickyEnv {
	t.Helper()
	off := o
	off.NoSticky = true
	return &stickyEnv{policyEnv: newPolicy(t, yaml, o), twin: newPolicy(t, yaml, off)}
}

func (e *stickyEnv) each(f func(*policyEnv)) { f(e.policyEnv); f(e.twin) }

func (e *stickyEnv) advance(d time.Duration) { e.each(func(p *policyEnv) { p.now = p.now.Add(d) }) }

func (e *stickyEnv) speeds(ttft map[string]time.Duration) {
	e.each(func(p *policyEnv) {
		for prov, d := range ttft {
			p.speed(prov, long, d, 12)
		}
	})
}

func (e *stickyEnv) served(provider string, hash uint64) {
	e.each(func(p *policyEnv) { p.aff.Record(provider+"/m", hash, 60000, p.now) })
}

// policyOrder is what the policy alone ranks for req.
func (e *stickyEnv) policyOrder(t *testing.T, req *switchboardv1.DecideRequest) []string {
	t.Helper()
	return order(e.twin.decide(t, proto.CloneOf(req)))
}

func turn(explain bool) *switchboardv1.DecideRequest {
	return &switchboardv1.DecideRequest{Explain: explain, Tokens: &switchboardv1.TokenEstimate{InputTokens: long, MaxOutputTokens: 100, Prefixes: conversation}}
}

func noteOf(resp *switchboardv1.DecideResponse, provider string) string {
	for _, c := range resp.Decision.Candidates {
		if c.Provider == provider {
			return c.Note
		}
	}
	return ""
}

// moveFirst is order with provider moved to the front.
func moveFirst(order []string, provider string) []string {
	out := []string{provider}
	for _, p := range order {
		if p != provider {
			out = append(out, p)
		}
	}
	return out
}

func TestStickyByPrefixes(t *testing.T) {
	allFast := map[string]time.Duration{"cheap": time.Second, "fast": time.Second, "reseller": time.Second}
	tests := []struct {
		name    string
		o       Options
		setup   func(e *stickyEnv)
		req     func(r *switchboardv1.DecideRequest)
		kept    bool
		summary string // the sticky word in the summary, "" for none
		note    string // in the reseller's note
	}{
		{name: "kept on the endpoint of the last turn", kept: true, summary: "sticky=kept", note: "kept: holds this conversation's prompt cache (recognised by its prompt prefixes, last turn 0s ago)"},
		{
			name:  "still kept within the TTL",
			setup: func(e *stickyEnv) { e.advance(9 * time.Minute) },
			kept:  true, summary: "sticky=kept", note: "last turn 9m0s ago",
		},
		{
			name: "each turn starts the TTL again",
			setup: func(e *stickyEnv) {
				e.advance(8 * time.Minute)
				e.served("reseller", 3) // a turn whose prompt is a prefix of this one
				e.advance(8 * time.Minute)
			},
			kept: true, summary: "sticky=kept", note: "last turn 8m0s ago",
		},
		{name: "past the TTL the policy chooses", setup: func(e *stickyEnv) { e.advance(10*time.Minute + time.Second) }},
		{name: "a shorter TTL", o: Options{StickyTTL: time.Minute}, setup: func(e *stickyEnv) { e.advance(61 * time.Second) }},
		{name: "stickiness off", o: Options{NoSticky: true}},
		{
			name:    "cooling down",
			setup:   func(e *stickyEnv) { e.each(func(p *policyEnv) { p.cool.Refused("reseller/m", p.now) }) },
			summary: "sticky=no:cooling_down", note: "not kept: cooling down",
		},
		{
			name: "excluded by provider.only",
			req: func(r *switchboardv1.DecideRequest) {
				r.Provider = &switchboardv1.ProviderPreferences{Only: []string{"cheap", "fast"}}
			},
			summary: "sticky=no:unavailable", note: "not in provider.only; served this conversation's last turn",
		},
		{
			name: "provider.ignore of another endpoint keeps it",
			req: func(r *switchboardv1.DecideRequest) {
				r.Provider = &switchboardv1.ProviderPreferences{Ignore: []string{"cheap"}}
			},
			kept: true, summary: "sticky=kept",
		},
		{
			name: "provider.order wins",
			req: func(r *switchboardv1.DecideRequest) {
				r.Provider = &switchboardv1.ProviderPreferences{Order: []string{"cheap"}}
			},
			summary: "sticky=no:user_choice", note: "the request chose its own order or sort",
		},
		{
			name: "provider.sort wins",
			req: func(r *switchboardv1.DecideRequest) {
				r.Provider = &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_THROUGHPUT}
			},
			summary: "sticky=no:user_choice",
		},
		{name: ":nitro wins", req: func(r *switchboardv1.DecideRequest) { r.Model = "m:nitro" }, summary: "sticky=no:user_choice"},
		{
			name:    "too slow for this size",
			setup:   func(e *stickyEnv) { e.speeds(map[string]time.Duration{"reseller": 10 * time.Second}) },
			summary: "sticky=no:too_slow", note: "not kept: too slow for this prompt size (5.5s, the bar is 2s)",
		},
		{
			name: "misses preferred_max_latency",
			setup: func(e *stickyEnv) {
				e.speeds(map[string]time.Duration{"reseller": 1500 * time.Millisecond})
			},
			req: func(r *switchboardv1.DecideRequest) {
				r.Provider = &switchboardv1.ProviderPreferences{PreferredMaxLatency: durationpb.New(1200 * time.Millisecond)}
			},
			summary: "sticky=no:misses_preferences",
		},
		{
			name:    "the policy's choice holds the prompt too",
			setup:   func(e *stickyEnv) { e.served("fast", 7); e.served("reseller", 7) },
			summary: "sticky=policy_choice_warm", note: "the policy's choice holds its prompt cache too",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newSticky(t, stickyCatalog, tt.o)
			e.speeds(allFast)
			e.served("reseller", 7)
			if tt.setup != nil {
				tt.setup(e)
			}
			req := turn(true)
			if tt.req != nil {
				tt.req(req)
			}
			policy := e.policyOrder(t, req)
			resp := e.decide(t, req)
			if tt.kept {
				require.NotEqual(t, "reseller", policy[0], "the test needs a policy that would move the conversation")
				require.Equal(t, moveFirst(policy, "reseller"), order(resp), "kept first, the policy's ranking behind it for retries")
			} else {
				require.Equal(t, policy, order(resp), "the policy's ranking, untouched")
			}
			if tt.summary == "" {
				require.NotContains(t, resp.Decision.Summary, "sticky=")
			} else {
				require.True(t, strings.HasSuffix(resp.Decision.Summary, " "+tt.summary), resp.Decision.Summary)
			}
			require.Contains(t, noteOf(resp, "reseller"), tt.note)
		})
	}
}

func TestStickyNeedsACacheDiscount(t *testing.T) {
	const noDiscount = `
models:
  - id: m
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.05, output: 0.80}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.25, output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`
	e := newSticky(t, noDiscount, Options{})
	e.speeds(map[string]time.Duration{"cheap": time.Second, "reseller": time.Second})
	e.served("reseller", 7)
	resp := e.decide(t, turn(true))
	require.Equal(t, []string{"cheap", "reseller"}, order(resp))
	require.Contains(t, resp.Decision.Summary, "sticky=no:no_cache_discount")
	require.Contains(t, noteOf(resp, "reseller"), "its cached input (0.25) is no cheaper than its input (0.25)")
}

func TestStickyBySessionID(t *testing.T) {
	e := newSticky(t, stickyCatalog, Options{})
	e.speeds(map[string]time.Duration{"cheap": time.Second, "fast": time.Second, "reseller": time.Second})
	ask := func(session, tenant, requestID string, only ...string) *switchboardv1.DecideResponse {
		req := &switchboardv1.DecideRequest{Model: "m", RequestId: requestID, SessionId: session, Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}}
		if len(only) > 0 {
			req.Provider = &switchboardv1.ProviderPreferences{Only: only}
		}
		resp, err := e.r.Decide(req, &switchboardv1.Identity{TenantId: tenant})
		require.NoError(t, err)
		return resp
	}
	policy := e.policyOrder(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "cheap", policy[0])

	// The first turn is the policy's (here limited to the reseller).
	first := ask("s1", "acme", "r1", "reseller")
	require.Equal(t, "reseller", first.Endpoint.Provider)
	require.Contains(t, first.Decision.Summary, "sticky=new")

	// Later turns stay, each starting the TTL again.
	for range 3 {
		e.advance(9 * time.Minute)
		resp := ask("s1", "acme", "")
		require.Equal(t, moveFirst(policy, "reseller"), order(resp))
		require.Contains(t, resp.Decision.Summary, "sticky=kept")
		require.Contains(t, noteOf(resp, "reseller"), "recognised by session id, last turn 9m0s ago")
	}

	// Another tenant's session of the same name is its own conversation.
	require.Equal(t, "cheap", ask("s1", "other", "").Endpoint.Provider)
	// So is another session of the tenant.
	require.Equal(t, "cheap", ask("s2", "acme", "").Endpoint.Provider)

	// A dry run records nothing.
	_, err := e.r.Decide(&switchboardv1.DecideRequest{Model: "m", SessionId: "s3", DryRun: true, Provider: &switchboardv1.ProviderPreferences{Only: []string{"fast"}}}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	require.Equal(t, "cheap", ask("s3", "acme", "").Endpoint.Provider)

	// Past the TTL the policy chooses again.
	e.advance(10*time.Minute + time.Second)
	resp := ask("s1", "acme", "r5")
	require.Equal(t, policy, order(resp))
	require.Contains(t, resp.Decision.Summary, "sticky=new")

	// That turn's first endpoint failed and a fallback answered: the
	// conversation follows the fallback, which holds its prompt now.
	e.r.o.Sessions.Served("r5", "reseller/m", e.now)
	e.advance(time.Minute)
	require.Equal(t, moveFirst(policy, "reseller"), order(ask("s1", "acme", "")))

	// Had fast served it, a turn there would cost 50% more than on cheap
	// (no prefixes, so no cache evidence): the conversation moves.
	e.r.o.Sessions.Keep("acme", "m", "s1", "", "fast/m", e.now)
	resp = ask("s1", "acme", "")
	require.Equal(t, policy, order(resp))
	require.Contains(t, resp.Decision.Summary, "sticky=no:cheaper_alternative")
	e.r.o.Sessions.Keep("acme", "m", "s1", "", "reseller/m", e.now)

	// Cooling down: the policy's ranking, the cooling endpoint behind.
	e.cool.Refused("reseller/m", e.now)
	resp = ask("s1", "acme", "")
	require.Equal(t, "cheap", resp.Endpoint.Provider)
	require.Contains(t, resp.Decision.Summary, "sticky=no:cooling_down")
	require.Equal(t, "reseller", order(resp)[len(order(resp))-1])
}

// TestStickyNeverBuysAWorseDeal: a conversation stays on its warm endpoint
// only while that endpoint's cost for this turn, with its cache, is within
// the competitive margin of the best qualifying alternative's, and never
// when another qualifying endpoint holds the prefix too and costs less.
func TestStickyNeverBuysAWorseDeal(t *testing.T) {
	allFast := map[string]time.Duration{"cheap": time.Second, "fast": time.Second, "reseller": time.Second}
	// threeWarm: for the conversation's turn, cheap (cold) costs least,
	// fast (warm too) 1.5% more and the reseller (warm) 8.6% more, within
	// the margin of cheap.
	const threeWarm = `
models:
  - id: m
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.30, cached_input: 0.0064, output: 1.00}}
      - {provider: fast,     base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.065,  output: 1.00}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.25, cached_input: 0.07,   output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`
	withMargin := strings.Replace(policyCatalog, "  - id: m\n", "  - id: m\n    routing: {competitive_margin: 0.20}\n", 1)
	tests := []struct {
		name    string
		catalog string
		setup   func(e *stickyEnv)
		kept    bool
		summary string
		note    string // in the reseller's note
	}{
		{name: "within the margin the warm endpoint stays", catalog: stickyCatalog, kept: true, summary: "sticky=kept"},
		{
			name: "beyond the margin the conversation moves", catalog: policyCatalog, summary: "sticky=no:cheaper_alternative",
			note: "not kept: fast is cheaper beyond the 10% competitive margin (cost with each one's cache, this turn and the next 0.0193",
		},
		{name: "the model's competitive margin applies", catalog: withMargin, kept: true, summary: "sticky=kept"},
		{
			name: "another warm endpoint costing less wins, whatever the margin", catalog: threeWarm,
			setup: func(e *stickyEnv) {
				// fast served this prompt's prefix inside a longer prompt of
				// another conversation: warm, but not this conversation's.
				e.each(func(p *policyEnv) {
					p.aff.Served("fast/m", 0, 0, []*switchboardv1.PromptPrefix{{Hash: 7, Tokens: 60000}}, p.now)
				})
			},
			summary: "sticky=no:cheaper_alternative", note: "not kept: fast holds this prompt's prefix too and is cheaper",
		},
		{
			name: "without it the margin keeps the conversation", catalog: threeWarm, kept: true, summary: "sticky=kept",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newSticky(t, tt.catalog, Options{})
			e.speeds(allFast)
			e.served("reseller", 7)
			if tt.setup != nil {
				tt.setup(e)
			}
			req := turn(true)
			policy := e.policyOrder(t, req)
			require.NotEqual(t, "reseller", policy[0], "the test needs a policy that would move the conversation")
			resp := e.decide(t, req)
			if tt.kept {
				require.Equal(t, moveFirst(policy, "reseller"), order(resp), "kept first, the policy's ranking behind it")
			} else {
				require.Equal(t, policy, order(resp), "the policy's ranking, untouched")
			}
			require.True(t, strings.HasSuffix(resp.Decision.Summary, " "+tt.summary), resp.Decision.Summary)
			require.Contains(t, noteOf(resp, "reseller"), tt.note)
		})
	}
}

func TestStickyOffRecordsNothing(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{NoSticky: true})
	_, err := e.r.Decide(&switchboardv1.DecideRequest{Model: "m", SessionId: "s", Provider: &switchboardv1.ProviderPreferences{Only: []string{"fast"}}}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	require.Zero(t, e.r.o.Sessions.Len())
	resp := e.decide(t, &switchboardv1.DecideRequest{SessionId: "s"})
	require.NotContains(t, resp.Decision.Summary, "sticky=")
}

func TestStickyKeepsFallbacksRanked(t *testing.T) {
	// A failed attempt retries on the next-ranked endpoint: the edge tries
	// the fallbacks in the order given, which is the policy's after the
	// kept endpoint, cooling ones last.
	e := newSticky(t, stickyCatalog, Options{})
	e.speeds(map[string]time.Duration{"cheap": time.Second, "fast": time.Second, "reseller": time.Second})
	e.served("reseller", 7)
	policy := e.policyOrder(t, turn(false))
	resp := e.decide(t, turn(false))
	got := order(resp)
	require.Equal(t, "reseller", got[0])
	require.Equal(t, slices.DeleteFunc(slices.Clone(policy), func(p string) bool { return p == "reseller" }), got[1:])
}

// BenchmarkDecideSticky is Decide's cost for a conversation's turn: kept on
// the endpoint of its last turn, recognised by its prompt prefixes or by
// its session id, against the same turn with stickiness off.
func BenchmarkDecideSticky(b *testing.B) {
	for _, bc := range []struct {
		name    string
		o       Options
		session string
	}{
		{name: "off", o: Options{NoSticky: true}},
		{name: "by prefixes"},
		{name: "by session id", session: "conv-1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newPolicy(b, policyCatalog, bc.o)
			for _, p := range []string{"cheap", "fast", "reseller"} {
				e.speed(p, long, time.Second, 12)
			}
			e.aff.Record("reseller/m", 7, 60000, e.now)
			id := &switchboardv1.Identity{TenantId: "acme"}
			req := &switchboardv1.DecideRequest{Model: "m", SessionId: bc.session, RequestId: "r",
				Tokens: &switchboardv1.TokenEstimate{InputTokens: long, MaxOutputTokens: 100, Prefixes: conversation}}
			if bc.session != "" {
				e.r.o.Sessions.Keep("acme", "m", bc.session, "", "reseller/m", e.now)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.r.Decide(req, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
