package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// smallModel is the cheaper model of the workload class tests, the
// fallback of a class whose overload action is fallback.
const smallModel = "vendor/sim-small"

// startClasses starts a system serving model on alpha (with alphaLimits)
// and smallModel on gamma, with the catalog's workload_classes and acme's
// tenant limits as given; globex may use batch only.
func startClasses(t *testing.T, classes, tenantLimits, alphaLimits string) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simConfig, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[4]s, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.10, output: 0.50}, limits: [%[9]s]}
  - id: %[5]s
    endpoints:
      - {provider: gamma, base_url: %[3]s, upstream_model: %[4]s, price: {input: 0.01, output: 0.05}}
workload_classes:
%[8]s
tenants:
  - id: acme
    api_keys_sha256: [%[6]s]
    limits: [%[10]s]
  - {id: globex, api_keys_sha256: [%[7]s], classes: [batch], default_class: batch}
`, model, url("alpha"), url("gamma"), simModel, smallModel,
			catalog.HashKey(testKey), catalog.HashKey(otherKey), classes, alphaLimits, tenantLimits)
	}})
}

// classAnswer is what a client saw of one chat request.
type classAnswer struct {
	status int
	header http.Header
	body   string
	err    error
}

// classChat sends a short chat request for model as key with the workload
// header (none when empty) and waits for the whole answer, or for ctx.
func (c *stack) classChat(ctx context.Context, key, workload, model, content string) classAnswer {
	body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"` + content + `"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.edge.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return classAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if workload != "" {
		req.Header.Set("X-Switchboard-Workload", workload)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return classAnswer{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return classAnswer{status: resp.StatusCode, header: resp.Header, body: string(raw), err: err}
}

// hold sends a request that the provider answers only when its client
// leaves, so it holds its reservation (its concurrency slot) until the
// returned release is called; hold returns once the provider has it.
func (c *stack) hold(t *testing.T, provider string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	before := c.sim.Provider(provider).Stats().Requests
	done := make(chan classAnswer, 1)
	pending := 0
	send := func() {
		pending++
		go func() { done <- c.classChat(ctx, testKey, "", model, "[[provsim:fault=hang]] hold the slot") }()
	}
	send()
	// The slot may still be held by the previous request until the edge's
	// reconciliation of it reaches the decider: a refusal then is sent again.
	var early classAnswer
	reached := assert.Eventually(t, func() bool {
		select {
		case early = <-done:
			pending--
			if early.err == nil && early.status == http.StatusTooManyRequests {
				send()
			}
		default:
		}
		return c.sim.Provider(provider).Stats().Requests > before
	}, 20*time.Second, 5*time.Millisecond)
	if !reached {
		cancel()
		require.FailNowf(t, "the held request never reached the provider", "%s; last early answer: %d %v %s",
			provider, early.status, early.err, early.body)
	}
	var once bool
	release = func() {
		if once {
			return
		}
		once = true
		cancel()
		for ; pending > 0; pending-- {
			<-done
		}
	}
	t.Cleanup(release)
	return release
}

func errorOf(t *testing.T, a classAnswer) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.body), &out), "OpenAI error JSON: %s", a.body)
	e, ok := out["error"].(map[string]any)
	require.True(t, ok, "OpenAI error JSON: %s", a.body)
	return e
}

// TestWorkloadClassThroughEdge: the X-Switchboard-Workload header names the
// class (a bad one is a 400 naming the header, one the tenant may not use a
// 403); a refusal is a 429 whose error.code and x-switchboard-reason are
// the refusal's code, with the class it was refused as; a request that
// names no class is its tenant's default.
func TestWorkloadClassThroughEdge(t *testing.T) {
	c := startClasses(t, "  interactive: {max_depth: 0}", `{unit: concurrent_requests, capacity: 1}`, ``)
	ctx := t.Context()

	a := c.classChat(ctx, testKey, "urgent", model, "hi")
	require.NoError(t, a.err)
	require.Equal(t, http.StatusBadRequest, a.status, a.body)
	require.Equal(t, "X-Switchboard-Workload", errorOf(t, a)["param"])

	a = c.classChat(ctx, testKey, "partner", model, "hi")
	require.Equal(t, http.StatusForbidden, a.status, a.body)
	require.Contains(t, errorOf(t, a)["message"], "workload class partner is not allowed")

	a = c.classChat(ctx, otherKey, "", model, "hi")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, "batch", a.header.Get("X-Switchboard-Workload"), "globex's default class")
	a = c.classChat(ctx, otherKey, "interactive", model, "hi")
	require.Equal(t, http.StatusForbidden, a.status, "globex may use batch only: %s", a.body)

	a = c.classChat(ctx, testKey, "", model, "hi")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, "interactive", a.header.Get("X-Switchboard-Workload"))
	require.Empty(t, a.header.Get("X-Switchboard-Queue-Id"), "it did not wait")

	release := c.hold(t, "alpha")
	a = c.classChat(ctx, testKey, "Interactive", model, "hi")
	require.Equal(t, http.StatusTooManyRequests, a.status, a.body)
	code := errorOf(t, a)["code"]
	require.Contains(t, []any{"queue_full", "concurrency"}, code, "interactive never queues: refused at once")
	require.Equal(t, code, a.header.Get("X-Switchboard-Reason"))
	require.Equal(t, "interactive", a.header.Get("X-Switchboard-Workload"))
	require.Equal(t, "tenant", a.header.Get("X-Switchboard-Ratelimit-Scope"))
	retry, err := strconv.Atoi(a.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After in seconds")
	require.Positive(t, retry)
	require.Empty(t, a.header.Get("X-Switchboard-Fallback-Model"), "the tenant's own limit has no fallback")

	release()
	require.Eventually(t, func() bool {
		return c.classChat(ctx, testKey, "", model, "hi").status == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "the slot comes back when the held request ends")
}

// TestBackgroundRequestWaitsInItsQueue: with the tenant's one concurrent
// request held, a background request waits in its class's queue instead of
// being refused, and is served once the slot frees, saying how long it
// waited. It needs the broker's class queues: it fails while ReserveWait
// reserves at once.
func TestBackgroundRequestWaitsInItsQueue(t *testing.T) {
	c := startClasses(t, "  background: {max_wait: 1m, max_depth: 8}", `{unit: concurrent_requests, capacity: 1}`, ``)
	ctx := t.Context()
	release := c.hold(t, "alpha")

	done := make(chan classAnswer, 1)
	go func() { done <- c.classChat(ctx, testKey, "background", model, "wait for me") }()
	var early *classAnswer
	require.Eventually(t, func() bool {
		select {
		case a := <-done:
			early = &a
			return true
		default:
		}
		return c.decider.QueuedRequests() == 1
	}, 20*time.Second, 5*time.Millisecond, "the background request waits in its queue")
	if early != nil {
		require.Failf(t, "the background request did not wait in its queue", "answered at once: %d %v %s", early.status, early.header, early.body)
	}
	release()

	var a classAnswer
	select {
	case a = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the queued request was not served once the slot freed")
	}
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, "background", a.header.Get("X-Switchboard-Workload"))
	require.NotEmpty(t, a.header.Get("X-Switchboard-Queue-Id"))
	waited, err := strconv.ParseInt(a.header.Get("X-Switchboard-Queue-Wait-Ms"), 10, 64)
	require.NoError(t, err, "x-switchboard-queue-wait-ms: %v", a.header)
	require.Positive(t, waited)
	require.Zero(t, c.decider.QueuedRequests())
}

// TestOverloadFallbackModel: an interactive request refused for the
// provider's capacity is served with its class's fallback model, and says
// so; a background request, whose class rejects, is refused.
func TestOverloadFallbackModel(t *testing.T) {
	c := startClasses(t, "  interactive: {max_depth: 0, overload: fallback, fallback_model: "+smallModel+"}\n  background: {max_depth: 0}",
		``, `{unit: concurrent_requests, capacity: 1}`)
	ctx := t.Context()
	c.hold(t, "alpha")

	a := c.classChat(ctx, testKey, "", model, "hi")
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, smallModel, a.header.Get("X-Switchboard-Fallback-Model"))
	require.Equal(t, "gamma", a.header.Get("X-Switchboard-Provider"), "the fallback model's provider served it")
	require.Equal(t, "interactive", a.header.Get("X-Switchboard-Workload"))
	require.EqualValues(t, 1, c.sim.Provider("gamma").Stats().Requests)

	a = c.classChat(ctx, testKey, "background", model, "hi")
	require.Equal(t, http.StatusTooManyRequests, a.status, a.body)
	require.Empty(t, a.header.Get("X-Switchboard-Fallback-Model"))
	require.Equal(t, "provider", a.header.Get("X-Switchboard-Ratelimit-Scope"))
	require.Contains(t, []any{"queue_full", "concurrency"}, errorOf(t, a)["code"])
	require.EqualValues(t, 1, c.sim.Provider("gamma").Stats().Requests, "a rejecting class never falls back")
}

// A refusal by the caller's own limit is not degraded to the class's
// fallback model: another model counts against the same limit, so the
// client hears of its limit instead of being served a smaller model.
func TestOverloadFallbackNotForTheCallersOwnLimit(t *testing.T) {
	// The request waits for the tenant's slot, in vain, up to its class's
	// max_wait.
	c := startClasses(t, "  interactive: {max_wait: 500ms, overload: fallback, fallback_model: "+smallModel+"}",
		`{unit: concurrent_requests, capacity: 1}`, ``)
	ctx := t.Context()
	c.hold(t, "alpha")

	a := c.classChat(ctx, testKey, "", model, "hi")
	require.NoError(t, a.err)
	require.Equal(t, http.StatusTooManyRequests, a.status, a.body)
	require.Empty(t, a.header.Get("X-Switchboard-Fallback-Model"))
	require.NotEqual(t, "provider", a.header.Get("X-Switchboard-Ratelimit-Scope"), "the tenant's own limit")
	require.EqualValues(t, 0, c.sim.Provider("gamma").Stats().Requests, "the fallback model is not tried")
}
