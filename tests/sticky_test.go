package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// frugalKey is the key of a tenant whose account routes by price.
const frugalKey = "sk-e2e-frugal-tenant-key"

// stickySystem is pairSim (warm and plain, equally fast, both caching)
// behind a decider whose clock the test moves forward, and an edge.
type stickySystem struct {
	*stack
	etcd *clientv3.Client
	// offset is added to the decider's clock: how the test lets time pass.
	offset atomic.Int64
}

// catalog is the sticky tests' catalog with warm and plain at the given prices.
func (s *stickySystem) catalog(warmPrice, plainPrice string) string {
	return withCallers(stickyCatalog(func(p string) string { return s.sim.Provider(p).URL() }, warmPrice, plainPrice))
}

func stickyCatalog(url func(string) string, warmPrice, plainPrice string) string {
	return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: warm,  base_url: %[2]s, upstream_model: sim-model, context_length: 200000, price: %[3]s}
      - {provider: plain, base_url: %[4]s, upstream_model: sim-model, context_length: 200000, price: %[5]s}
tenants:
  - {id: acme, api_keys_sha256: [%[6]s]}
  - {id: globex, api_keys_sha256: [%[7]s]}
  - {id: frugal, api_keys_sha256: [%[8]s], routing: {sort: price}}
`, model, url("warm"), warmPrice, url("plain"), plainPrice,
		catalog.HashKey(testKey), catalog.HashKey(otherKey), catalog.HashKey(frugalKey))
}

func startSticky(t *testing.T, warmPrice, plainPrice string) *stickySystem {
	t.Helper()
	s := &stickySystem{}
	s.stack = startStack(t, stackOptions{sim: pairSim,
		catalog: func(url func(string) string) string { return stickyCatalog(url, warmPrice, plainPrice) },
		tune: func(c *deciderapp.Config) {
			c.Cooldown, c.CooldownErrors, c.CooldownWindow = 15*time.Minute, 1, time.Minute
			c.Now = func() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }
		}})
	var err error
	s.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{s.decider.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.etcd.Close() })
	return s
}

// post sends a chat request with key and extra headers, streamed: only a
// stream measures a first token, and learnt counts first-token samples to
// know a call was reported. It returns the serving provider and the route
// summary.
func (s *stickySystem) post(t *testing.T, key, body string, header ...string) (provider, route string) {
	t.Helper()
	provider, route, _ = s.postTo(t, "/chat/completions", key, body, header...)
	return provider, route
}

// postTo sends a request to the API path, streamed, with key and the
// header pairs, and returns the serving provider, the route summary and
// the stream.
func (s *stickySystem) postTo(t *testing.T, path, key, body string, header ...string) (provider, route, stream string) {
	t.Helper()
	return postStreamed(t, s.edge.URL()+path, key, body, header...)
}

// postStreamed sends body to url streamed, with key and the header pairs,
// requires a 200, and returns the serving provider, the route summary and
// the stream.
func postStreamed(t *testing.T, url, key, body string, header ...string) (provider, route, stream string) {
	t.Helper()
	body = strings.Replace(body, "{", `{"stream":true,`, 1)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	return resp.Header.Get("X-Switchboard-Provider"), resp.Header.Get("X-Switchboard-Route"), string(raw)
}

// dryRun is what the decider would do for a request of the session, without
// recording anything. Like the edge's requests it carries a prompt prefix
// (one nobody served), so it is priced by the same rule as they are: with
// prefixes and no evidence, uncached everywhere — not by each endpoint's
// cache-hit rate over other conversations, which moves as reports arrive.
func (s *stickySystem) dryRun(t *testing.T, session string) string {
	t.Helper()
	return sessionDryRun(t, s.rpc, session, stickyPromptTokens)
}

// sessionDryRun is the summary of what the decider would do for a request
// of promptTokens in the session, without recording anything: its
// "sticky=" word says whether it knows the session as a conversation.
func sessionDryRun(t *testing.T, rpc switchboardv1.DeciderClient, session string, promptTokens int64) string {
	t.Helper()
	resp, err := rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model, SessionId: session,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: promptTokens, MaxOutputTokens: 4,
			Prefixes: []*switchboardv1.PromptPrefix{{Hash: 0x5e55, Tokens: promptTokens}}},
	})
	require.NoError(t, err)
	return resp.GetDecision().GetSummary()
}

// samples is how many calls of this size the decider has learnt from, per provider.
func (s *stickySystem) samples(t *testing.T) map[string]int64 {
	t.Helper()
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: stickyPromptTokens, MaxOutputTokens: 4},
	})
	require.NoError(t, err)
	out := map[string]int64{}
	for _, c := range resp.GetDecision().GetCandidates() {
		out[c.GetProvider()] = c.GetSamples()
	}
	return out
}

// learnt waits until the decider has taken in the report of provider's
// call number n at this size: where a conversation was served is known
// from its reports. It counts the samples inside the statistics' window,
// timed by the edge's clock: only while the test has moved the decider's
// clock less than a window ahead of it.
func (s *stickySystem) learnt(t *testing.T, provider string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return s.samples(t)[provider] >= n }, waitFor, tick, "%s's call %d reported", provider, n)
}

// setCatalog stores new prices in etcd and waits until the decider routes by them.
func (s *stickySystem) setCatalog(t *testing.T, warmPrice, plainPrice, fresh string) {
	t.Helper()
	_, err := s.etcd.Put(t.Context(), "/switchboard/v1/catalog", s.catalog(warmPrice, plainPrice))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		// A prompt nobody served: priced uncached everywhere.
		resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: stickyPromptTokens, MaxOutputTokens: 4,
				Prefixes: []*switchboardv1.PromptPrefix{{Hash: 0x5eed, Tokens: stickyPromptTokens}}},
		})
		require.NoError(t, err)
		return resp.GetEndpoint().GetProvider() == fresh
	}, waitFor, tick, "the decider takes the new catalog")
}

const stickyPromptTokens = 4096

// TestStickyConversations: a conversation's turns stay on the endpoint of
// its first turn (the policy's choice) while another endpoint becomes
// cheaper for new requests; they move when the conversation has been idle
// past the sticky TTL, and when the endpoint fails and cools down. An
// X-Session-Id header names a conversation whatever its prompt. A tenant
// whose account sorts by price is routed by price.
func TestStickyConversations(t *testing.T) {
	// plain is the cheaper for a fresh prompt; warm reads its cache cheaper.
	s := startSticky(t, "{input: 0.20, cached_input: 0.02, output: 0.80}", "{input: 0.12, cached_input: 0.03, output: 0.80}")
	system := `{"role":"system","content":"` + longPrompt(stickyPromptTokens) + `"}`
	msgs := system
	turn := func(n int) (string, string) {
		msgs += fmt.Sprintf(`,{"role":"user","content":"question %d"}`, n)
		p, route := s.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"messages":[`+msgs+`]}`)
		msgs += `,{"role":"assistant","content":"answer"}`
		return p, route
	}
	served := map[string]int64{}
	afterTurn := func(p string) {
		served[p]++
		s.learnt(t, p, served[p])
	}

	// Both are measured (equally fast), so both qualify for the policy.
	for _, p := range []string{"warm", "plain"} {
		got, _ := s.post(t, otherKey, chat("measure-"+p, stickyPromptTokens, `"provider":{"only":["`+p+`"]},`))
		require.Equal(t, p, got)
		afterTurn(p)
	}

	// The first turn is the policy's: plain, cheaper for a fresh prompt.
	p, route := turn(1)
	require.Equal(t, "plain", p, route)
	require.NotContains(t, route, "sticky=", "a first turn belongs to no conversation yet")
	afterTurn(p)
	p, route = turn(2)
	require.Equal(t, "plain", p, route)
	require.Contains(t, route, "sticky=kept")
	afterTurn(p)
	require.Positive(t, s.sim.Provider("plain").Stats().Models[simModel].CachedTokens, "plain really served the turn from its cache")

	// warm becomes cheaper: new requests go there... (A conversation's
	// turn there, over the turns to come, costs about 5 % less than on
	// plain with its cache: within the competitive margin, so stickiness
	// keeps it; TestStickyMovesOffADearCache is the case beyond it.)
	s.setCatalog(t, "{input: 0.11, cached_input: 0.008, output: 0.80}", "{input: 0.12, cached_input: 0.03, output: 0.80}", "warm")
	p, _ = s.post(t, otherKey, chat("fresh-1", stickyPromptTokens, ""))
	require.Equal(t, "warm", p)
	afterTurn(p)
	// ...and the conversation stays where its prompt is cached.
	for n := 3; n <= 4; n++ {
		p, route = turn(n)
		require.Equal(t, "plain", p, route)
		require.Contains(t, route, "sticky=kept")
		afterTurn(p)
	}

	// Idle past the TTL (10 minutes): the policy chooses again, and the
	// conversation stays on its new endpoint.
	s.offset.Add(int64(10*time.Minute + time.Second))
	p, route = turn(5)
	require.Equal(t, "warm", p, route)
	require.NotContains(t, route, "sticky=")
	afterTurn(p)
	p, route = turn(6)
	require.Equal(t, "warm", p, route)
	require.Contains(t, route, "sticky=kept")
	afterTurn(p)

	t.Run("a tenant whose account sorts by price", func(t *testing.T) {
		p, route := s.post(t, frugalKey, chat("frugal-1", stickyPromptTokens, ""))
		require.Equal(t, "warm", p)
		require.Contains(t, route, "reason=user_sort", "the account's sort, not the policy")
		afterTurn(p)
		p, route = s.post(t, frugalKey, chat("frugal-2", stickyPromptTokens, `"provider":{"order":["plain"]},`))
		require.Equal(t, "plain", p, "the request's own order wins over the account's sort")
		require.Contains(t, route, "reason=user_order")
		afterTurn(p)
		_, route = s.post(t, testKey, chat("acme-1", stickyPromptTokens, ""))
		require.NotContains(t, route, "reason=user_sort", "other tenants keep the policy")
	})

	t.Run("X-Session-Id", func(t *testing.T) {
		const session = "conv-7"
		// The first turn, limited to plain by provider.only (the policy
		// picks among what is left).
		p, route := s.post(t, testKey, chat("session-1", stickyPromptTokens, `"provider":{"only":["plain"]},`), "X-Session-Id", session)
		require.Equal(t, "plain", p)
		require.Contains(t, route, "sticky=new")
		// A turn with an unrelated prompt is the same conversation by its
		// session id: it stays on plain, though warm is cheaper (by 8 %,
		// within the competitive margin).
		p, route = s.post(t, testKey, chat("session-2", stickyPromptTokens, ""), "X-Session-Id", session)
		require.Equal(t, "plain", p, route)
		require.Contains(t, route, "sticky=kept")
		// Without the header that prompt is a new one: warm.
		p, _ = s.post(t, testKey, chat("session-3", stickyPromptTokens, ""))
		require.Equal(t, "warm", p)

		// Idle past the TTL: the policy's choice, warm.
		s.offset.Add(int64(10*time.Minute + time.Second))
		require.Contains(t, s.dryRun(t, session), "sticky=new")
		p, _ = s.post(t, testKey, chat("session-4", stickyPromptTokens, ""), "X-Session-Id", session)
		require.Equal(t, "warm", p)
		// Its report is in once the conversation is known on warm. (Not
		// by learnt: the decider's clock is now 20 minutes ahead of the
		// edge's, whose start times the statistics take as their
		// samples': a window, 15 minutes, behind, they are dropped as
		// they arrive, and the earlier ones at the next refresh.)
		require.Eventually(t, func() bool {
			sum := s.dryRun(t, session)
			return strings.Contains(sum, "provider=warm") && strings.Contains(sum, "sticky=kept")
		}, waitFor, tick, "warm's turn of the conversation reported")

		// warm fails: the turn is answered by plain, warm cools down, and
		// the conversation follows plain, where its prompt now is.
		faulty := fastModel()
		faulty.Faults = []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1}}
		require.NoError(t, s.sim.Provider("warm").SetModel(faulty))
		p, _ = s.post(t, testKey, chat("session-5", stickyPromptTokens, ""), "X-Session-Id", session)
		require.Equal(t, "plain", p)
		require.NoError(t, s.sim.Provider("warm").SetModel(fastModel()))
		require.Eventually(t, func() bool {
			sum := s.dryRun(t, session)
			return strings.Contains(sum, "provider=plain") && strings.Contains(sum, "sticky=kept")
		}, waitFor, tick, "the conversation moved to the endpoint that answered")
		p, route = s.post(t, testKey, chat("session-6", stickyPromptTokens, ""), "X-Session-Id", session)
		require.Equal(t, "plain", p, route)
		require.Contains(t, route, "sticky=kept")
	})
}

