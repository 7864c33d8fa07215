package chaos

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/tests/loadtest"
)

// Options configure a run.
type Options struct {
	// Binaries are the services to run. (Required)
	Binaries Binaries
	// Short runs the fixed schedule of the end-to-end test: about 70 s of
	// load with one of each fault. Otherwise Duration and Seed draw the
	// schedule.
	Short bool
	// Duration is how long the load runs (long form). (Optional) Defaults
	// to 5 minutes.
	Duration time.Duration
	// Seed draws the long form's faults. (Optional) Defaults to the time.
	Seed int64
	// SessionTTL is the deciders' --broker-session-ttl. (Optional)
	// Defaults to 3 s.
	SessionTTL time.Duration
	// NoAttacks leaves the attacks out (the faults alone, to tell their
	// effects apart).
	NoAttacks bool
	// Keep keeps the work directory (logs, etcd data).
	Keep bool
	// Progress, if set, is told each event as it happens.
	Progress io.Writer
}

// membershipLease is the decider's membership lease: a pause past it must
// end with the replica registered again.
const membershipLease = 10 * time.Second

type faultKind int

const (
	faultAttacks faultKind = iota
	faultKillOwner
	faultPauseOwner
	faultEtcdRestart
)

func (k faultKind) String() string {
	return [...]string{"attacks", "kill -9 of the owner", "SIGSTOP of the owner", "etcd member restart"}[k]
}

type fault struct {
	kind faultKind
	// after is the wait since the previous fault ended (or the load began).
	after time.Duration
}

// schedule is the faults of a run in order. The short form is fixed: the
// attacks, then 6 s later (once the requests-per-minute tenant, quiet
// until the attacks end, spent its burst) a kill -9 of the owner, a
// SIGSTOP of the next owner, an etcd member restart. The long form draws a
// fault every 15-35 s from the seed, with the attacks again half-way.
func schedule(o Options, rng *rand.Rand) []fault {
	if o.Short {
		return []fault{{faultAttacks, 3 * time.Second}, {faultKillOwner, 6 * time.Second}, {faultPauseOwner, 4 * time.Second}, {faultEtcdRestart, 4 * time.Second}}
	}
	fs := []fault{{faultAttacks, 3 * time.Second}}
	at := 15 * time.Second
	attacked := false
	for at < o.Duration-30*time.Second {
		k := faultKind(1 + rng.IntN(3))
		if !attacked && at > o.Duration/2 {
			k, attacked = faultAttacks, true
		}
		gap := time.Duration(15+rng.IntN(21)) * time.Second
		fs = append(fs, fault{k, gap})
		at += faultLength(k, o.SessionTTL) + gap
	}
	return fs
}

// faultLength is how long a fault lasts: a killed owner is restarted 4 s
// later, a paused one continued past its session and its membership lease,
// an etcd member is down for 3 s.
func faultLength(k faultKind, ttl time.Duration) time.Duration {
	switch k {
	case faultKillOwner:
		return 4 * time.Second
	case faultPauseOwner:
		return pauseLength(ttl)
	case faultEtcdRestart:
		return 3 * time.Second
	}
	return 0
}

func pauseLength(ttl time.Duration) time.Duration {
	return max(ttl, membershipLease) + ttl + time.Second
}

// run is one run in progress.
type run struct {
	o      Options
	s      *system
	hc     *http.Client
	start  time.Time
	mu     sync.Mutex
	events []Event
	checks []Check
	// rpmGo holds the requests-per-minute tenant back until the first
	// attacks are over, so that its bucket is full when they end.
	rpmGo chan struct{}
	quiet sync.Once
	// hedgeRecords are the hedge tenant's activity records, for what the
	// decider says its hedge losers cost.
	hedgeRecords map[string]*switchboardv1.ActivityRecord
	// changes are the owner changes seen; faults when each fault began.
	changes []ownerChange
	faults  []*faultRecord
}

// faultRecord is when a fault began and, for a kill or a pause, when the
// decider served again (restarted, or let go).
type faultRecord struct {
	kind        faultKind
	at, resumed time.Time
}

func (r *run) event(format string, args ...any) {
	e := Event{At: time.Since(r.start), What: fmt.Sprintf(format, args...)}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "chaos %7.1fs  %s\n", e.At.Seconds(), e.What)
	}
}

