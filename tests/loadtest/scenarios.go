package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// sizes scale the scenarios: short for make test, full for make bench.
type sizes struct {
	span time.Duration // how long each scenario sends
	// sample is how often the providers' counters are read while a
	// scenario runs, for the worst-window checks.
	sample time.Duration

	burstWaves, burstSize int
	burstGap              time.Duration

	longTokens, longWorkers int
	maxOut                  int64
	maxOutWorkers           int

	streamWorkers int
	streamQuota   float64 // output tokens per day of the streaming tenant
	streamMax     int64

	dailyQuota float64 // requests per day of the daily tenant
	dailyRate  float64

	stormRate float64

	sharedCap, prodRate, noisyRate, noisyCap float64

	// prodFloor is the least completion the production tenant must get
	// while the noisy tenant competes. The noisy tenant's own limit
	// (noisyCap a second, no burst) keeps it from holding more than
	// noisyCap of the route's sharedCap at any moment, so at least
	// sharedCap − noisyCap stays for the production tenant even if all
	// its requests came at once: in the short run (12 requests, 4 kept
	// free) that is a third of them, above the floor.
	prodFloor float64
	// prodFloorFair is that floor with workload classes, where the noisy
	// tenant has no limit of its own and only the fair queue (production
	// interactive weighing 6 times the noisy background) keeps the
	// production tenant's requests flowing: its demand is below its fair
	// share of the route, so nearly all of it must complete.
	prodFloorFair float64
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{
			span: 1500 * time.Millisecond, sample: 100 * time.Millisecond,
			burstWaves: 4, burstSize: 20, burstGap: 400 * time.Millisecond,
			longTokens: 16000, longWorkers: 3,
			maxOut: 4096, maxOutWorkers: 3,
			streamWorkers: 4, streamQuota: 1500, streamMax: 300,
			dailyQuota: 12, dailyRate: 16,
			stormRate: 12,
			sharedCap: 10, prodRate: 8, noisyRate: 30, noisyCap: 6,
			prodFloor: 0.25, prodFloorFair: 0.75,
		}
	}
	return sizes{
		span: 15 * time.Second, sample: 250 * time.Millisecond,
		burstWaves: 15, burstSize: 40, burstGap: time.Second,
		longTokens: 60000, longWorkers: 4,
		maxOut: 8192, maxOutWorkers: 4,
		streamWorkers: 8, streamQuota: 12000, streamMax: 600,
		dailyQuota: 60, dailyRate: 8,
		stormRate: 20,
		sharedCap: 20, prodRate: 10, noisyRate: 60, noisyCap: 12,
		prodFloor: 0.25, prodFloorFair: 0.75,
	}
}

// The storms' models as the simulator's PUT /admin/models/{id} takes them:
// healthy (as fastModel), and in the storm.
const (
	healthyJSON  = `{"ttft":{"base":"5ms","per_1k_tokens":"1ms"},"max_output_tokens":16384}`
	storm429JSON = `{"ttft":{"base":"5ms","per_1k_tokens":"1ms"},"max_output_tokens":16384,` +
		`"limits":{"requests_per_second":3},"faults":[{"kind":"rate_limit","rate":0.3,"retry_after":"1s"}]}`
	storm503JSON = `{"ttft":{"base":"5ms","per_1k_tokens":"1ms"},"max_output_tokens":16384,` +
		`"faults":[{"kind":"unavailable","rate":0.6,"status":503}]}`
)

// Simulated models: fast, so that the gateway, not the provider, is what
// a scenario exercises.
const (
	fastModel   = "        ttft: {base: 5ms, per_1k_tokens: 1ms}\n        max_output_tokens: 16384\n"
	streamModel = "        ttft: {base: 5ms}\n        tokens_per_second: 200\n        max_output_tokens: 16384\n"
)

func simModelYAML(id, body string) string { return "      - id: " + id + "\n" + body }

