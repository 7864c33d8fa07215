package broker

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// The property test drives one broker through random interleavings of
// reserve, reconcile (also twice, and of unknown ids), expire, clock moves and
// snapshot/restore across every kind of bucket, and checks after every step
// that no bucket ever admitted past its limit, against a model that
// recomputes each bound independently of the broker's level arithmetic:
//
//   - token bucket: for every earlier instant t1 and an admission at t2, what
//     was admitted in (t1, t2] minus what reconciles gave back plus overruns
//     is at most capacity + burst + rate × (t2 − t1);
//   - daily reset: what a day admitted, net of what was settled the same
//     day, is at most capacity + burst, days cut at the reset time with
//     time.Time arithmetic;
//   - ramp: what a minute admitted, net, is at most max(floor, 1.5 × the
//     previous minute's net);
//   - concurrency: the level is exactly capacity minus the reservations the
//     broker still holds, and no live reservation was ever dropped.
//
// At the end everything open is reconciled, time passes, and every bucket
// must be back to full: nothing leaked.

const propEps = 1e-6

type propRes struct {
	r        *Reservation
	tenant   string
	idem     string
	expires  time.Time
	charges  map[string]float64
	closed   bool // reconciled by the model
	released bool // gone from the broker (reconciled or swept)
}

type flow struct {
	at     time.Time
	amount float64 // + admitted or overrun, − given back
}

type propModel struct {
	b     *Broker
	c     *clock
	cfg   Config
	opts  Options
	specs map[string]def
	res   []*propRes
	// per tracked bucket id, every admission and settlement, in time order
	flows map[string][]flow
	start time.Time
}

func TestPropertyNeverOverAdmitsNorLeaks(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		start := t0.Add(time.Duration(rapid.Int64Range(0, int64(24*time.Hour)).Draw(rt, "start")))
		c := fakeclock.New(start)
		specs := []Spec{
			{Scope: ScopeTenant, Key: "acme", Unit: UnitRequests, Window: WindowMinute,
				Capacity: float64(rapid.IntRange(1, 20).Draw(rt, "acme_rpm")), Burst: float64(rapid.IntRange(0, 5).Draw(rt, "acme_burst"))},
			{Scope: ScopeTenant, Key: "acme", Unit: UnitConcurrentRequests, Capacity: float64(rapid.IntRange(1, 5).Draw(rt, "acme_cc"))},
			{Scope: ScopeTenant, Key: "beta", Unit: UnitConcurrentRequests, Capacity: float64(rapid.IntRange(1, 5).Draw(rt, "beta_cc"))},
			{Scope: ScopeTenant, Key: "beta", Unit: UnitUSD, Window: WindowHour, Capacity: rapid.Float64Range(0.5, 5).Draw(rt, "beta_usd")},
			{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitInputTokens, Window: WindowMinute,
				Capacity: float64(rapid.IntRange(100, 2000).Draw(rt, "itpm")), Burst: float64(rapid.IntRange(0, 500).Draw(rt, "itpm_burst"))},
			{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitOutputTokens, Window: WindowDay,
				Capacity: float64(rapid.IntRange(200, 3000).Draw(rt, "otpd")), ResetAt: time.Duration(rapid.IntRange(0, 23).Draw(rt, "reset_hour")) * time.Hour},
			{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Ramp: &Ramp{MaxIncrease: 0.5, Floor: float64(rapid.IntRange(2, 10).Draw(rt, "ramp_floor"))}},
		}
		m := &propModel{c: c, start: start, flows: map[string][]flow{}, specs: map[string]def{}}
		m.cfg = Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model}}}
		m.opts = Options{Now: c.Now, Rand: func() float64 { return 0.5 },
			RefundOnExpiry: rapid.Bool().Draw(rt, "refund_on_expiry"), DisableCorrection: rapid.Bool().Draw(rt, "no_correction")}
		var err error
		m.b, err = New(m.cfg, m.opts)
		require.NoError(rt, err)
		ds, _ := defs(specs)
		for _, d := range ds {
			m.specs[d.id] = d
		}

		actions := map[string]func(*rapid.T){
			"reserve":                    m.reserve,
			"reconcile":                  m.reconcile,
			"reconcile twice or unknown": m.reconcileGone,
			"expire": func(rt *rapid.T) {
				m.b.Expire(c.Now())
				m.sync(rt)
			},
			"advance": func(rt *rapid.T) {
				d := rapid.SampledFrom([]time.Duration{0, time.Second, 7 * time.Second, 30 * time.Second, 61 * time.Second, 10 * time.Minute, 3 * time.Hour}).Draw(rt, "advance")
				c.Advance(d + time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(rt, "advance_ns")))
			},
			"snapshot and restore": func(rt *rapid.T) {
				blob := m.b.Snapshot()
				nb, err := New(m.cfg, m.opts)
				require.NoError(rt, err)
				require.NoError(rt, nb.Restore(blob, c.Now()))
				m.b = nb
				m.sync(rt)
			},
			"": m.check,
		}
		// Four rounds of rapid's default 30 steps: enough for several
		// reservations to be held, expire and be restored together.
		for range 4 {
			rt.Repeat(actions)
		}

		// Drain: close everything, let a day pass: every bucket is full.
		for _, r := range m.res {
			if !r.released {
				_, _ = m.b.Reconcile(rt.Context(), ReconcileRequest{ReservationID: r.r.ID, Usage: Usage{InputTokens: 1, OutputTokens: 1}})
			}
		}
		c.Advance(25*time.Hour + 2*time.Minute)
		m.b.Expire(c.Now())
		require.Equal(rt, 0, m.b.Open())
		for _, bk := range m.b.tab.Load().buckets {
			bk.mu.Lock()
			bk.advance(m.b.nowNS())
			lvl, lim := bk.level, bk.limit()
			bk.mu.Unlock()
			if bk.rule == RuleRamp {
				require.Equal(rt, 0.0, lvl, "%s leaked", bk.id)
				require.Equal(rt, bk.p.floor, lim, "%s leaked", bk.id)
				continue
			}
			require.InDelta(rt, bk.p.max(), lvl, propEps, "%s leaked", bk.id)
		}
	})
}