func (r *run) check(c Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, c)
}

// Run starts the deployment, runs the load with its faults and attacks, and
// measures the result from the providers' side.
func Run(ctx context.Context, o Options) (_ *Result, err error) {
	if o.Duration <= 0 {
		o.Duration = 5 * time.Minute
	}
	if o.Short {
		o.Duration = 5 * time.Minute // a bound only: the short schedule ends the load
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 3 * time.Second
	}
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		return nil, err
	}
	res := &Result{Seed: o.Seed, Duration: o.Duration}
	if o.Keep {
		res.Dir = dir
	}
	defer func() {
		if !o.Keep {
			_ = os.RemoveAll(dir)
		}
	}()
	r := &run{o: o, hc: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, start: time.Now()}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "chaos: seed %d, work directory %s\n", o.Seed, dir)
	}
	r.s, err = start(ctx, dir, o.Binaries, o.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	defer r.s.stop() //nolint:contextcheck // stopping must not depend on the run's context
	res.Etcd = r.s.etcd.describe()
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "chaos: etcd: %s\n", res.Etcd)
	}
	rec := &recorder{}
	if err := r.warm(ctx, rec); err != nil {
		return nil, err
	}

	r.start = time.Now()
	r.event("load starts: d0 owns the broker; edge A → d0, edge B → d1")
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchOwner(watchCtx) }()
	r.rpmGo = make(chan struct{})
	load := runLoad(loadCtx, ctx, r.hc, r.s.edges, rec, r.rpmGo)
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x9e3779b97f4a7c15)) //nolint:gosec // a reproducible schedule, not a secret
	for _, f := range schedule(o, rng) {
		select {
		case <-loadCtx.Done():
		case <-time.After(f.after):
		}
		if loadCtx.Err() != nil {
			break
		}
		if f.kind != faultAttacks || !o.NoAttacks {
			// A fault runs to its end (a paused decider is let go, a
			// killed one restarted) even when the load ends meanwhile.
			r.inject(ctx, f.kind, rng)
		}
		if f.kind == faultAttacks {
			r.quiet.Do(func() { close(r.rpmGo) })
		}
	}
	if o.Short {
		select {
		case <-loadCtx.Done():
		case <-time.After(6 * time.Second):
		}
		stopLoad()
	}
	<-loadCtx.Done()
	load.Wait()
	r.event("load ends")
	res.Duration = time.Since(r.start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.ActivityLost = r.activity(ctx, rec.all())
	stopWatch()
	<-watched
	r.measure(ctx, rec.all(), res)
	res.Events = r.events
	res.Checks = append(res.Checks, r.checks...)
	return res, nil
}

// warm makes the hedge endpoints measured on the replicas behind both
// edges (the hedge policy backs up a fast endpoint only with another one
// measured fast): two streams of the hedge size on each, limited to it.
func (r *run) warm(ctx context.Context, rec *recorder) error {
	for _, e := range r.s.edges {
		for _, p := range []string{"p-ha", "p-hb"} {
			for i := range 2 {
				a := ask(ctx, r.hc, e, tenantHedge, keyHedge, modelHedge, fmt.Sprintf("warm %s %d ", p, i)+strings.Repeat("word", hedgeTokens+50), 4, true, `{"only":["`+p+`"]}`)
				rec.add(a)
				if a.status != http.StatusOK {
					return fmt.Errorf("warm-up on %s through edge %s: %d %s", p, e.name, a.status, a.code)
				}
			}
		}
	}
	return nil
}

