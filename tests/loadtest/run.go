package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// Options configure a run.
type Options struct {
	// Short runs every scenario briefly (about half a minute in all), for
	// make test; otherwise a run takes about three minutes.
	Short bool
	// Classes writes workload-class contracts sized for a run of minutes
	// and tenant weights into the catalog (workload_classes:, weight:), and
	// leaves the noisy tenant without a limit of its own: only the fair
	// queue holds it back. Without it the classes keep their default
	// contracts (background waits up to 2 minutes), tenants weigh the same,
	// and the noisy tenant has a limit of its own.
	Classes bool
	// Only runs the named scenarios; empty runs them all.
	Only []string
	// Binaries, when set, run the built services as child processes
	// instead of inside this process.
	Binaries Binaries
	// Keep keeps the work directory (catalog, logs, etcd data).
	Keep bool
	// Progress receives a line per scenario as it starts. (Optional)
	Progress io.Writer
}

// Class deadlines: a request of the class that takes longer, or is refused
// for lack of time, is a deadline miss.
var classDeadline = map[string]time.Duration{
	"interactive": 5 * time.Second,
	"partner":     10 * time.Second,
	"background":  30 * time.Second,
	"batch":       time.Minute,
}

// requestTimeout bounds any one request: unanswered by then, it is lost.
const requestTimeout = 90 * time.Second

// activityWait bounds the wait for the activity log to hold every
// request a scenario's clients saw served.
const activityWait = 20 * time.Second

// env is what a scenario drives and measures.
type env struct {
	sys         *system
	plan        *plan
	client      *client
	admin       *http.Client
	sizes       sizes
	maxAttempts int
}

func newEnv(sys *system, p *plan, sz sizes) *env {
	return &env{sys: sys, plan: p, client: newClient(sys.edgeURL, requestTimeout), admin: &http.Client{Timeout: 10 * time.Second},
		sizes: sz, maxAttempts: sys.maxAttempts}
}

// collector gathers results from many goroutines.
type collector struct {
	mu  sync.Mutex
	all []result
}

func (c *collector) add(r result) {
	c.mu.Lock()
	c.all = append(c.all, r)
	c.mu.Unlock()
}

// openLoop calls fn at rate per second for span, each call in its own
// goroutine (arrivals do not wait for answers), and waits for them all.
func openLoop(ctx context.Context, span time.Duration, rate float64, fn func(i int)) {
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= span {
			break
		}
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				wg.Wait()
				return
			case <-t.C:
			}
		}
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// closedLoop runs workers that each send one request after another for
// span.
func closedLoop(ctx context.Context, span time.Duration, workers int, fn func(w, i int)) {
	var wg sync.WaitGroup
	end := time.Now().Add(span)
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				fn(w, i)
			}
		})
	}
	wg.Wait()
}

// Check is one pass/fail check of a scenario.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// LimitCheck compares what a configured limit let through, seen from
// outside, with the most it may let through over the scenario's span.
type LimitCheck struct {
	// Subject names the limit: whose, which unit and window.
	Subject string `json:"subject"`
	// Source says where Observed was read: the provider simulator's
	// counters, the decider's activity log, or the clients' answers.
	Source   string  `json:"source"`
	Observed float64 `json:"observed"`
	Bound    float64 `json:"bound"`
	// Over is max(0, Observed − Bound): over-admission.
	Over float64 `json:"over"`
}