// buildPlan is the run's catalog and simulator: one model per scenario
// (its upstream model named after it, so each provider's per-model
// counters are that scenario's traffic), one tenant per scenario but the
// noisy one, which has two.
func buildPlan(sz sizes, classes bool) *plan {
	p := &plan{classes: classes}
	cheap, dear := [3]float64{0.10, 0.05, 0.50}, [3]float64{0.20, 0.10, 0.80}
	key := func(id string) string { return "sk-lt-" + id + "-" + randomHex(12) }
	add := func(upstream string, eps []endpoint, sims map[string]string) {
		p.models = append(p.models, model{id: "vendor/" + upstream, upstream: upstream, endpoints: eps})
		for _, ep := range eps {
			p.sim = append(p.sim, simModel{provider: ep.provider, yaml: simModelYAML(upstream, sims[ep.provider])})
		}
	}
	// Every provider serves a model as fastModel unless said otherwise.
	fast := map[string]string{"alpha": fastModel, "beta": fastModel, "rl": fastModel, "ov": fastModel}

	// burst: alpha is cheaper but its project takes 20 requests a minute;
	// beta takes the rest. The tenant has 8 requests a second, burst 16.
	add("lt-burst", []endpoint{
		{provider: "alpha", project: "alpha-burst", price: cheap, limits: []limit{{unit: "requests", per: "minute", capacity: 20, scope: "provider_project"}}},
		{provider: "beta", price: dear},
	}, fast)
	p.tenants = append(p.tenants, tenant{id: "t-burst", key: key("burst"), class: "interactive",
		limits: []limit{{unit: "requests", per: "second", capacity: 8, burst: 16}}})

	// long context: alpha's route takes 4 prompts' worth of tokens a
	// minute; the tenant 8.
	longTok := float64(sz.longTokens)
	add("lt-long", []endpoint{
		{provider: "alpha", price: cheap, limits: []limit{{unit: "total_tokens", per: "minute", capacity: 4 * longTok}}},
		{provider: "beta", price: dear},
	}, fast)
	p.tenants = append(p.tenants, tenant{id: "t-long", key: key("long"), class: "background",
		limits: []limit{{unit: "input_tokens", per: "minute", capacity: 8 * longTok}}})

	// max output: every request asks for maxOut tokens; the route takes 3
	// of them a minute, the tenant 4.
	mo := float64(sz.maxOut)
	add("lt-maxout", []endpoint{
		{provider: "alpha", price: cheap, limits: []limit{{unit: "output_tokens", per: "minute", capacity: 3 * mo}}},
	}, map[string]string{"alpha": fastModel})
	p.tenants = append(p.tenants, tenant{id: "t-maxout", key: key("maxout"), class: "batch",
		limits: []limit{{unit: "output_tokens", per: "minute", capacity: 4 * mo}}})

	// streams left mid-way: a daily output-token quota.
	add("lt-stream", []endpoint{{provider: "alpha", price: cheap}}, map[string]string{"alpha": streamModel})
	p.tenants = append(p.tenants, tenant{id: "t-stream", key: key("stream"), class: "interactive",
		limits: []limit{{unit: "output_tokens", per: "day", capacity: sz.streamQuota}}})

	// daily quota: requests per day.
	add("lt-daily", []endpoint{{provider: "alpha", price: cheap}}, map[string]string{"alpha": fastModel})
	p.tenants = append(p.tenants, tenant{id: "t-daily", key: key("daily"), class: "partner",
		limits: []limit{{unit: "requests", per: "day", capacity: sz.dailyQuota}}})

	// 429 storm: the cheap provider is healthy, then for the middle half
	// of the scenario takes 3 requests a second (its own limit, unknown to
	// the catalog) and refuses 30% of the rest at random besides
	// (storm429), then is healthy again; beta is the fallback.
	add("lt-storm429", []endpoint{{provider: "rl", price: cheap}, {provider: "beta", price: dear}}, fast)
	p.tenants = append(p.tenants, tenant{id: "t-storm429", key: key("storm429"), class: "interactive"})

	// 503 storm: the same, with 60% of calls failing with 503 (storm503).
	add("lt-storm503", []endpoint{{provider: "ov", price: cheap}, {provider: "beta", price: dear}}, fast)
	p.tenants = append(p.tenants, tenant{id: "t-storm503", key: key("storm503"), class: "interactive"})

	// noisy neighbour: one route of sharedCap requests a second, shared by
	// a production tenant (weight 3) and a noisy one (weight 1) whose own
	// limit (without burst) bounds it below the route's capacity; together
	// they ask for more than the route takes.
	add("lt-shared", []endpoint{{provider: "alpha", project: "alpha-shared", price: cheap,
		limits: []limit{{unit: "requests", per: "second", capacity: sz.sharedCap, scope: "provider_project"}}}},
		map[string]string{"alpha": fastModel})
	// With workload classes the noisy tenant has no limit of its own: the
	// fair queue alone must keep the production tenant's share.
	noisy := tenant{id: "t-noisy", key: key("noisy"), class: "background", weight: 1}
	if !classes {
		noisy.limits = []limit{{unit: "requests", per: "second", capacity: sz.noisyCap}}
	}
	p.tenants = append(p.tenants, tenant{id: "t-prod", key: key("prod"), class: "interactive", weight: 3}, noisy)
	return p
}