// watchOwner polls the election in etcd and records every change of owner.
func (r *run) watchOwner(ctx context.Context) {
	last := 0
	for ctx.Err() == nil {
		if o, err := r.s.owner(ctx); err == nil && o != last {
			r.mu.Lock()
			r.changes = append(r.changes, ownerChange{at: time.Now(), from: last, to: o})
			r.mu.Unlock()
			if o < 0 {
				r.event("no broker owner (was d%d)", last)
			} else {
				r.event("d%d owns the broker", o)
			}
			last = o
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// inject runs one fault to its end.
func (r *run) inject(ctx context.Context, k faultKind, rng *rand.Rand) {
	begin := time.Now()
	fr := &faultRecord{kind: k, at: begin}
	defer func() {
		r.mu.Lock()
		r.faults = append(r.faults, fr)
		r.mu.Unlock()
	}()
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	switch k {
	case faultAttacks:
		r.event("attacks from valid credentials through d1")
		for _, c := range r.s.attacks(ctx, r.hc, 1) {
			r.event("%s: %s", c.Name, c.Measured)
			r.check(c)
		}
	case faultKillOwner:
		o, err := r.s.owner(ctx)
		if err != nil || o < 0 {
			r.event("kill -9: no owner to kill (%v)", err)
			return
		}
		r.s.kill(o)
		r.event("kill -9 d%d (the owner)", o)
		sleep(faultLength(k, r.o.SessionTTL))
		if err := r.s.startDecider(context.WithoutCancel(ctx), o); err != nil {
			r.event("restart d%d: %v", o, err)
			r.check(Check{Name: fmt.Sprintf("d%d restarts after kill -9", o), Measured: err.Error(), Bound: "serving"})
			return
		}
		fr.resumed = time.Now()
		r.event("d%d restarted", o)
	case faultPauseOwner:
		o, err := r.s.owner(ctx)
		if err != nil || o < 0 {
			r.event("SIGSTOP: no owner to pause (%v)", err)
			return
		}
		r.s.pause(o, true)
		r.event("SIGSTOP d%d (the owner) for %s", o, pauseLength(r.o.SessionTTL))
		sleep(pauseLength(r.o.SessionTTL))
		r.s.pause(o, false)
		cont := time.Now()
		fr.resumed = cont
		r.event("SIGCONT d%d", o)
		c := Check{Name: fmt.Sprintf("membership: d%d registered again after its pause", o), Bound: "within 10 s of SIGCONT"}
		for time.Since(cont) < 10*time.Second && ctx.Err() == nil {
			if r.s.member(ctx, o) {
				c.OK = true
				break
			}
			sleep(100 * time.Millisecond)
		}
		if c.OK {
			c.Measured = fmt.Sprintf("after %.1f s", time.Since(cont).Seconds())
		} else {
			c.Measured = "not registered"
		}
		r.check(c)
	case faultEtcdRestart:
		i := rng.IntN(3)
		r.event("stopping etcd member %d", i)
		// A member stops serving at once but takes several seconds to
		// close (it waits for its clients' requests and watches): that
		// counts in the time it is down.
		how := r.s.etcd.stopMember(i)
		r.event("etcd member %d stopped (%s)", i, how)
		sleep(faultLength(k, r.o.SessionTTL) - time.Since(begin))
		if err := r.s.etcd.startMember(ctx, i); err != nil {
			r.event("etcd member %d restart: %v", i, err)
			r.check(Check{Name: fmt.Sprintf("etcd member %d restarts", i), Measured: err.Error(), Bound: "ready"})
			return
		}
		r.event("etcd member %d started again", i)
	}
}

// listed is every activity record any replica lists for tenant, by id.
func (r *run) listed(ctx context.Context, tenant string) map[string]*switchboardv1.ActivityRecord {
	ids := map[string]*switchboardv1.ActivityRecord{}
	for i := range r.s.deciders {
		c, closeRPC, err := r.s.rpc(i, operatorToken)
		if err != nil {
			continue
		}
		cursor := ""
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := c.ListActivity(cctx, &switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: tenant}, Limit: 500, Cursor: cursor})
			cancel()
			if err != nil {
				break
			}
			for _, rec := range resp.GetRecords() {
				ids[rec.GetId()] = rec
			}
			if resp.GetNextCursor() == "" || len(resp.GetRecords()) == 0 {
				break
			}
			cursor = resp.GetNextCursor()
		}
		closeRPC()
	}
	return ids
}

// activity checks that every answered request has an activity record on
// some replica, waiting up to 30 s for the edges' last batches.
func (r *run) activity(ctx context.Context, answers []answer) int {
	defer func() { r.hedgeRecords = r.listed(ctx, tenantHedge) }()
	want := map[string]map[string]bool{}
	total := 0
	for _, a := range answers {
		if a.status == http.StatusOK && a.id != "" {
			if want[a.tenant] == nil {
				want[a.tenant] = map[string]bool{}
			}
			want[a.tenant][a.id] = true
			total++
		}
	}
	missing := total
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing = 0
		for tenant, ids := range want {
			have := r.listed(ctx, tenant)
			for id := range ids {
				if have[id] == nil {
					missing++
				}
			}
		}
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	r.check(Check{Name: "activity lost: answered requests no replica lists", Measured: fmt.Sprintf("%d of %d", missing, total), Bound: "0", OK: missing == 0 && total > 0})
	return missing
}

