package chaos

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
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
	// Short runs the fixed schedule of the end-to-end test: about 90 s of
	// load with one of each fault, the short form's tenant limits.
	// Otherwise Schedule, or Duration and Seed, make the schedule.
	Short bool
	// Duration is how long the load runs (long form, without a Schedule).
	// (Optional) Defaults to 5 minutes.
	Duration time.Duration
	// Seed draws the long form's faults, their gaps and the tenants'
	// limits not given. (Optional) Defaults to the time.
	Seed int64
	// Schedule, if set, is the long form's faults in order, by name
	// (attacks, kill, term, pause, etcd, cut: ParseSchedule), each after a
	// gap drawn from Seed (15-35 s); the load ends 8 s after the last.
	// (Optional)
	Schedule []string
	// RPMLimit and ConcLimit are tenant rpm's requests a minute and tenant
	// conc's requests in flight. (Optional) The short form's are 50 and 4;
	// the long form draws them from Seed (30-90, 3-6).
	RPMLimit, ConcLimit int
	// LeaseLimit is tenant lease's requests a minute, at least 100 so that
	// its bucket is leased. (Optional) The short form's is 120; the long
	// form draws it from Seed (100-180).
	LeaseLimit int
	// NoLeases runs the deciders without --broker-leases: every
	// reservation of a replica that does not own the broker is forwarded
	// to the owner.
	NoLeases bool
	// DeciderArgs are added to every decider's flags, after the run's own.
	// (Optional)
	DeciderArgs []string
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
	faultTermOwner
	faultCut
)

func (k faultKind) String() string {
	return [...]string{"attacks", "kill -9 of the owner", "SIGSTOP of the owner", "etcd member restart", "SIGTERM of the owner", "cut of eu-west"}[k]
}

// faultNames are the faults' names in a schedule (--schedule).
var faultNames = map[string]faultKind{
	"attacks": faultAttacks, "kill": faultKillOwner, "term": faultTermOwner,
	"pause": faultPauseOwner, "etcd": faultEtcdRestart, "cut": faultCut,
}

// ParseSchedule reads a schedule: fault names separated by commas, each
// one of attacks, kill, term, pause, etcd and cut.
func ParseSchedule(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if _, ok := faultNames[f]; !ok {
			return nil, fmt.Errorf("fault %q: not one of attacks, kill, term, pause, etcd, cut", f)
		}
		out = append(out, f)
	}
	return out, nil
}

type fault struct {
	kind faultKind
	// after is the wait since the previous fault ended (or the load began).
	after time.Duration
}

