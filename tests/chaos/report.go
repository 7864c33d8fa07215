package chaos

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Check is one assertion of the run: what was measured against what it
// must stay within.
type Check struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Bound    string `json:"bound"`
	OK       bool   `json:"ok"`
}

// Event is one fault or observation of the run, at its offset from the
// start of the load.
type Event struct {
	At   time.Duration `json:"at"`
	What string        `json:"what"`
}

// Result is what a run measured.
type Result struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration"`
	// Etcd says which etcd the members were: embedded, or the binary's
	// processes and its version.
	Etcd   string  `json:"etcd"`
	Events []Event `json:"events"`
	Checks []Check `json:"checks"`
	// Answers counts the clients' answers by tenant and status.
	Answers map[string]map[int]int `json:"answers"`
	// OverAdmission is how far the worst sliding window of the
	// requests-per-minute tenant went past its bound (0 when within).
	OverAdmission float64 `json:"over_admission"`
	// LeaseOverAdmission is the same for the leased tenant.
	LeaseOverAdmission float64 `json:"lease_over_admission"`
	// RPMLimit, ConcLimit and LeaseLimit are the tenants' limits the run
	// used.
	RPMLimit   int `json:"rpm_limit"`
	ConcLimit  int `json:"conc_limit"`
	LeaseLimit int `json:"lease_limit"`
	// Leases says whether the deciders ran with --broker-leases.
	Leases bool `json:"leases"`
	// Admissions counts where the deciders admitted reservations
	// (switchboard_decider_admissions_total), summed over every replica
	// and every process a restart ended.
	Admissions Admissions `json:"admissions"`
	// ConcurrencyPeak is the most calls of the concurrency tenant the
	// provider had in flight at once.
	ConcurrencyPeak int `json:"concurrency_peak"`
	// ActivityLost counts answered requests no replica lists.
	ActivityLost int `json:"activity_lost"`
	// HedgeSpendUSD is what hedge legs cost at the providers.
	HedgeSpendUSD float64 `json:"hedge_spend_usd"`
	// Dir holds the logs when kept.
	Dir string `json:"dir,omitempty"`
}

// Admissions counts reservations by where they were admitted: by the
// broker's owner, on a replica's quota leases, or by the owner for a
// replica that forwarded them.
type Admissions struct {
	Owner     float64 `json:"owner"`
	Lease     float64 `json:"lease"`
	Forwarded float64 `json:"forwarded"`
}

// LeaseShare is the share of the replicas' admissions that took no
// forwarding hop: lease ÷ (lease + forwarded); 0 without any.
func (a Admissions) LeaseShare() float64 {
	if a.Lease+a.Forwarded == 0 {
		return 0
	}
	return a.Lease / (a.Lease + a.Forwarded)
}

// Passed reports whether every check held.
func (r *Result) Passed() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// Failed lists the checks that did not hold.
func (r *Result) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Print writes the events, the answers and the checks as tables.
func (r *Result) Print(w io.Writer) {
	leases := "off"
	if r.Leases {
		leases = "on"
	}
	fmt.Fprintf(w, "chaos run: seed %d, load %s, etcd: %s, tenant rpm %d/min, tenant conc %d in flight, tenant lease %d/min, quota leases %s\n\nevents:\n",
		r.Seed, r.Duration.Round(time.Second), r.Etcd, r.RPMLimit, r.ConcLimit, r.LeaseLimit, leases)
	for _, e := range r.Events {
		fmt.Fprintf(w, "  %7.1fs  %s\n", e.At.Seconds(), e.What)
	}
	fmt.Fprintln(w, "\nanswers (tenant: status × count):")
	var tenants []string
	for t := range r.Answers {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		var parts []string
		var codes []int
		for c := range r.Answers[t] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		for _, c := range codes {
			parts = append(parts, fmt.Sprintf("%d×%d", c, r.Answers[t][c]))
		}
		fmt.Fprintf(w, "  %-8s %s\n", t, strings.Join(parts, "  "))
	}
	a := r.Admissions
	fmt.Fprintf(w, "\nadmissions: owner %.0f, lease %.0f, forwarded %.0f; without a forwarding hop: %.1f%% of the replicas' (lease ÷ (lease + forwarded))\n\n",
		a.Owner, a.Lease, a.Forwarded, 100*a.LeaseShare())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "check\tmeasured\tbound\tok")
	for _, c := range r.Checks {
		ok := "ok"
		if !c.OK {
			ok = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Measured, c.Bound, ok)
	}
	_ = tw.Flush()
}

// ownerChange is a change of the broker's owner seen in etcd.
type ownerChange struct {
	at       time.Time
	from, to int
}

// cleanHandover bounds a clean handover: from SIGTERM to the owner to the
// first call a new owner admitted.
const cleanHandover = 3 * time.Second