// measure turns what the taps, the providers and the clients saw into the
// result's checks.
func (r *run) measure(ctx context.Context, answers []answer, res *Result) {
	ttl := r.o.SessionTTL
	res.Answers = map[string]map[int]int{}
	for _, a := range answers {
		if res.Answers[a.tenant] == nil {
			res.Answers[a.tenant] = map[int]int{}
		}
		res.Answers[a.tenant][a.status]++
	}
	var changes []ownerChange
	for _, c := range r.changes {
		if c.to >= 0 {
			changes = append(changes, c)
		}
	}
	if r.o.Keep {
		r.dump(answers)
	}
	rpmArrivals, _ := r.s.taps["p-rpm"].record()
	c, over := rateCheck(rpmArrivals, changes, rpmLimit, ttl)
	res.OverAdmission = over
	res.Checks = append(res.Checks, c)
	_, flight := r.s.taps["p-conc"].record()
	c, peak := concurrencyCheck(flight, changes, concLimit)
	res.ConcurrencyPeak = peak
	res.Checks = append(res.Checks, c)

	// Ghost slots: after each fault the concurrency tenant is admitted
	// again at its learning-mode capacity within the session TTL and a
	// second of the moment a new owner was known (or of the fault, when
	// the owner did not change). After a kill or a pause, not before the
	// replica runs again: the edge that knows only it reconciles its calls
	// (and gives their slots back) only then.
	target := int(concLimit - keep(concLimit))
	for _, f := range r.faults {
		if f.kind == faultAttacks {
			continue
		}
		name := fmt.Sprintf("ghost slots after %s at %.0fs", f.kind, f.at.Sub(r.start).Seconds())
		t0 := f.at
		label := "the fault"
		if f.kind != faultEtcdRestart {
			found := false
			for _, ch := range changes {
				if ch.at.After(f.at) && ch.at.Before(f.at.Add(30*time.Second)) {
					t0, found, label = ch.at, true, "the new owner"
					break
				}
			}
			if !found {
				res.Checks = append(res.Checks, Check{Name: name, Measured: "no new owner within 30 s", Bound: "a new owner"})
				continue
			}
			if f.resumed.After(t0) {
				t0, label = f.resumed, "SIGCONT"
				if f.kind == faultKillOwner {
					label = "the restart"
				}
			}
		}
		limit := ttl + time.Second
		if t0.Add(limit).After(r.start.Add(res.Duration)) {
			continue // the load ended before the deadline: nothing to measure
		}
		d := recovery(flight, t0, t0.Add(30*time.Second), target)
		m := "never within 30 s"
		if d >= 0 {
			m = fmt.Sprintf("%d in flight %.2f s after %s", target, d.Seconds(), label)
		}
		res.Checks = append(res.Checks, Check{Name: name, Measured: m, Bound: fmt.Sprintf("≤ %s (TTL + 1 s)", limit), OK: d >= 0 && d <= limit})
	}

	// The providers' own counters against the taps', and the hedge legs'
	// cost: what the hedge endpoints were sent beyond the answers they
	// served, at their input price (a hedge loser is cancelled at the
	// winner's first token, so its prompt is what it costs; its output, if
	// any, is counted too).
	counted := true
	var mismatch []string
	stats := map[string]struct{ requests, prompt, completion int64 }{}
	for _, p := range providerNames {
		st, err := loadtest.ProviderStats(ctx, r.hc, r.s.simURLs[p])
		if err != nil {
			counted = false
			mismatch = append(mismatch, p+": "+err.Error())
			continue
		}
		ms := st.Models[upstreamModel]
		stats[p] = struct{ requests, prompt, completion int64 }{st.Requests, ms.PromptTokens, ms.CompletionTokens}
		arr, _ := r.s.taps[p].record()
		if int64(len(arr)) != st.Requests {
			counted = false
			mismatch = append(mismatch, fmt.Sprintf("%s: tap %d, provider %d", p, len(arr), st.Requests))
		}
	}
	m := "every provider's count equals its tap's"
	if !counted {
		m = strings.Join(mismatch, "; ")
	}
	res.Checks = append(res.Checks, Check{Name: "providers' counters agree with the taps", Measured: m, Bound: "equal", OK: counted})

	served := map[string][2]int64{}
	legs := int64(0)
	for _, a := range answers {
		if a.tenant == tenantHedge && a.status == http.StatusOK {
			v := served[a.provider]
			v[0] += a.promptTokens
			v[1] += a.completion
			served[a.provider] = v
			legs--
		}
	}
	var spend float64
	for _, p := range []string{"p-ha", "p-hb"} {
		legs += stats[p].requests
		spend += float64(stats[p].prompt-served[p][0])*hedgePrices[p][0]/1e6 + float64(stats[p].completion-served[p][1])*hedgePrices[p][1]/1e6
	}
	res.HedgeSpendUSD = spend
	// The budget's spending after the owner's last snapshot is lost in an
	// unclean takeover (about a second of grants): the hedges started in
	// the snapshot gap before a change of owner may be granted again.
	var recorded, lostSpend float64
	hedged := 0
	for _, rec := range r.hedgeRecords {
		if !rec.GetHedge().GetUsed() {
			continue
		}
		hedged++
		recorded += rec.GetHedge().GetLoserCostUsd()
		for _, at := range rec.GetAttempts() {
			if !at.GetHedge() {
				continue
			}
			st := at.GetStartTime().AsTime()
			for _, ch := range changes {
				if !st.Before(ch.at.Add(-snapshotGap(ttl))) && !st.After(ch.at) {
					lostSpend += rec.GetHedge().GetLoserCostUsd()
					break
				}
			}
		}
	}
	days := 1 + dailyResets(r.start, time.Now())
	budget := hedgeBudgetUSD*float64(days) + lostSpend
	res.Checks = append(res.Checks, Check{Name: "hedge budget: hedge legs' cost at the providers",
		Measured: fmt.Sprintf("$%.5f over %d extra legs (the records: %d hedged, losers $%.5f)", spend, legs, hedged, recorded),
		Bound:    fmt.Sprintf("≤ $%g × %d UTC day + $%.5f granted in snapshot gaps", hedgeBudgetUSD, days, lostSpend),
		OK:       spend <= budget+1e-9 && !math.IsNaN(spend)})
	for _, c := range res.Checks {
		if !c.OK && r.o.Progress != nil {
			fmt.Fprintf(r.o.Progress, "chaos: FAIL %s: %s (bound %s)\n", c.Name, c.Measured, c.Bound)
		}
	}
}