// scenarios are the load tests, in the order they run.
func scenarios(sz sizes) []scenario {
	storm429 := &storm{tenant: "t-storm429", model: "vendor/lt-storm429", upstream: "lt-storm429", provider: "rl", stormJSON: storm429JSON, sz: sz}
	storm503 := &storm{tenant: "t-storm503", model: "vendor/lt-storm503", upstream: "lt-storm503", provider: "ov", stormJSON: storm503JSON, sz: sz}
	return []scenario{
		{
			name: "burst", what: "waves of simultaneous requests against a tenant limit and a provider project limit",
			tenants: []string{"t-burst"}, models: []string{"vendor/lt-burst"},
			drive: func(ctx context.Context, e *env) []result {
				t := e.plan.tenant("t-burst")
				var c collector
				for w := range sz.burstWaves {
					start := time.Now()
					var wg sync.WaitGroup
					for i := range sz.burstSize {
						wg.Go(func() {
							c.add(e.client.do(ctx, request{tenant: t, model: "vendor/lt-burst", prompt: prompt(50, fmt.Sprint("b", w, i)), maxTokens: 8}))
						})
					}
					wg.Wait()
					if d := sz.burstGap - time.Since(start); d > 0 && w < sz.burstWaves-1 {
						sleepCtx(ctx, d)
					}
				}
				return c.all
			},
			check: func(_ *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
				refusalsClear(sr, rs, http.StatusTooManyRequests)
			},
		},
		{
			name: "long-context", what: fmt.Sprintf("prompts of %d tokens against input and total token limits", sz.longTokens),
			tenants: []string{"t-long"}, models: []string{"vendor/lt-long"},
			drive: func(ctx context.Context, e *env) []result {
				t := e.plan.tenant("t-long")
				var c collector
				closedLoop(ctx, sz.span, sz.longWorkers, func(w, i int) {
					r := e.client.do(ctx, request{tenant: t, model: "vendor/lt-long", prompt: prompt(sz.longTokens-20, fmt.Sprint("l", w, i)), maxTokens: 16})
					c.add(r)
					backOff(ctx, r)
				})
				return c.all
			},
			check: func(_ *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
				refusalsClear(sr, rs, http.StatusTooManyRequests)
			},
		},
		{
			name: "max-output", what: fmt.Sprintf("max_tokens %d against output token limits", sz.maxOut),
			tenants: []string{"t-maxout"}, models: []string{"vendor/lt-maxout"},
			drive: func(ctx context.Context, e *env) []result {
				t := e.plan.tenant("t-maxout")
				var c collector
				closedLoop(ctx, sz.span, sz.maxOutWorkers, func(w, i int) {
					r := e.client.do(ctx, request{tenant: t, model: "vendor/lt-maxout", prompt: prompt(30, fmt.Sprint("m", w, i)), maxTokens: sz.maxOut})
					c.add(r)
					backOff(ctx, r)
				})
				return c.all
			},
			check: func(_ *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
				refusalsClear(sr, rs, http.StatusTooManyRequests)
			},
		},
		{
			name: "stream-disconnect", what: "streams the client leaves mid-way, against a daily output-token quota",
			tenants: []string{"t-stream"}, models: []string{"vendor/lt-stream"},
			drive: func(ctx context.Context, e *env) []result {
				t := e.plan.tenant("t-stream")
				var c collector
				leave := []int64{10, 40, 120, 0} // 0 reads the whole answer
				closedLoop(ctx, sz.span, sz.streamWorkers, func(w, i int) {
					r := e.client.do(ctx, request{tenant: t, model: "vendor/lt-stream", prompt: prompt(30, fmt.Sprint("s", w, i)),
						maxTokens: sz.streamMax, stream: true, leaveAfter: leave[(w+i)%len(leave)]})
					c.add(r)
					backOff(ctx, r)
				})
				return c.all
			},
			check: checkStreams,
		},
		{
			name: "daily-quota", what: fmt.Sprintf("a partner sending past its %g requests a day", sz.dailyQuota),
			tenants: []string{"t-daily"}, models: []string{"vendor/lt-daily"},
			drive: func(ctx context.Context, e *env) []result {
				t := e.plan.tenant("t-daily")
				var c collector
				openLoop(ctx, sz.span, sz.dailyRate, func(i int) {
					c.add(e.client.do(ctx, request{tenant: t, model: "vendor/lt-daily", prompt: prompt(30, fmt.Sprint("d", i)), maxTokens: 8}))
				})
				return c.all
			},
			check: checkDaily,
		},
		{
			name: "storm-429", what: "for the middle half, the cheap provider answers 429 (a per-second limit and random refusals)",
			tenants: []string{"t-storm429"}, models: []string{"vendor/lt-storm429"},
			drive: storm429.drive, check: storm429.check,
		},
		{
			name: "storm-503", what: "for the middle half, the cheap provider answers 503 to most calls",
			tenants: []string{"t-storm503"}, models: []string{"vendor/lt-storm503"},
			drive: storm503.drive, check: storm503.check,
		},
		{
			name: "noisy-neighbour", what: fmt.Sprintf("production (weight 3, %g/s) and noisy (weight 1, %g/s) tenants on one route of %g/s", sz.prodRate, sz.noisyRate, sz.sharedCap),
			tenants: []string{"t-prod", "t-noisy"}, models: []string{"vendor/lt-shared"},
			capacity: func(span time.Duration) float64 {
				return limit{unit: "requests", per: "second", capacity: sz.sharedCap}.bound(span)
			},
			drive: func(ctx context.Context, e *env) []result {
				prod, noisy := e.plan.tenant("t-prod"), e.plan.tenant("t-noisy")
				var c collector
				var done = make(chan struct{})
				go func() {
					defer close(done)
					openLoop(ctx, sz.span, sz.noisyRate, func(i int) {
						c.add(e.client.do(ctx, request{tenant: noisy, model: "vendor/lt-shared", prompt: prompt(30, fmt.Sprint("n", i)), maxTokens: 8}))
					})
				}()
				openLoop(ctx, sz.span, sz.prodRate, func(i int) {
					c.add(e.client.do(ctx, request{tenant: prod, model: "vendor/lt-shared", prompt: prompt(30, fmt.Sprint("p", i)), maxTokens: 8}))
				})
				<-done
				return c.all
			},
			check: func(e *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
				refusalsClear(sr, rs, http.StatusTooManyRequests)
				for _, f := range sr.Tenants {
					if f.Tenant != "t-prod" || f.Sent == 0 {
						continue
					}
					rate := float64(f.Completed) / float64(f.Sent)
					floor := sz.prodFloor
					if e.plan.classes {
						floor = sz.prodFloorFair
					}
					sr.check(fmt.Sprintf("production tenant completes at least %.0f%%", 100*floor), rate >= floor,
						fmt.Sprintf("%d of %d (%.0f%%)", f.Completed, f.Sent, 100*rate))
				}
			},
		},
	}
}