// schedule is the faults of a run in order. The short form is fixed: the
// attacks, then 6 s later (once the requests-per-minute tenant, quiet
// until the attacks end, spent its burst) a kill -9 of the owner, a
// SIGTERM of the next owner, the cut (the next owner is d2, in eu-west,
// the replicas campaigning in the order they started), a SIGSTOP of the
// owner, an etcd member restart. The long form draws a
// fault every 15-35 s from the seed, with the attacks again half-way.
func schedule(o Options, rng *rand.Rand) []fault {
	if o.Short {
		return []fault{{faultAttacks, 3 * time.Second}, {faultKillOwner, 6 * time.Second}, {faultTermOwner, 4 * time.Second},
			{faultCut, 4 * time.Second}, {faultPauseOwner, 4 * time.Second}, {faultEtcdRestart, 4 * time.Second}}
	}
	if len(o.Schedule) > 0 {
		var fs []fault
		for i, name := range o.Schedule {
			gap := time.Duration(15+rng.IntN(21)) * time.Second
			if i == 0 {
				gap = 3 * time.Second
			}
			fs = append(fs, fault{faultNames[name], gap})
		}
		return fs
	}
	fs := []fault{{faultAttacks, 3 * time.Second}}
	at := 15 * time.Second
	attacked := false
	for at < o.Duration-30*time.Second {
		k := []faultKind{faultKillOwner, faultPauseOwner, faultEtcdRestart, faultTermOwner, faultCut}[rng.IntN(5)]
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
// later, a terminated one 1 s after it ended, a paused one continued past
// its session and its membership lease, an etcd member is down for 3 s,
// the regions are cut apart past the session TTL (TTL + 3 s).
func faultLength(k faultKind, ttl time.Duration) time.Duration {
	switch k {
	case faultKillOwner:
		return 4 * time.Second
	case faultTermOwner:
		return time.Second
	case faultCut:
		return ttl + 3*time.Second
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
	// admissions are the admission counters of the decider processes a
	// kill or a SIGTERM ended, read just before, less their base.
	admissions Admissions
	// admissionsBase is each decider's counters when the per-minute
	// tenants started (the attacks' reservations before are left out);
	// zero for a process started since.
	admissionsBase []Admissions
}

// faultRecord is when a fault began and, for a kill, a SIGTERM or a pause,
// which decider it hit (-1: none) and when it served again (restarted, or
// let go); for a cut, when the regions were joined again.
type faultRecord struct {
	kind        faultKind
	at, resumed time.Time
	decider     int
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
	scheduled := o.Short || len(o.Schedule) > 0
	if scheduled {
		o.Duration = time.Hour // a bound only: the schedule's end ends the load
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	// The limits come from a stream of their own, so that a seed draws the
	// same faults whichever limits are given.
	limits := rand.New(rand.NewPCG(uint64(o.Seed), 0x5bd1e995)) //nolint:gosec // reproducible, not a secret
	rpm, conc, leased := 30+limits.IntN(61), 3+limits.IntN(4), 100+limits.IntN(81)
	if o.Short {
		rpm, conc, leased = shortRPMLimit, shortConcLimit, shortLeaseLimit
	}
	if o.LeaseLimit <= 0 {
		o.LeaseLimit = leased
	}
	if o.RPMLimit <= 0 {
		o.RPMLimit = rpm
	}
	if o.ConcLimit <= 0 {
		o.ConcLimit = conc
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 3 * time.Second
	}
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		return nil, err
	}
	res := &Result{Seed: o.Seed, Duration: o.Duration, RPMLimit: o.RPMLimit, ConcLimit: o.ConcLimit, LeaseLimit: o.LeaseLimit, Leases: !o.NoLeases}
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
		fmt.Fprintf(o.Progress, "chaos: seed %d, tenant rpm %d/min, tenant conc %d in flight, tenant lease %d/min, quota leases %v, work directory %s\n",
			o.Seed, o.RPMLimit, o.ConcLimit, o.LeaseLimit, !o.NoLeases, dir)
	}
	r.s, err = start(ctx, dir, o)
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
	r.event("load starts: d0 owns the broker; us-east: etcd, d0, d1, edges A and B; eu-west: d2, edge C")
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchOwner(watchCtx) }()
	r.rpmGo = make(chan struct{})
	load := runLoad(loadCtx, ctx, r.hc, r.s.edges, rec, r.rpmGo)
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x9e3779b97f4a7c15)) //nolint:gosec // a reproducible schedule, not a secret
	faults := schedule(o, rng)
	if !slices.ContainsFunc(faults, func(f fault) bool { return f.kind == faultAttacks }) {
		r.quiet.Do(r.startPerMinute) // no attacks to wait for
	}
	for _, f := range faults {
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
			r.quiet.Do(r.startPerMinute)
		}
	}
	if scheduled {
		select {
		case <-loadCtx.Done():
		case <-time.After(8 * time.Second):
		}
		stopLoad()
	}
	<-loadCtx.Done()
	load.Wait()
	r.check(r.leaseShare(ctx, res)) // before the tracer's calls
	r.event("load ends")
	res.Duration = time.Since(r.start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Checks = append(res.Checks, r.learnTogether(ctx, rec))
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
		case <-time.After(ownerPoll):
		}
	}
}