// nextOwner is the first change of owner within 30 s of fault f to
// another decider than the one it hit.
func nextOwner(changes []ownerChange, f *faultRecord) (ownerChange, bool) {
	for _, ch := range changes {
		if ch.at.After(f.at) && ch.at.Before(f.at.Add(30*time.Second)) && ch.to != f.decider {
			return ch, true
		}
	}
	return ownerChange{}, false
}

// keep is what learning mode holds back of a bucket of limit units (half,
// but never so much that less than one unit can be taken).
func keep(limit float64) float64 { return math.Min(0.5*limit, math.Max(limit-1, 0)) }

// lag is the longest a call may take from its reservation to the
// provider: a window of arrivals of length d was granted within d + lag.
const lag = time.Second

// snapshotGap is how long before a change of owner the old owner's grants
// may be missing from its last snapshot: the snapshot interval (about a
// second) with a second of margin, plus the session TTL during which the
// old owner may still have served before the change was seen.
func snapshotGap(ttl time.Duration) time.Duration { return ttl + 2*time.Second }

// rateCheck checks the arrivals of a tenant limited to limit requests a
// minute against its bound in every window [t_i, t_j]: a token bucket
// starting full admits at most limit + limit × (d + lag) / 1 min in a
// window of length d, plus, for each change of owner, what learning mode
// may let through of the grants the new owner could not know of:
// max(0, lost − keep(limit)), lost being the arrivals in the snapshot gap
// before the change (the new owner admits down to keep of what its
// snapshot says is free, so only grants beyond keep can push past the
// limit).
func rateCheck(tenant, provider string, arrivals []time.Time, changes []ownerChange, limit float64, ttl time.Duration) (Check, float64) {
	var allowance float64
	for _, c := range changes {
		lost := 0
		for _, a := range arrivals {
			if !a.Before(c.at.Add(-snapshotGap(ttl))) && !a.After(c.at) {
				lost++
			}
		}
		allowance += math.Max(0, float64(lost)-keep(limit))
	}
	worstExcess, worstCount, worstBound, worstLen := math.Inf(-1), 0, 0.0, time.Duration(0)
	for i := range arrivals {
		for j := i; j < len(arrivals); j++ {
			d := arrivals[j].Sub(arrivals[i])
			bound := limit + limit*(d+lag).Seconds()/60 + allowance
			count := j - i + 1
			if ex := float64(count) - bound; ex > worstExcess {
				worstExcess, worstCount, worstBound, worstLen = ex, count, bound, d
			}
		}
	}
	c := Check{Name: fmt.Sprintf("over-admission: tenant %s (%g requests/min) at %s", tenant, limit, provider),
		Bound: fmt.Sprintf("%g + %g × (d + 1 s)/60 s + learning %g", limit, limit, allowance)}
	if len(arrivals) == 0 {
		c.Measured = "no arrivals"
		return c, 0
	}
	c.OK = worstExcess <= 1e-9
	c.Measured = fmt.Sprintf("closest window: %d in %.1f s vs %.1f (total %d)", worstCount, worstLen.Seconds(), worstBound, len(arrivals))
	return c, math.Max(0, worstExcess)
}

// inFlightAt is the number of calls in flight at t.
func inFlightAt(flight []flightPoint, t time.Time) int {
	n := 0
	for _, p := range flight {
		if p.at.After(t) {
			break
		}
		n = p.n
	}
	return n
}

// concurrencyCheck checks the calls in flight at the provider of a tenant
// limited to limit in flight: at most limit, plus, for each change of
// owner, what learning mode may let through beside the old owner's calls
// the new one could not know of: min(limit − keep, calls in flight when the
// change was seen) (the new owner fills down to keep of what it thinks
// free; only calls still running from before can be unknown to it).
func concurrencyCheck(flight []flightPoint, changes []ownerChange, limit float64) (Check, int) {
	allowance := 0.0
	for _, c := range changes {
		allowance += math.Min(limit-keep(limit), float64(inFlightAt(flight, c.at)))
	}
	peak := 0
	for _, p := range flight {
		peak = max(peak, p.n)
	}
	bound := limit + allowance
	return Check{Name: fmt.Sprintf("over-admission: tenant %s (%g in flight) at p-conc", tenantConc, limit),
		Measured: fmt.Sprintf("peak %d in flight", peak), Bound: fmt.Sprintf("%g + learning %g", limit, allowance),
		OK: float64(peak) <= bound}, peak
}

// recovery is the time from t0 until the provider of the concurrency
// tenant had at least target calls in flight, or -1 if never by until.
func recovery(flight []flightPoint, t0, until time.Time, target int) time.Duration {
	if inFlightAt(flight, t0) >= target {
		return 0
	}
	for _, p := range flight {
		if p.at.Before(t0) {
			continue
		}
		if p.at.After(until) {
			break
		}
		if p.n >= target {
			return p.at.Sub(t0)
		}
	}
	return -1
}