// storm is a provider storm scenario: an open-loop load of short requests
// while the cheap provider is healthy, in a storm (its model replaced
// through the simulator's admin endpoint), then healthy again.
type storm struct {
	tenant, model, upstream, provider, stormJSON string
	sz                                           sizes
	// phases are the stormy provider's calls before, during and after the
	// storm, from its counters; err is a failure to change or read it.
	phases [3]provsim.ModelStats
	err    error
}

func (s *storm) drive(ctx context.Context, e *env) []result {
	t := e.plan.tenant(s.tenant)
	url := e.sys.providerURL(s.provider)
	var c collector
	done := make(chan struct{})
	go func() {
		defer close(done)
		openLoop(ctx, s.sz.span, s.sz.stormRate, func(i int) {
			c.add(e.client.do(ctx, request{tenant: t, model: s.model, prompt: prompt(30, fmt.Sprint(s.tenant, i)), maxTokens: 8}))
		})
	}()
	read := func() provsim.ModelStats {
		st, err := ProviderStats(ctx, e.admin, url)
		if err != nil && s.err == nil {
			s.err = err
		}
		return st.Models[s.upstream]
	}
	set := func(body string) {
		if err := setModel(ctx, e.admin, url, s.upstream, body); err != nil && s.err == nil {
			s.err = err
		}
	}
	start := read()
	sleepCtx(ctx, s.sz.span/4)
	calm := read()
	set(s.stormJSON)
	sleepCtx(ctx, s.sz.span/2)
	stormy := read()
	set(healthyJSON)
	<-done
	end := read()
	s.phases = [3]provsim.ModelStats{minus(calm, start), minus(stormy, calm), minus(end, stormy)}
	return c.all
}

