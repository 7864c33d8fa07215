package tests

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// slowSimConfig is one provider whose streams take their time: 20 tokens a
// second, so a client can leave in the middle and a call can outlive a
// decider.
const slowSimConfig = `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        ttft: {base: 5ms}
        tokens_per_second: 20
        default_output_tokens: 100
`

// startResv starts one slow, dear provider and a tenant with limits; the
// decider is restartable, so a test can kill it and start it again under
// the running edge.
func startResv(t *testing.T, tenantLimits string, tune func(*deciderapp.Config), edgeArgs ...string) *stack {
	t.Helper()
	// Dear prices, so a few tokens are a visible share of a small USD limit.
	// Requests are refused at once, never queued: these tests count the
	// slots and tokens held, which a wait for the next free one would blur.
	return startStack(t, stackOptions{sim: slowSimConfig, restartable: true, edgeArgs: edgeArgs,
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
workload_classes:
  interactive: {max_depth: 0}
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[3]s, price: {input: 100, cached_input: 50, output: 1000}}
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
    limits: [%[5]s]
`, model, url("alpha"), simModel, catalog.HashKey(testKey), tenantLimits)
		},
		tune: func(c *deciderapp.Config) {
			// A fixed etcd address too: etcd's JSON gateway, which the test
			// reads the broker's snapshot through, dials the configured address.
			c.EtcdListen = freeAddr(t)
			if tune != nil {
				tune(c)
			}
		}})
}

// liveStream is a streamed chat request whose answer is read as the test
// says.
type liveStream struct {
	resp *http.Response
	rd   *bufio.Reader
	id   string
}

// openStream sends a streamed request for up to maxTokens (0: the
// provider's default, 100) and returns once
// the answer started (its first content chunk read), or with the refusal's
// status when it was refused.
func (r *stack) openStream(t *testing.T, maxTokens int) (*liveStream, int) {
	t.Helper()
	limit := ""
	if maxTokens > 0 {
		limit = fmt.Sprintf(`"max_tokens":%d,`, maxTokens)
	}
	body := fmt.Sprintf(`{"model":%q,"stream":true,%s"messages":[{"role":"user","content":"tell me a long story"}]}`, model, limit)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Logf("refused: %d %s", resp.StatusCode, raw)
		return nil, resp.StatusCode
	}
	s := &liveStream{resp: resp, rd: bufio.NewReader(resp.Body), id: resp.Header.Get("x-switchboard-request-id")}
	require.NotEmpty(t, s.id)
	require.True(t, s.readContent(t, 1), "the answer started")
	return s, resp.StatusCode
}

// readContent reads until n more chunks with content arrived; false when
// the stream ended first.
func (s *liveStream) readContent(t *testing.T, n int) bool {
	t.Helper()
	for n > 0 {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return false
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &chunk), data)
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			n--
		}
	}
	return true
}

// finish reads the stream to its end.
func (s *liveStream) finish(t *testing.T) {
	t.Helper()
	_, err := io.Copy(io.Discard, s.rd)
	require.NoError(t, err)
	require.NoError(t, s.resp.Body.Close())
}

// leave disconnects in the middle of the answer.
func (s *liveStream) leave() { _ = s.resp.Body.Close() }

// usdSpent is what the decider's broker has charged the tenant today.
func (r *stack) usdSpent(t *testing.T) float64 {
	t.Helper()
	for _, l := range r.decider.TenantLimits("acme") {
		if l.Unit == "usd" && l.Window == "day" {
			return l.Limit - l.Remaining
		}
	}
	t.Fatal("no usd/day limit")
	return 0
}

// TestClientThatLeavesMidStreamPaysItsUSDQuota: a client that reads part of
// each answer and disconnects is billed for what it got, and its USD quota
// is charged the same, so it is refused once it has spent its limit; the
// broker's spend equals the activity log's bill.
func TestClientThatLeavesMidStreamPaysItsUSDQuota(t *testing.T) {
	const limit = 0.2
	r := startResv(t, fmt.Sprintf(`{unit: usd, per: day, capacity: %g}`, limit), nil)
	var ids []string
	refused := 0
	for i := 0; i < 60 && refused == 0; i++ {
		s, code := r.openStream(t, 40)
		if s == nil {
			require.Equal(t, http.StatusTooManyRequests, code)
			refused++
			break
		}
		require.True(t, s.readContent(t, 2))
		s.leave()
		ids = append(ids, s.id)
		// The next request is decided after this one's bill is known.
		rec := r.record(t, testKey, s.id)
		require.Positive(t, rec.GetCostUsd(), "the client is billed for what it got")
		require.Eventually(t, func() bool { return r.edgeSettled() }, waitFor, tick)
	}
	require.Equal(t, 1, refused, "a client that always leaves mid-answer is refused once its spend reaches the limit (after %d calls)", len(ids))

	var billed float64
	for _, id := range ids {
		billed += r.record(t, testKey, id).GetCostUsd()
	}
	require.Greater(t, billed, limit/2, "most of the limit was spent")
	require.LessOrEqual(t, billed, limit+1e-9)
	require.Eventually(t, func() bool { return math.Abs(r.usdSpent(t)-billed) < 1e-9 }, waitFor, tick,
		"the quota is charged what the activity log bills: %g vs %g", r.usdSpent(t), billed)
}

// edgeSettled reports whether the edge has no reconciliation waiting.
func (r *stack) edgeSettled() bool { return r.edge.UnackedReconciles() == 0 }

// TestTenantNotLockedOutAfterADeciderCrash: calls in flight when the
// decider is killed end while it is away; once it is back and owns the
// broker again, their reservations are reconciled and the tenant's
// concurrency is free at once, not after the reservations' TTL.
func TestTenantNotLockedOutAfterADeciderCrash(t *testing.T) {
	r := startResv(t, `{unit: concurrent_requests, capacity: 4}`, nil)
	var streams []*liveStream
	for range 4 {
		s, code := r.openStream(t, 30)
		require.Equal(t, http.StatusOK, code)
		streams = append(streams, s)
	}
	_, code := r.openStream(t, 30)
	require.Equal(t, http.StatusTooManyRequests, code, "four in flight: the fifth is refused")
	// The owner's snapshot holds the four reservations.
	require.Eventually(t, func() bool {
		snap, err := etcdGet(r.decider.EtcdEndpoint(), "/switchboard/v1/broker/snapshot")
		if err != nil {
			return false
		}
		for _, s := range streams {
			if !strings.Contains(snap, s.id) {
				return false
			}
		}
		return true
	}, waitFor, tick)

	r.decider.Kill()
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() { s.finish(t) }) // the calls end while the decider is away
	}
	wg.Wait()

	r.restartDecider(t, nil)

	// Nothing is in flight: the tenant is admitted as soon as the edge's
	// reconciliations reached the new owner, far within the 2-minute TTL.
	start := time.Now()
	require.Eventually(t, func() bool {
		s, code := r.openStream(t, 2)
		if s != nil {
			s.finish(t)
		}
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the tenant is admitted again")
	t.Logf("admitted %s after the restart", time.Since(start).Round(time.Millisecond))
	require.Eventually(t, r.edgeSettled, waitFor, tick, "every reconciliation acknowledged")
	// Learning mode holds back half of 4 until the longest TTL granted has
	// passed: with nothing in flight, two streams are admitted, a third not.
	var held []*liveStream
	for i := range 2 {
		s, code := r.openStream(t, 30)
		require.Equal(t, http.StatusOK, code, "stream %d during learning mode", i)
		held = append(held, s)
	}
	_, code = r.openStream(t, 30)
	require.Equal(t, http.StatusTooManyRequests, code, "a third is held back by learning mode")
	for _, s := range held {
		s.finish(t)
	}
}

// etcdGet reads a key through etcd's JSON gateway ("" when absent). It
// does not use t, so it may run inside require.Eventually.
func etcdGet(endpoint, key string) (string, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	body := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte(key)))
	resp, err := http.Post(endpoint+"/v3/kv/range", "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	if len(out.Kvs) == 0 {
		return "", nil
	}
	v, err := base64.StdEncoding.DecodeString(out.Kvs[0].Value)
	return string(v), err
}

// TestLongStreamOutlivesItsReservationTTL: a stream that runs longer than
// its reservation's TTL keeps its concurrency slot while its edge declares
// it, and is charged what it used; without declarations (an edge that
// beats more slowly than the TTL) the reservation expires mid-stream, and
// its late reconciliation is still charged the real usage.
func TestLongStreamOutlivesItsReservationTTL(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprintf("declared=%v", declared), func(t *testing.T) {
			// The decider's clock is the test's: noon today, so the daily
			// USD bucket does not reset under the test.
			now := time.Now().UTC()
			clock := &fakeClock{offset: time.Date(now.Year(), now.Month(), now.Day(), 12, 0, 0, 0, time.UTC).Sub(now)}
			args := []string{"--reservation-ttl=2m", "--reservation-heartbeat=20ms"}
			if !declared {
				args = []string{"--reservation-ttl=10m", "--reservation-heartbeat=9m"}
			}
			r := startResv(t, `{unit: concurrent_requests, capacity: 1}, {unit: usd, per: day, capacity: 10}`,
				func(c *deciderapp.Config) { c.Now = clock.Now }, args...)

			s, code := r.openStream(t, 0)
			require.Equal(t, http.StatusOK, code)
			if declared {
				// Ten minutes of the decider's time pass in 30s steps, each
				// followed by two declarations applied after it (the
				// second one surely evaluated at the new time).
				for range 20 {
					clock.Advance(30 * time.Second)
					k := r.decider.ReservationHeartbeats()
					require.Eventually(t, func() bool { return r.decider.ReservationHeartbeats() >= k+2 }, waitFor, time.Millisecond)
				}
				_, code := r.openStream(t, 1)
				require.Equal(t, http.StatusTooManyRequests, code, "ten minutes in, the stream still holds its slot")
			} else {
				clock.Advance(11 * time.Minute) // the reservation's TTL passed
				require.Eventually(t, func() bool {
					o, code := r.openStream(t, 1)
					if o != nil {
						o.finish(t)
					}
					return code == http.StatusOK
				}, waitFor, tick, "without declarations the slot was released at expiry")
			}
			s.finish(t)
			rec := r.record(t, testKey, s.id)
			require.Equal(t, int64(100), rec.GetUsage().GetOutputTokens())
			billed := rec.GetCostUsd()
			require.Eventually(t, func() bool { return r.edgeSettled() }, waitFor, tick)
			var others float64
			if !declared {
				// The one-token request admitted after expiry is billed too.
				code, recs, _, err := r.activity(testKey, "limit=10")
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, code)
				for _, o := range recs {
					if o.GetId() != s.id {
						others += o.GetCostUsd()
					}
				}
			}
			require.Eventually(t, func() bool { return math.Abs(r.usdSpent(t)-billed-others) < 1e-9 }, waitFor, tick,
				"the quota is charged what the stream used: %g vs %g", r.usdSpent(t), billed+others)
			after, code := r.openStream(t, 1)
			require.Equal(t, http.StatusOK, code, "the slot is free once the stream ended")
			after.finish(t)
		})
	}
}
