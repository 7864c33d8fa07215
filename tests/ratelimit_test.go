package tests

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// startLimited starts the three providers of simConfig behind a catalog
// with tenant and provider limits; the decider is restartable, with no
// probes (these tests count the calls each provider got, and a probe among
// them would be one more); tune adjusts it further (its clock...).
func startLimited(t *testing.T, tenantLimits, alphaLimits string, tune func(*deciderapp.Config), edgeArgs ...string) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simConfig, restartable: true, edgeArgs: edgeArgs,
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - provider: alpha
        base_url: %[2]s
        upstream_model: %[5]s
        api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA
        price: {input: 0.10, cached_input: 0.05, output: 0.50}
        limits: [%[8]s]
      - {provider: beta,  base_url: %[3]s, upstream_model: %[5]s, price: {input: 0.20, cached_input: 0.02, output: 0.60}}
      - {provider: gamma, base_url: %[4]s, upstream_model: %[5]s, price: {input: 0.25, cached_input: 0.10, output: 0.70}}
tenants:
  - id: acme
    api_keys_sha256: [%[6]s]
    limits: [%[9]s]
  - {id: globex, api_keys_sha256: [%[7]s]}
`, model, url("alpha"), url("beta"), url("gamma"), simModel,
				catalog.HashKey(testKey), catalog.HashKey(otherKey), alphaLimits, tenantLimits)
		},
		tune: func(c *deciderapp.Config) {
			c.NoProbes = true
			if tune != nil {
				tune(c)
			}
		}})
}

// ask sends a short non-streamed chat request with about n prompt tokens.
func (l *stack) ask(t *testing.T, key string, n int) (int, http.Header, map[string]any) {
	t.Helper()
	return l.post(t, key, `{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"`+longPrompt(n)+`"}]}`)
}

// frozen is a decider configuration on a clock that stands still, so that
// per-minute buckets refill nothing while a slow machine runs the test.
func frozen(clock *fakeClock) func(*deciderapp.Config) {
	clock.Freeze()
	return func(c *deciderapp.Config) { c.Now = clock.Now }
}

func TestTenantTokenBudgetRefusedWith429(t *testing.T) {
	l := startLimited(t, `{unit: input_tokens, per: minute, capacity: 10000}`, ``, frozen(&fakeClock{}))
	// About 3000 input tokens each: three fit in 10000 a minute, the fourth does not.
	for i := range 3 {
		code, _, body := l.ask(t, testKey, 3000)
		require.Equal(t, http.StatusOK, code, "request %d: %v", i, body)
	}
	code, hdr, body := l.ask(t, testKey, 3000)
	require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
	e := body["error"].(map[string]any)
	require.NotEmpty(t, e["message"])
	retry, err := strconv.Atoi(hdr.Get("Retry-After"))
	require.NoError(t, err, "Retry-After in seconds")
	require.Positive(t, retry)
	require.LessOrEqual(t, retry, 60, "a per-minute bucket refills within the minute")
	require.Equal(t, "tenant", hdr.Get("x-switchboard-ratelimit-scope"))
	require.Equal(t, "10000", anyHeader(hdr, "x-ratelimit-limit-tokens", "x-ratelimit-limit-input-tokens"), "the caller's own limit: %v", hdr)
	remaining, err := strconv.ParseFloat(anyHeader(hdr, "x-ratelimit-remaining-tokens", "x-ratelimit-remaining-input-tokens"), 64)
	require.NoError(t, err)
	require.Less(t, remaining, 3000.0)
	require.NotEmpty(t, anyHeader(hdr, "x-ratelimit-reset-tokens", "x-ratelimit-reset-input-tokens"))

	// Another tenant is not affected, and the refusal told acme nothing of it.
	code, _, body = l.ask(t, otherKey, 3000)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.NotContains(t, fmt.Sprint(body, hdr), "globex")

	// The refused request reached no provider.
	var total int64
	for _, p := range []string{"alpha", "beta", "gamma"} {
		total += l.sim.Provider(p).Stats().Requests
	}
	require.Equal(t, int64(4), total)
}

func TestProviderLimitSendsTrafficToTheNextEndpoint(t *testing.T) {
	// alpha's provider project takes 2 requests a minute; the tenant is unlimited.
	l := startLimited(t, ``, `{unit: requests, per: minute, capacity: 2, scope: provider_project}`, frozen(&fakeClock{}))
	var got []string
	for range 4 {
		code, _, body := l.ask(t, testKey, 50)
		require.Equal(t, http.StatusOK, code, "%v", body)
		got = append(got, body["provider"].(string))
	}
	require.Equal(t, []string{"alpha", "alpha", "beta", "beta"}, got, "a full provider is skipped, the client is not refused")
	require.Equal(t, int64(2), l.sim.Provider("alpha").Stats().Requests, "alpha never saw more than its quota")
}

// TestDeciderRestartDoesNotOverAdmit restarts the decider mid-run, once
// cleanly and once as a crash: admissions across the restarts never exceed
// the tenant's requests per minute. The decider's clock stands still but
// for the microseconds the test moves it, so the bucket refills nothing
// however slowly the machine runs and the counts are exact.
func TestDeciderRestartDoesNotOverAdmit(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			clock := &fakeClock{}
			l := startLimited(t, `{unit: requests, per: minute, capacity: 6}`, ``, frozen(clock))
			ok := 0
			for range 4 {
				if code, _, _ := l.ask(t, testKey, 20); code == http.StatusOK {
					ok++
				}
			}
			require.Equal(t, 4, ok)
			if crash {
				// The owner saves its state about once a second, and only
				// when it changed: wait for two saves after the grants (the
				// first may have been taken just before the last grant),
				// moving the clock by a microsecond per poll so the state
				// changes. All the polls together move it far less than the
				// 10 s that would refill one request.
				v0, err := l.decider.BrokerSnapshotVersion(t.Context())
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					clock.Advance(time.Microsecond)
					v, err := l.decider.BrokerSnapshotVersion(t.Context())
					return err == nil && v >= v0+2
				}, waitFor, tick, "the broker owner saves the grants")
			}

			if crash {
				l.decider.Kill()
			} else {
				l.decider.Close()
			}
			l.restartDecider(t, nil)

			// The edge reconnects; 20 more attempts within the same minute.
			require.Eventually(t, func() bool {
				code, _, _ := l.ask(t, testKey, 20)
				if code == http.StatusOK {
					ok++
				}
				return code != http.StatusServiceUnavailable
			}, 15*time.Second, 50*time.Millisecond)
			for range 20 {
				if code, _, _ := l.ask(t, testKey, 20); code == http.StatusOK {
					ok++
				}
			}
			require.LessOrEqual(t, ok, 6, "never more than the tenant's 6 a minute across the restart")
			if !crash {
				require.Equal(t, 6, ok, "a clean restart loses no capacity either")
			}
		})
	}
}

// anyHeader returns the first of names that is set: OpenAI names its token
// limits x-ratelimit-*-tokens; a gateway may be more specific.
func anyHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// TestConcurrencySlotFreedAtOnce: a client of a tenant allowed one request in
// flight sends its requests one after the other. Each call's reservation is
// reconciled the moment the call ends, not at the Report stream's next flush
// (an hour here), so every next request finds the slot free. The poll is a
// hang guard: before, the slot stayed taken until the hourly flush.
func TestConcurrencySlotFreedAtOnce(t *testing.T) {
	l := startLimited(t, `{unit: concurrent_requests, capacity: 1}`, ``, frozen(&fakeClock{}), "--report-flush-interval=1h")
	firstTry := 0
	const n = 10
	for i := range n {
		var code int
		var body map[string]any
		tries := 0
		require.Eventually(t, func() bool {
			tries++
			code, _, body = l.ask(t, testKey, 10)
			return code == http.StatusOK
		}, 20*time.Second, 5*time.Millisecond, "request %d: %d %v", i, code, body)
		if tries == 1 {
			firstTry++
		}
	}
	t.Logf("%d of %d back-to-back requests admitted at the first try", firstTry, n)
}