// TestStickyMovesOffADearCache reproduces stickiness buying a worse deal: a
// conversation whose first turn went to a reseller (plain: the lowest input
// price, cache reads at a nominal 10 % discount, 0.09 against warm's
// 0.0013) stayed there for every later turn, because the reseller's cached
// input was cheaper than its input, though each turn, mostly cache reads,
// costs twice as much there as on warm. The later turns must move to warm
// and stay there.
func TestStickyMovesOffADearCache(t *testing.T) {
	s := startSticky(t, "{input: 0.20, cached_input: 0.0013, output: 0.80}", "{input: 0.10, cached_input: 0.09, output: 0.80}")
	msgs := `{"role":"system","content":"` + longPrompt(stickyPromptTokens) + `"}`
	turn := func(n int) (string, string) {
		msgs += fmt.Sprintf(`,{"role":"user","content":"question %d"}`, n)
		p, route := s.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"messages":[`+msgs+`]}`)
		msgs += `,{"role":"assistant","content":"answer"}`
		return p, route
	}
	served := map[string]int64{}
	afterTurn := func(p string) {
		served[p]++
		s.learnt(t, p, served[p])
	}
	// Both are measured (equally fast), so both qualify.
	for _, p := range []string{"warm", "plain"} {
		got, _ := s.post(t, otherKey, chat("measure-"+p, stickyPromptTokens, `"provider":{"only":["`+p+`"]},`))
		require.Equal(t, p, got)
		afterTurn(p)
	}

	// The first turn: the lowest input price, for a prompt cached nowhere.
	p, route := turn(1)
	require.Equal(t, "plain", p, route)
	afterTurn(p)
	// The next: a turn on plain with its cache costs twice one on warm
	// without it (over the turns to come), beyond the competitive margin.
	p, route = turn(2)
	require.Equal(t, "warm", p, route)
	require.Contains(t, route, "sticky=no:cheaper_alternative")
	afterTurn(p)
	// And there it stays, reading its prompt from warm's cache.
	for n := 3; n <= 4; n++ {
		p, route = turn(n)
		require.Equal(t, "warm", p, route)
		require.Contains(t, route, "sticky=kept")
		afterTurn(p)
	}
	require.Positive(t, s.sim.Provider("warm").Stats().Models[simModel].CachedTokens, "warm served the later turns from its cache")
}