// check checks that the storm cost the clients no lost request and each
// logical request at most the edge's attempts, and that the fallback
// served; it notes the stormy provider's calls per phase.
func (s *storm) check(e *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
	sr.check("the storm was switched on and off", s.err == nil, fmt.Sprint(s.err))
	for i, name := range []string{"before the storm", "during", "after"} {
		p := s.phases[i]
		sr.Notes = append(sr.Notes, fmt.Sprintf("%s %s: %d calls (ok %d, 429 %d, 5xx %d)", s.provider, name,
			p.Requests, p.Outcomes.OK, p.Outcomes.RateLimited, p.Outcomes.Unavailable))
	}
	sr.check(fmt.Sprintf("retries per request at most %d (--max-attempts − 1)", e.maxAttempts-1), sr.RetriesMax <= e.maxAttempts-1,
		fmt.Sprintf("max %d", sr.RetriesMax))
	served := map[string]int{}
	for _, r := range rs {
		if r.completed() {
			served[r.provider]++
		}
	}
	sr.check("the fallback served", served["beta"] > 0, fmt.Sprintf("served by %v", served))
	refusalsClear(sr, rs, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway)
}

func minus(a, b provsim.ModelStats) provsim.ModelStats {
	a.Requests -= b.Requests
	a.Outcomes.OK -= b.Outcomes.OK
	a.Outcomes.RateLimited -= b.Outcomes.RateLimited
	a.Outcomes.Unavailable -= b.Outcomes.Unavailable
	a.Outcomes.Cancelled -= b.Outcomes.Cancelled
	return a
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// backOff makes a closed-loop client honour a refusal's Retry-After (at
// most a second, so the scenario keeps probing), as a well-behaved client
// does, instead of hammering the gateway with requests it knows will fail.
func backOff(ctx context.Context, r result) {
	if r.status != http.StatusTooManyRequests {
		return
	}
	d := 200 * time.Millisecond
	if s, err := strconv.Atoi(r.retryAfter); err == nil && s > 0 {
		d = min(time.Duration(s)*time.Second, time.Second)
	}
	sleepCtx(ctx, d)
}

// refusalsClear checks that every refusal is a status in allowed (or a
// 503, an overloaded gateway's answer) with an OpenAI error code and a
// Retry-After.
func refusalsClear(sr *ScenarioReport, rs []result, allowed ...int) {
	allowed = append(allowed, http.StatusServiceUnavailable)
	bad := 0
	var example string
	for _, r := range rs {
		if r.status == http.StatusOK || r.status == 0 {
			continue
		}
		ok := false
		for _, s := range allowed {
			ok = ok || r.status == s
		}
		if !ok || r.retryAfter == "" || r.errCode == "" {
			bad++
			example = statusKey(r) + " Retry-After=" + r.retryAfter
		}
	}
	sr.check("every refusal is a clear 429 or 503 with Retry-After", bad == 0, fmt.Sprintf("%d not, e.g. %s", bad, example))
}

// checkStreams checks that leaving a stream does not escape the budget:
// every request is charged (tokens and spend) at least what its client
// received; that what the clients received and what was charged stay
// within the daily quota is a limit check of every scenario.
func checkStreams(e *env, sr *ScenarioReport, rs []result, recs map[string][]*switchboardv1.ActivityRecord) {
	byID := map[string]*switchboardv1.ActivityRecord{}
	for _, r := range recs["t-stream"] {
		byID[r.GetId()] = r
	}
	under, left, seen := 0, 0, 0
	var example string
	for _, r := range rs {
		if r.status != http.StatusOK {
			continue
		}
		if r.left {
			left++
		}
		rec, ok := byID[r.id]
		if !ok {
			continue // counted by the activity check
		}
		seen++
		if charged := rec.GetUsage().GetOutputTokens(); charged < r.tokens || r.tokens > 0 && rec.GetCostUsd() <= 0 {
			under++
			example = fmt.Sprintf("%s: received %d tokens, charged %d tokens and $%g (%s)", r.id, r.tokens, charged, rec.GetCostUsd(), rec.GetStatus())
		}
	}
	sr.check("streams were left mid-way", left > 0, "no client left a stream")
	sr.check("every stream charged at least the tokens its client received, and for a price", under == 0, fmt.Sprintf("%d of %d under-charged, e.g. %s", under, seen, example))
	refusalsClear(sr, rs, http.StatusTooManyRequests)
}

// checkDaily checks that the quota ran out and that what came after was
// refused as a policy refusal (not worth retrying before the reset).
func checkDaily(_ *env, sr *ScenarioReport, rs []result, _ map[string][]*switchboardv1.ActivityRecord) {
	refused, policy := 0, 0
	for _, r := range rs {
		if r.status == http.StatusTooManyRequests {
			refused++
			if r.reason == "non_retryable_policy" {
				policy++
			}
		}
	}
	sr.check("the daily quota ran out", refused > 0, "nothing was refused")
	sr.check("refusals past the quota say non_retryable_policy", policy == refused, fmt.Sprintf("%d of %d", policy, refused))
	refusalsClear(sr, rs, http.StatusTooManyRequests)
}