// TenantFigures are one tenant's figures in a scenario.
type TenantFigures struct {
	Tenant string `json:"tenant"`
	Class  string `json:"class"`
	// Weight is the tenant's weight, times its class's with --classes.
	Weight    float64 `json:"weight"`
	Sent      int     `json:"sent"`
	Completed int     `json:"completed"`
	// Admitted is the requests the broker let through (dispatched, per the
	// activity log).
	Admitted int `json:"admitted"`
	// FairShare is the tenant's weighted max-min fair share of what the
	// shared resource could admit over the span, given every tenant's
	// demand (what it sent, capped by its own limits).
	FairShare float64 `json:"fair_share"`
	// Fairness is Admitted / FairShare (1 = its fair share; below 1 = less).
	Fairness float64 `json:"fairness"`
	// P50 and P99 are the latencies of the tenant's answered requests,
	// refusals included: whether its latency held, not only its share.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// ProviderFigures are what one simulated provider received for the
// scenario's model, from its own counters.
type ProviderFigures struct {
	Provider    string `json:"provider"`
	Model       string `json:"model"`
	Requests    int64  `json:"requests"`
	OK          int64  `json:"ok"`
	RateLimited int64  `json:"rate_limited"`
	Unavailable int64  `json:"unavailable"`
	Cancelled   int64  `json:"cancelled"`
}

// ScenarioReport is the outcome of one scenario.
type ScenarioReport struct {
	Name     string        `json:"name"`
	What     string        `json:"what"`
	Span     time.Duration `json:"span_ns"`
	Requests int           `json:"requests"`
	// Completed is the requests answered in full (or streams the client
	// left on purpose, without an error before).
	Completed      int     `json:"completed"`
	CompletionRate float64 `json:"completion_rate"`
	DeadlineMisses int     `json:"deadline_misses"`
	// Lost is the requests with no answer at all (transport error,
	// timeout), or a non-200 answer without an OpenAI error body.
	Lost int `json:"lost"`
	// RetriesMean and RetriesMax are per logical request; RetriesSource
	// says whether they come from x-switchboard-retries or the activity
	// log's attempts.
	RetriesMean   float64       `json:"retries_mean"`
	RetriesMax    int           `json:"retries_max"`
	RetriesSource string        `json:"retries_source"`
	P50           time.Duration `json:"p50_ns"`
	P99           time.Duration `json:"p99_ns"`
	// Fairness is the lowest tenant fairness when tenants compete, 0 otherwise.
	Fairness float64 `json:"fairness,omitempty"`
	// Contended is set when the competing tenants asked for more than the
	// shared resource could admit (within their own limits).
	Contended     bool              `json:"contended,omitempty"`
	Tenants       []TenantFigures   `json:"tenants"`
	Providers     []ProviderFigures `json:"providers"`
	Statuses      map[string]int    `json:"statuses"`
	Limits        []LimitCheck      `json:"limits"`
	OverAdmission float64           `json:"over_admission"`
	// Notes are figures of the scenario's own.
	Notes  []string `json:"notes,omitempty"`
	Checks []Check  `json:"checks"`
	Passed bool     `json:"passed"`
}

// Report is a whole run's outcome.
type Report struct {
	Short         bool             `json:"short"`
	Classes       bool             `json:"classes"`
	Started       time.Time        `json:"started"`
	Elapsed       time.Duration    `json:"elapsed_ns"`
	Scenarios     []ScenarioReport `json:"scenarios"`
	OverAdmission float64          `json:"over_admission"`
	Passed        bool             `json:"passed"`
}

// Run starts the system, runs the scenarios one after another and stops
// it. The error is for a system that would not start or a measurement
// that could not be taken; failed checks are in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	sz := sizesFor(opts.Short)
	p := buildPlan(sz, opts.Classes)
	rep := &Report{Short: opts.Short, Classes: opts.Classes, Started: time.Now().UTC(), Passed: true}
	defer func() { rep.Elapsed = time.Since(rep.Started) }()
	sys, err := startSystem(ctx, p, opts.Binaries, opts.Keep)
	if err != nil {
		return nil, err
	}
	defer sys.stop() //nolint:contextcheck // stopping must not depend on the run's context, which may be what ended it
	if opts.Keep && opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "work directory: %s\n", sys.dir)
	}
	e := newEnv(sys, p, sz)
	defer e.client.close()
	if err := e.waitReady(ctx); err != nil {
		return nil, err
	}
	for _, sc := range scenarios(sz) {
		if len(opts.Only) > 0 && !contains(opts.Only, sc.name) {
			continue
		}
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%-16s %s ...\n", sc.name, sc.what)
		}
		sr, err := e.run(ctx, sc)
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		rep.Scenarios = append(rep.Scenarios, *sr)
		rep.OverAdmission += sr.OverAdmission
		rep.Passed = rep.Passed && sr.Passed
	}
	return rep, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ScenarioNames lists the scenarios in the order they run.
func ScenarioNames() []string {
	var out []string
	for _, sc := range scenarios(sizesFor(true)) {
		out = append(out, sc.name)
	}
	return out
}