// ownerPoll is how often the owner's watch reads the election: it can make
// a handover's figure later by as much, never earlier.
const ownerPoll = 25 * time.Millisecond

// inject runs one fault to its end.
func (r *run) inject(ctx context.Context, k faultKind, rng *rand.Rand) {
	begin := time.Now()
	fr := &faultRecord{kind: k, at: begin, decider: -1}
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
		r.bankAdmissions(ctx, o)
		fr.at, fr.decider = time.Now(), o
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
		fr.decider = o
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
	case faultTermOwner:
		o, err := r.s.owner(ctx)
		if err != nil || o < 0 {
			r.event("SIGTERM: no owner to end (%v)", err)
			return
		}
		r.bankAdmissions(ctx, o)
		fr.at, fr.decider = time.Now(), o
		r.event("SIGTERM d%d (the owner)", o)
		r.s.term(o)
		r.event("d%d ended", o)
		sleep(faultLength(k, r.o.SessionTTL))
		if err := r.s.startDecider(context.WithoutCancel(ctx), o); err != nil {
			r.event("restart d%d: %v", o, err)
			r.check(Check{Name: fmt.Sprintf("d%d restarts after SIGTERM", o), Measured: err.Error(), Bound: "serving"})
			return
		}
		fr.resumed = time.Now()
		r.event("d%d restarted", o)
	case faultCut:
		if runtime.GOOS != "linux" {
			r.check(Check{Name: "cut of eu-west", Measured: "not run on " + runtime.GOOS + " (finding a connection's client process needs Linux)", Bound: "Linux"})
			return
		}
		o, _ := r.s.owner(ctx)
		r.s.cut(true)
		r.event("eu-west cut off (d2, edge C; d%d owns the broker) for %s", o, faultLength(k, r.o.SessionTTL))
		sleep(faultLength(k, r.o.SessionTTL))
		r.s.cut(false)
		fr.resumed = time.Now()
		r.event("eu-west joined again")
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

// listing is tenant's activity as a listing through the deciders reads
// it: every page, page n asked of decider via(n), the cursor of each page
// carried to the next; by id. missing are the replicas a page named as
// not read; err the first error, which ends the listing.
func (r *run) listing(ctx context.Context, tenant string, via func(page int) int) (ids map[string]*switchboardv1.ActivityRecord, missing []string, err error) {
	ids = map[string]*switchboardv1.ActivityRecord{}
	cursor := ""
	for page := 0; ; page++ {
		i := via(page)
		c, closeRPC, err := r.s.rpc(i, operatorToken)
		if err != nil {
			return ids, missing, err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.ListActivity(cctx, &switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: tenant}, Limit: activityPage, Cursor: cursor})
		cancel()
		closeRPC()
		if err != nil {
			return ids, missing, fmt.Errorf("d%d: %w", i, err)
		}
		missing = append(missing, resp.GetMissingReplicas()...)
		for _, rec := range resp.GetRecords() {
			ids[rec.GetId()] = rec
		}
		if resp.GetNextCursor() == "" || len(resp.GetRecords()) == 0 {
			return ids, missing, nil
		}
		cursor = resp.GetNextCursor()
	}
}

// activityPage is the page size of the activity listings: small, so that a
// listing through every replica in turn takes many pages.
const activityPage = 100