func (m *propModel) reserve(rt *rapid.T) {
	tn := rapid.SampledFrom([]string{"acme", "beta"}).Draw(rt, "tenant")
	d := Demand{
		InputTokens:  int64(rapid.IntRange(0, 800).Draw(rt, "in")),
		OutputTokens: int64(rapid.IntRange(0, 800).Draw(rt, "out")),
		USD:          float64(rapid.IntRange(0, 200).Draw(rt, "cents")) / 100,
		Requests:     int64(rapid.IntRange(0, 3).Draw(rt, "requests")),
	}
	idem := rapid.SampledFrom([]string{"", "", "k1", "k2"}).Draw(rt, "idem")
	ttl := rapid.SampledFrom([]time.Duration{0, 5 * time.Second, 30 * time.Second, 10 * time.Minute}).Draw(rt, "ttl")
	rq := ReserveRequest{RequestID: "r", IdempotencyKey: idem, Identity: Identity{TenantID: tn}, Model: model, EndpointID: endpoint, Demand: d, TTL: ttl}

	var live *propRes
	now := m.c.Now()
	for _, r := range m.res {
		if idem != "" && !r.released && r.tenant == tn && r.idem == idem && r.expires.After(now) {
			live = r
		}
	}
	res, ref, err := m.b.Reserve(rt.Context(), rq)
	require.NoError(rt, err)
	m.sync(rt)
	if live != nil {
		require.NotNil(rt, res, "a live idempotency key is never refused")
		require.Equal(rt, live.r.ID, res.ID, "same reservation for the same key")
		return
	}
	if ref != nil {
		require.Nil(rt, res)
		require.Contains(rt, []RefusalReason{ReasonRetryableCapacity, ReasonNonRetryablePolicy, ReasonNonRetryableRequest}, ref.Reason)
		require.GreaterOrEqual(rt, ref.RetryAfter, time.Duration(0))
		if ref.Reason == ReasonNonRetryableRequest {
			dm := res0(d, m.b, rq)
			require.Greater(rt, dm.amount(ref.Unit), m.specs[ref.BucketID].max(), "non-retryable only when it can never fit")
		}
		return
	}
	for _, r := range m.res {
		require.NotEqual(rt, r.r.ID, res.ID, "ids are unique")
	}
	pr := &propRes{r: res, tenant: tn, idem: idem, expires: res.Expires, charges: map[string]float64{}}
	for _, ch := range res.Charges {
		pr.charges[ch.BucketID] = ch.Amount
		m.flows[ch.BucketID] = append(m.flows[ch.BucketID], flow{at: now, amount: ch.Amount})
	}
	m.res = append(m.res, pr)
	m.checkAdmission(rt, res, now)
}

// res0 is the demand the broker reserved for rq (after correction).
func res0(d Demand, b *Broker, rq ReserveRequest) Demand {
	d = d.normalized()
	if !b.opts.DisableCorrection {
		d = b.Correct(rq.Model, rq.EndpointID, d)
	}
	return d
}