// waitReady polls until the edge knows the catalog's keys: a request of
// an unknown model gets a 404 rather than a 401 or 503.
func (e *env) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := e.plan.tenants[0]
	var last string
	for {
		r := e.client.do(ctx, request{tenant: &t, model: "vendor/none", prompt: "ready?", maxTokens: 1})
		if r.status == http.StatusNotFound {
			return nil
		}
		last = fmt.Sprintf("status %d %s %v", r.status, r.errCode, r.err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("the system did not become ready: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scenario is one bounded load on the system.
type scenario struct {
	name, what string
	tenants    []string
	models     []string
	// drive sends the load and returns what the clients saw.
	drive func(ctx context.Context, e *env) []result
	// capacity, when tenants compete, is what the resource they share may
	// admit over the span: the whole of it is divided into fair shares.
	capacity func(span time.Duration) float64
	// check adds the scenario's own checks.
	check func(e *env, sr *ScenarioReport, results []result, recs map[string][]*switchboardv1.ActivityRecord)
}

// run drives one scenario and measures it.
func (e *env) run(ctx context.Context, sc scenario) (*ScenarioReport, error) {
	sr := &ScenarioReport{Name: sc.name, What: sc.what, Statuses: map[string]int{}}
	before := map[string]point{}
	beforeStats := map[string]provsim.ModelStats{}
	urls, limited := map[string]string{}, map[string][]string{}
	for _, mid := range sc.models {
		m := e.plan.model(mid)
		for _, ep := range m.endpoints {
			at := time.Now()
			st, err := ProviderStats(ctx, e.admin, e.sys.providerURL(ep.provider))
			if err != nil {
				return nil, err
			}
			ms := st.Models[m.upstream]
			beforeStats[ep.provider+"/"+m.upstream] = ms
			before[ep.provider+"/"+m.upstream] = point{at: at, end: time.Now(), c: counters{ms.Requests, ms.PromptTokens, ms.CompletionTokens}}
			if len(ep.limits) > 0 {
				urls[ep.provider] = e.sys.providerURL(ep.provider)
				limited[ep.provider] = append(limited[ep.provider], m.upstream)
			}
		}
	}
	t0 := time.Now()
	smp := startSampler(ctx, e.admin, urls, limited, e.sizes.sample)
	results := sc.drive(ctx, e)
	t1 := time.Now()
	series := smp.finish()
	sr.Span = t1.Sub(t0)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Any request was admitted at most its whole latency before it was
	// counted anywhere.
	var lag time.Duration
	for _, r := range results {
		lag = max(lag, r.latency())
	}

	// spanBound is a limit's bound over the span; a daily quota's is its
	// capacity again for every reset (00:00 UTC, as the catalog's limits
	// here do not set reset_at) the span crossed.
	spanBound := func(l limit) float64 {
		if l.per != "day" {
			return l.bound(sr.Span)
		}
		return l.bound(sr.Span) * float64(1+dailyResets(t0.Add(-lag), t1))
	}

	// What each provider received, from its own counters: over the whole
	// span, and in the worst window between two samples.
	for _, mid := range sc.models {
		m := e.plan.model(mid)
		for _, ep := range m.endpoints {
			key := ep.provider + "/" + m.upstream
			at := time.Now()
			st, err := ProviderStats(ctx, e.admin, e.sys.providerURL(ep.provider))
			if err != nil {
				return nil, err
			}
			b, a := beforeStats[key], st.Models[m.upstream]
			sr.Providers = append(sr.Providers, ProviderFigures{
				Provider: ep.provider, Model: m.upstream, Requests: a.Requests - b.Requests, OK: a.Outcomes.OK - b.Outcomes.OK,
				RateLimited: a.Outcomes.RateLimited - b.Outcomes.RateLimited, Unavailable: a.Outcomes.Unavailable - b.Outcomes.Unavailable,
				Cancelled: a.Outcomes.Cancelled - b.Outcomes.Cancelled,
			})
			got := counters{requests: a.Requests - b.Requests, input: a.PromptTokens - b.PromptTokens, output: a.CompletionTokens - b.CompletionTokens}
			whose := "provider " + ep.provider
			if ep.project != "" {
				whose += " project " + ep.project
			}
			ps := append(append([]point{before[key]}, series[key]...), point{at: at, end: time.Now(), c: counters{a.Requests, a.PromptTokens, a.CompletionTokens}})
			for _, l := range ep.limits {
				sr.addLimit(whose+" "+l.String(), "provider counters", got.of(l.unit), spanBound(l))
				if w, ok := worstWindow(ps, l, lag, false); ok && l.per != "day" {
					sr.addLimit(whose+" "+l.String(), "provider, "+windowName(w), w.observed, w.bound)
				}
			}
		}
	}

	// What each tenant was admitted and charged, from the activity log,
	// once it holds every request its clients saw served.
	recs := map[string][]*switchboardv1.ActivityRecord{}
	for _, tid := range sc.tenants {
		t := e.plan.tenant(tid)
		want := map[string]bool{}
		for _, r := range results {
			if r.tenant == tid && r.status == http.StatusOK && r.id != "" {
				want[r.id] = true
			}
		}
		got, missing, err := e.waitActivity(ctx, t, t0.Add(-time.Second), want)
		if err != nil {
			return nil, err
		}
		recs[tid] = got
		sr.check("activity log holds every served request of "+tid, missing == 0, fmt.Sprintf("%d of %d missing", missing, len(want)))
		c := recordCounters(got)
		var client counters
		for _, r := range results {
			if r.tenant == tid && r.status == http.StatusOK {
				client.requests++
				client.output += r.tokens
			}
		}
		series := activitySeries(got)
		recLag := max(lag, longest(got))
		for _, l := range t.limits {
			sr.addLimit("tenant "+tid+" "+l.String(), "activity log", c.of(l.unit), spanBound(l))
			if w, ok := worstWindow(series, l, recLag, true); ok && l.per != "day" {
				sr.addLimit("tenant "+tid+" "+l.String(), "activity, "+windowName(w), w.observed, w.bound)
			}
			if l.unit == "requests" || l.unit == "output_tokens" {
				sr.addLimit("tenant "+tid+" "+l.String(), "clients", client.of(l.unit), spanBound(l))
			}
		}
	}

	e.figures(sr, sc, results, recs)
	if sc.check != nil {
		sc.check(e, sr, results, recs)
	}
	sr.check("no over-admission", sr.OverAdmission == 0, fmt.Sprintf("%g over the limits' bounds", sr.OverAdmission))
	sr.check("every request answered (a status and an OpenAI error body when not 200)", sr.Lost == 0, fmt.Sprintf("%d lost", sr.Lost))
	sr.Passed = true
	for _, c := range sr.Checks {
		sr.Passed = sr.Passed && c.OK
	}
	return sr, nil
}

// waitActivity lists the tenant's records until every id in want is
// among them or activityWait has passed, and returns them and how many of
// want are missing.
func (e *env) waitActivity(ctx context.Context, t *tenant, since time.Time, want map[string]bool) ([]*switchboardv1.ActivityRecord, int, error) {
	deadline := time.Now().Add(activityWait)
	for {
		recs, err := activity(ctx, e.admin, e.sys.edgeURL, t.key, since)
		if err != nil {
			return nil, 0, err
		}
		missing := len(want)
		for _, r := range recs {
			if want[r.GetId()] {
				missing--
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return recs, missing, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (sr *ScenarioReport) check(name string, ok bool, detail string) {
	c := Check{Name: name, OK: ok}
	if !ok {
		c.Detail = detail
	}
	sr.Checks = append(sr.Checks, c)
}

// windowName names a worst window by its length.
func windowName(w window) string {
	return fmt.Sprintf("worst %.1fs window", w.length.Seconds())
}

func (sr *ScenarioReport) addLimit(subject, source string, observed, bound float64) {
	over := max(0, observed-bound)
	sr.Limits = append(sr.Limits, LimitCheck{Subject: subject, Source: source, Observed: observed, Bound: bound, Over: over})
	sr.OverAdmission += over
}

// figures fills the scenario's common figures from the results and the
// activity records.
func (e *env) figures(sr *ScenarioReport, sc scenario, results []result, recs map[string][]*switchboardv1.ActivityRecord) {
	byID := map[string]*switchboardv1.ActivityRecord{}
	for _, rs := range recs {
		for _, r := range rs {
			byID[r.GetId()] = r
		}
	}
	var lat []time.Duration
	var retries, counted int
	header := false
	for _, r := range results {
		if r.retries >= 0 {
			header = true
		}
	}
	sr.RetriesSource = "activity log"
	if header {
		sr.RetriesSource = "x-switchboard-retries"
	}
	for _, r := range results {
		sr.Requests++
		sr.Statuses[statusKey(r)]++
		if r.completed() {
			sr.Completed++
		}
		if r.status == 0 || (r.status != http.StatusOK && r.errCode == "" && r.errType == "") || (r.err != nil && !r.left) {
			sr.Lost++
		}
		if r.status != 0 {
			lat = append(lat, r.latency())
		}
		if deadlineMiss(r) {
			sr.DeadlineMisses++
		}
		n := -1
		if header {
			n = max(r.retries, 0)
		} else if rec, ok := byID[r.id]; ok && r.id != "" {
			n = retriesOf(rec)
		} else if r.status != 0 {
			n = 0 // refused before any attempt
		}
		if n >= 0 {
			retries += n
			counted++
			sr.RetriesMax = max(sr.RetriesMax, n)
		}
	}
	if sr.Requests > 0 {
		sr.CompletionRate = float64(sr.Completed) / float64(sr.Requests)
	}
	if counted > 0 {
		sr.RetriesMean = float64(retries) / float64(counted)
	}
	sr.P50, sr.P99 = percentile(lat, 50), percentile(lat, 99)

	var demand, weight []float64
	var total float64
	for _, tid := range sc.tenants {
		t := e.plan.tenant(tid)
		f := TenantFigures{Tenant: tid, Class: t.class, Weight: max(t.weight, 1)}
		if e.plan.classes {
			f.Weight *= classWeight[t.class]
		}
		var tlat []time.Duration
		for _, r := range results {
			if r.tenant == tid {
				f.Sent++
				if r.completed() {
					f.Completed++
				}
				if r.status != 0 {
					tlat = append(tlat, r.latency())
				}
			}
		}
		f.P50, f.P99 = percentile(tlat, 50), percentile(tlat, 99)
		f.Admitted = int(recordCounters(recs[tid]).requests)
		total += float64(f.Admitted)
		// A tenant's demand is what it sent, but no more than its own
		// limits let through: being held to them is not unfair.
		d := float64(f.Sent)
		for _, l := range t.limits {
			if l.unit == "requests" {
				d = min(d, l.bound(sr.Span))
			}
		}
		demand = append(demand, d)
		weight = append(weight, f.Weight)
		sr.Tenants = append(sr.Tenants, f)
	}
	if len(sr.Tenants) > 1 {
		if sc.capacity != nil {
			total = sc.capacity(sr.Span)
		}
		sr.Contended = sum(demand) > total
		fair := fairShares(total, demand, weight)
		for i := range sr.Tenants {
			sr.Tenants[i].FairShare = fair[i]
			if fair[i] > 0 {
				sr.Tenants[i].Fairness = float64(sr.Tenants[i].Admitted) / fair[i]
				if sr.Fairness == 0 || sr.Tenants[i].Fairness < sr.Fairness {
					sr.Fairness = sr.Tenants[i].Fairness
				}
			}
		}
	}
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// deadlineMiss reports whether a request took longer than its class's
// deadline or was refused for lack of time.
func deadlineMiss(r result) bool {
	if r.status == http.StatusGatewayTimeout || r.reason == "deadline" || r.errCode == "queue_deadline" || r.errCode == "deadline" {
		return true
	}
	d, ok := classDeadline[r.class]
	return ok && r.status != 0 && r.latency() > d
}

// statusKey names how a request ended, for the status counts.
func statusKey(r result) string {
	switch {
	case r.status == 0:
		return "no answer"
	case r.left:
		return "200 left mid-stream"
	case r.status == http.StatusOK && r.errCode != "":
		return "200 then " + r.errCode
	case r.status == http.StatusOK:
		return "200"
	}
	k := fmt.Sprintf("%d %s", r.status, r.errCode)
	if r.reason != "" {
		k += " (" + r.reason
		if r.scope != "" {
			k += "/" + r.scope
		}
		k += ")"
	}
	return k
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