// activity checks that every answered request has an activity record, read
// through every replica: each replica's listing, and one listing whose
// pages are asked of each replica in turn with one cursor, must hold every
// answered request and the same records, no replica missing from any
// page; waiting up to 30 s for the edges' last batches.
func (r *run) activity(ctx context.Context, answers []answer) int {
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
	n := len(r.s.deciders)
	vias := []struct {
		name string
		via  func(int) int
	}{{"one cursor through d0, d1, d2 in turn", func(p int) int { return p % n }}}
	for i := range n {
		vias = append(vias, struct {
			name string
			via  func(int) int
		}{fmt.Sprintf("d%d", i), func(int) int { return i }})
	}
	var missing int
	var problems []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing, problems = 0, nil
		for tenant, ids := range want {
			var first map[string]*switchboardv1.ActivityRecord
			for k, v := range vias {
				have, gone, err := r.listing(ctx, tenant, v.via)
				if err != nil || len(gone) > 0 {
					problems = append(problems, fmt.Sprintf("%s, tenant %s: %v missing replicas %v", v.name, tenant, err, gone))
				}
				lost := 0
				for id := range ids {
					if have[id] == nil {
						lost++
					}
				}
				missing = max(missing, lost)
				if k == 0 {
					first = have
					if tenant == tenantHedge {
						r.hedgeRecords = have
					}
				} else if !sameIDs(first, have) {
					problems = append(problems, fmt.Sprintf("tenant %s: %s lists %d records, %s %d, not the same", tenant, vias[0].name, len(first), v.name, len(have)))
				}
			}
		}
		if (missing == 0 && len(problems) == 0) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	r.check(Check{Name: "activity lost: answered requests a listing through a replica misses", Measured: fmt.Sprintf("%d of %d, at most, through any replica", missing, total), Bound: "0", OK: missing == 0 && total > 0})
	m := fmt.Sprintf("%d listings of each tenant, the same records", len(vias))
	if len(problems) > 0 {
		m = strings.Join(problems, "; ")
	}
	r.check(Check{Name: "activity read through every replica, and with one cursor through each in turn", Measured: m, Bound: "the same records, no replica missing", OK: len(problems) == 0})
	return missing
}

// traceCalls is how many calls of the tracer model each edge sends once the
// load ended: with three edges, fewer than a statistics series holds (64).
const traceCalls = 8