func (m *propModel) reconcile(rt *rapid.T) {
	var open []*propRes
	for _, r := range m.res {
		if !r.released {
			open = append(open, r)
		}
	}
	if len(open) == 0 {
		rt.Skip("nothing open")
	}
	r := rapid.SampledFrom(open).Draw(rt, "which")
	u := Usage{
		InputTokens:  int64(rapid.IntRange(0, int(2*r.r.Demand.InputTokens)+10).Draw(rt, "used_in")),
		OutputTokens: int64(rapid.IntRange(0, int(2*r.r.Demand.OutputTokens)+10).Draw(rt, "used_out")),
		CostUSD:      float64(rapid.IntRange(0, int(200*r.r.Demand.USD)+10).Draw(rt, "used_cents")) / 100,
		Reported:     rapid.Bool().Draw(rt, "reported"),
	}
	outcome := rapid.SampledFrom([]Outcome{OutcomeOK, OutcomeOK, OutcomeCancelled, OutcomeUpstreamError}).Draw(rt, "outcome")
	now := m.c.Now()
	st, err := m.b.Reconcile(rt.Context(), ReconcileRequest{ReservationID: r.r.ID, Usage: u, Outcome: outcome})
	require.NoError(rt, err)
	if !r.expires.After(now) {
		// Past its TTL: expiry released the concurrency; the late
		// reconcile settles the rest to the actual usage.
		require.True(rt, st.Late, "past its TTL")
		r.closed = true
		for _, ch := range st.Released {
			if ch.Unit == UnitConcurrentRequests {
				require.Equal(rt, 0.0, ch.Amount)
				continue
			}
			m.flows[ch.BucketID] = append(m.flows[ch.BucketID], flow{at: now, amount: -ch.Amount})
		}
		m.sync(rt)
		return
	}
	r.closed, r.released = true, true
	for _, ch := range st.Released {
		if ch.Unit == UnitConcurrentRequests {
			require.Equal(rt, 1.0, ch.Amount)
			continue
		}
		m.flows[ch.BucketID] = append(m.flows[ch.BucketID], flow{at: now, amount: -ch.Amount})
	}
	m.sync(rt)
}

func (m *propModel) reconcileGone(rt *rapid.T) {
	ids := []string{"r" + fmt.Sprintf("%030d", rapid.IntRange(0, 1000).Draw(rt, "junk")), "bogus"}
	for _, r := range m.res {
		if r.closed {
			ids = append(ids, r.r.ID)
		}
	}
	id := rapid.SampledFrom(ids).Draw(rt, "gone")
	before := m.levels()
	_, err := m.b.Reconcile(rt.Context(), ReconcileRequest{ReservationID: id, Usage: Usage{InputTokens: 5}})
	require.True(rt, errors.Is(err, ErrNotFound), "got %v", err)
	require.Equal(rt, before, m.levels(), "a failed reconcile changes no bucket")
}

// sync notices reservations the broker swept (expiry happens at the clock's
// current time inside the action) and books what expiry gave back.
func (m *propModel) sync(rt *rapid.T) {
	now := m.c.Now()
	for _, r := range m.res {
		if r.released || m.held(r.r.ID) {
			continue
		}
		require.False(rt, r.expires.After(now), "live reservation %s was dropped", r.r.ID)
		r.released = true
		if !m.opts.RefundOnExpiry {
			continue
		}
		for id, amt := range r.charges {
			d := m.specs[id]
			if d.rule == RuleConcurrency {
				continue
			}
			if (d.rule == RuleDailyReset || d.rule == RuleRamp) && m.period(d, r.r.Created) != m.period(d, now) {
				continue
			}
			m.flows[id] = append(m.flows[id], flow{at: now, amount: -amt})
		}
	}
}

func (m *propModel) held(id string) bool {
	si, _ := shardOf(id)
	sh := &m.b.shards[si]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.byID[id] != nil
}

func (m *propModel) levels() map[string]float64 {
	out := map[string]float64{}
	for _, bk := range m.b.tab.Load().buckets {
		bk.mu.Lock()
		out[bk.id] = bk.level
		bk.mu.Unlock()
	}
	return out
}

// period is the model's own day or ramp-minute index: time.Time truncation
// counts from year 1, whose multiples of 24h are UTC midnights.
func (m *propModel) period(d def, at time.Time) time.Time {
	if d.rule == RuleRamp {
		return at.Truncate(time.Duration(d.period))
	}
	return at.Add(-time.Duration(d.offset)).Truncate(24 * time.Hour)
}