// dailyResets is how many times 00:00 UTC falls in (from, to].
func dailyResets(from, to time.Time) int {
	day := func(t time.Time) int64 { return t.UTC().Unix() / 86400 }
	return int(day(to) - day(from))
}

// dump writes the clients' answers and the taps' records into the work
// directory, as offsets in seconds from the start of the load.
func (r *run) dump(answers []answer) {
	var b strings.Builder
	b.WriteString("tenant\tedge\tstart\tend\tstatus\tcode\tprovider\tid\n")
	for _, a := range answers {
		fmt.Fprintf(&b, "%s\t%s\t%.3f\t%.3f\t%d\t%s\t%s\t%s\n", a.tenant, a.edge, a.start.Sub(r.start).Seconds(), a.end.Sub(r.start).Seconds(), a.status, a.code, a.provider, a.id)
	}
	_ = os.WriteFile(r.s.dir+"/answers.tsv", []byte(b.String()), 0o600)
	for name, t := range r.s.taps {
		arr, flight := t.record()
		b.Reset()
		for _, a := range arr {
			fmt.Fprintf(&b, "%.3f\n", a.Sub(r.start).Seconds())
		}
		_ = os.WriteFile(r.s.dir+"/arrivals-"+name+".txt", []byte(b.String()), 0o600)
		b.Reset()
		for _, p := range flight {
			fmt.Fprintf(&b, "%.3f\t%d\n", p.at.Sub(r.start).Seconds(), p.n)
		}
		_ = os.WriteFile(r.s.dir+"/inflight-"+name+".tsv", []byte(b.String()), 0o600)
	}
}