// learnTogether checks that the replicas learn together once every fault
// is over: traceCalls streams of the tracer model (its own endpoint,
// p-trace, which nothing else calls) through each edge, one after the
// other, the eu-west edge's included; then every replica must count a
// first-token sample for each one answered (GetEndpointStats, every size
// bucket), whichever replica the edge reported it to, within 15 s.
func (r *run) learnTogether(ctx context.Context, rec *recorder) Check {
	c := Check{Name: "replicas learn together: first-token samples of the tracer's calls on each replica", Bound: "every answered call, on every replica, within 15 s"}
	answered := int64(0)
	for _, e := range r.s.edges {
		for i := range traceCalls {
			a := ask(ctx, r.hc, e, tenantVictim, keyVictim, modelTrace, fmt.Sprintf("trace %s %d", e.name, i), 4, true, "")
			rec.add(a)
			if a.status == http.StatusOK {
				answered++
			}
		}
	}
	counts := make([]int64, len(r.s.deciders))
	deadline := time.Now().Add(15 * time.Second)
	for {
		for i := range r.s.deciders {
			counts[i] = r.traceSamples(ctx, i)
		}
		if !slices.ContainsFunc(counts, func(n int64) bool { return n != answered }) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	var parts []string
	for i, n := range counts {
		parts = append(parts, fmt.Sprintf("d%d %d", i, n))
	}
	c.Measured = fmt.Sprintf("%d answered; samples: %s", answered, strings.Join(parts, ", "))
	c.OK = answered > 0 && !slices.ContainsFunc(counts, func(n int64) bool { return n != answered })
	return c
}

// traceSamples is decider i's count of first-token samples of the tracer's
// endpoint, every size bucket; -1 when it cannot be read.
func (r *run) traceSamples(ctx context.Context, i int) int64 {
	c, closeRPC, err := r.s.rpc(i, operatorToken)
	if err != nil {
		return -1
	}
	defer closeRPC()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.GetEndpointStats(cctx, &switchboardv1.GetEndpointStatsRequest{Model: modelTrace})
	if err != nil {
		return -1
	}
	var n int64
	for _, m := range resp.GetModels() {
		for _, ep := range m.GetEndpoints() {
			if ep.GetProvider() != "p-trace" {
				continue
			}
			for _, b := range ep.GetTtft() {
				n += b.GetSamples()
			}
		}
	}
	return n
}

// sameIDs reports whether a and b hold the same ids.
func sameIDs(a, b map[string]*switchboardv1.ActivityRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for id := range a {
		if b[id] == nil {
			return false
		}
	}
	return true
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
	c, over := rateCheck(tenantRPM, "p-rpm", rpmArrivals, changes, float64(r.o.RPMLimit), ttl)
	res.OverAdmission = over
	res.Checks = append(res.Checks, c)
	leaseArrivals, _ := r.s.taps["p-lease"].record()
	c, over = rateCheck(tenantLease, "p-lease", leaseArrivals, changes, float64(r.o.LeaseLimit), ttl)
	res.LeaseOverAdmission = over
	res.Checks = append(res.Checks, c)
	concArrivals, flight := r.s.taps["p-conc"].record()
	c, peak := concurrencyCheck(flight, changes, float64(r.o.ConcLimit))
	res.ConcurrencyPeak = peak
	res.Checks = append(res.Checks, c)
	// A handover is timed by the calls only an owner admits: not the
	// leased tenant's, which replicas admit on their leases.
	haArrivals, _ := r.s.taps["p-ha"].record()
	hbArrivals, _ := r.s.taps["p-hb"].record()
	res.Checks = append(res.Checks, r.handovers(changes, slices.Concat(rpmArrivals, concArrivals, haArrivals, hbArrivals))...)

	// Ghost slots: after each fault the concurrency tenant is admitted
	// again at its learning-mode capacity within the session TTL and a
	// second of the moment a new owner was known (or of the fault, when
	// the owner did not change; of the heal, after a cut). After a kill, a
	// SIGTERM or a pause, not before the replica runs again: slots of calls
	// whose reconciliations wait for it are held, not lost.
	target := int(float64(r.o.ConcLimit) - keep(float64(r.o.ConcLimit)))
	for _, f := range r.faults {
		if f.kind == faultAttacks {
			continue
		}
		name := fmt.Sprintf("ghost slots after %s at %.0fs", f.kind, f.at.Sub(r.start).Seconds())
		t0 := f.at
		label := "the fault"
		switch f.kind {
		case faultCut:
			t0, label = f.resumed, "the heal"
		case faultKillOwner, faultTermOwner, faultPauseOwner:
			ch, found := nextOwner(changes, f)
			if !found {
				res.Checks = append(res.Checks, Check{Name: name, Measured: "no new owner within 30 s", Bound: "a new owner"})
				continue
			}
			t0, label = ch.at, "the new owner"
			if f.resumed.After(t0) {
				t0, label = f.resumed, "the restart"
				if f.kind == faultPauseOwner {
					label = "SIGCONT"
				}
			}
		}
		limit := ttl + time.Second
		if t0.IsZero() || t0.Add(limit).After(r.start.Add(res.Duration)) {
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

// startPerMinute lets the per-minute tenants' clients start, once the deciders'
// admission counters so far are read: the share of lease admissions is the
// steady load's, without the attacks' thousands of reservations.
func (r *run) startPerMinute() {
	base := make([]Admissions, len(r.s.deciders))
	for i := range r.s.deciders {
		a, err := r.s.admissions(context.Background(), r.hc, i)
		if err != nil {
			r.event("d%d admissions not read when the load's per-minute tenants start: %v", i, err)
		}
		base[i] = a
	}
	r.mu.Lock()
	r.admissionsBase = base
	r.mu.Unlock()
	close(r.rpmGo)
}

// bankAdmissions keeps decider i's admission counters, less its base,
// before a kill or a SIGTERM ends its process (a restart counts from
// zero, so its base is zero).
func (r *run) bankAdmissions(ctx context.Context, i int) {
	a, err := r.s.admissions(ctx, r.hc, i)
	if err != nil {
		r.event("d%d admissions not read before it ends: %v", i, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.admissionsBase != nil {
		a = a.sub(r.admissionsBase[i])
		r.admissionsBase[i] = Admissions{}
	}
	r.admissions = r.admissions.add(a)
}

// leaseShare reads every decider's admission counters when the load ended,
// adds those of the processes the faults ended, leaves out what was
// admitted before the per-minute tenants started, and, with quota leases,
// checks that replicas admitted on them at all. The owner counts its own
// callers' as owner and never as lease or forwarded, so summing lease and
// forwarded over every replica is summing them over the replicas while
// they did not own the broker.
func (r *run) leaseShare(ctx context.Context, res *Result) Check {
	r.mu.Lock()
	total, base := r.admissions, r.admissionsBase
	r.mu.Unlock()
	var unread []string
	for i := range r.s.deciders {
		a, err := r.s.admissions(ctx, r.hc, i)
		if err != nil {
			unread = append(unread, err.Error())
			continue
		}
		if base != nil {
			a = a.sub(base[i])
		}
		total = total.add(a)
	}
	res.Admissions = total
	c := Check{Name: "quota leases: reservations the replicas admitted without a forwarding hop",
		Measured: fmt.Sprintf("lease %.0f, forwarded %.0f: %.1f%% without a hop (owner %.0f)", total.Lease, total.Forwarded, 100*total.LeaseShare(), total.Owner),
		Bound:    "lease > 0", OK: total.Lease > 0 && len(unread) == 0}
	if r.o.NoLeases {
		c.Bound, c.OK = "lease = 0 (--broker-leases off)", total.Lease == 0 && len(unread) == 0
	}
	if len(unread) > 0 {
		c.Measured += "; not read: " + strings.Join(unread, "; ")
	}
	return c
}

// handovers checks, for each kill -9 and SIGTERM of the owner, how soon a
// new owner admitted: from the signal to the first call of the load that
// reached its provider once the new owner was seen in etcd (every Decide
// reserves through the owner, so while none is elected no call reaches a
// provider). A clean stop hands over
// within cleanHandover; a crash within the session TTL and a second.
func (r *run) handovers(changes []ownerChange, admitted []time.Time) []Check {
	slices.SortFunc(admitted, time.Time.Compare)
	var out []Check
	for _, f := range r.faults {
		if (f.kind != faultKillOwner && f.kind != faultTermOwner) || f.decider < 0 {
			continue
		}
		bound, how := r.o.SessionTTL+time.Second, "TTL + 1 s"
		if f.kind == faultTermOwner {
			bound, how = cleanHandover, "a clean handover"
		}
		c := Check{Name: fmt.Sprintf("handover after %s d%d at %.0fs", f.kind, f.decider, f.at.Sub(r.start).Seconds()),
			Bound: fmt.Sprintf("< %s (%s)", bound, how)}
		ch, found := nextOwner(changes, f)
		if !found {
			c.Measured = "no new owner within 30 s"
			out = append(out, c)
			continue
		}
		i, _ := slices.BinarySearchFunc(admitted, ch.at, time.Time.Compare)
		if i == len(admitted) || admitted[i].After(f.at.Add(30*time.Second)) {
			c.Measured = fmt.Sprintf("d%d owns %.2f s after; nothing admitted within 30 s", ch.to, ch.at.Sub(f.at).Seconds())
			out = append(out, c)
			continue
		}
		d := admitted[i].Sub(f.at)
		c.Measured = fmt.Sprintf("d%d owns %.2f s after, admits %.2f s after", ch.to, ch.at.Sub(f.at).Seconds(), d.Seconds())
		c.OK = d < bound
		out = append(out, c)
	}
	return out
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