// checkAdmission checks every bound the reservation's charges must keep.
func (m *propModel) checkAdmission(rt require.TestingT, res *Reservation, now time.Time) {
	for _, ch := range res.Charges {
		d := m.specs[ch.BucketID]
		fl := m.flows[ch.BucketID]
		switch d.rule {
		case RuleTokenBucket:
			rate := d.capacity / float64(d.period)
			// For every start t1 (the beginning, or just after any event),
			// net flow in (t1, now] ≤ max + rate × (now − t1).
			starts := []time.Time{m.start}
			for _, f := range fl {
				starts = append(starts, f.at)
			}
			for _, t1 := range starts {
				net := 0.0
				for _, f := range fl {
					if f.at.After(t1) || (t1.Equal(m.start) && !f.at.Before(m.start)) {
						net += f.amount
					}
				}
				bound := d.max() + rate*float64(now.Sub(t1))
				require.LessOrEqual(rt, net, bound+propEps*math.Max(1, bound), "%s admitted %.6f since %s, bound %.6f", ch.BucketID, net, t1, bound)
			}
		case RuleDailyReset:
			day := m.period(d, now)
			net := 0.0
			for _, f := range fl {
				if m.period(d, f.at).Equal(day) {
					net += f.amount
				}
			}
			require.LessOrEqual(rt, net, d.max()+propEps, "%s admitted %.6f in the day of %s", ch.BucketID, net, day)
		case RuleRamp:
			cur := m.period(d, now)
			prev := cur.Add(-time.Duration(d.period))
			var netCur, netPrev float64
			for _, f := range fl {
				switch p := m.period(d, f.at); {
				case p.Equal(cur):
					netCur += f.amount
				case p.Equal(prev):
					netPrev += f.amount
				}
			}
			limit := math.Max(d.floor, d.growth*math.Max(0, netPrev))
			require.LessOrEqual(rt, netCur, limit+propEps, "%s admitted %.6f this minute, limit %.6f", ch.BucketID, netCur, limit)
		}
	}
}

// check runs after every action.
func (m *propModel) check(rt *rapid.T) {
	now := m.c.Now()
	heldBy := map[string]int{}
	open := 0
	for _, r := range m.res {
		if r.released {
			continue
		}
		require.True(rt, m.held(r.r.ID), "model-open reservation %s missing", r.r.ID)
		open++
		heldBy[r.tenant]++
	}
	require.Equal(rt, open, m.b.Open())
	for _, bk := range m.b.tab.Load().buckets {
		bk.mu.Lock()
		bk.advance(now.UnixNano())
		lvl, lim := bk.level, bk.limit()
		bk.mu.Unlock()
		switch bk.rule {
		case RuleConcurrency:
			require.Equal(rt, bk.p.capacity-float64(heldBy[bk.key]), lvl, "%s holds exactly the open reservations", bk.id)
			require.GreaterOrEqual(rt, lvl, 0.0)
		case RuleRamp:
			require.GreaterOrEqual(rt, lvl, 0.0)
		default:
			require.LessOrEqual(rt, lvl, lim+propEps, "%s above its limit", bk.id)
		}
	}
	// Fresh ids only.
	ids := make([]string, 0, len(m.res))
	for _, r := range m.res {
		ids = append(ids, r.r.ID)
	}
	slices.Sort(ids)
	require.Len(rt, slices.Compact(ids), len(m.res))
}

// TestPropertyCheckerCatchesOverAdmission makes sure the property's bounds
// can fail: one admission too many is caught for every rule it checks.
func TestPropertyCheckerCatchesOverAdmission(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: "acme", Unit: UnitRequests, Window: WindowMinute, Capacity: 2, Burst: 1},
		{Scope: ScopeTenant, Key: "acme", Unit: UnitRequests, Window: WindowDay, Capacity: 3},
		{Scope: ScopeTenant, Key: "acme", Unit: UnitRequests, Ramp: &Ramp{MaxIncrease: 0.5, Floor: 3}},
	}
	ds, err := defs(specs)
	require.NoError(t, err)
	for _, d := range ds {
		t.Run(d.id, func(t *testing.T) {
			m := &propModel{start: t0, flows: map[string][]flow{}, specs: map[string]def{d.id: d}}
			res := &Reservation{Charges: []Charge{{BucketID: d.id, Amount: 1}}}
			for i := range 4 {
				m.flows[d.id] = append(m.flows[d.id], flow{at: t0, amount: 1})
				ft := &fakeT{}
				func() {
					defer func() { _ = recover() }() // fakeT.FailNow stops the check
					m.checkAdmission(ft, res, t0)
				}()
				require.Equal(t, i == 3, ft.failed, "admission %d", i+1)
			}
		})
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct{ failed bool }

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true; panic(f) }
