package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Result is what one run measured.
type Result struct {
	// Policy is the policy's name.
	Policy string
	// HedgeBudgetSpent is the hedge budget spent, USD.
	HedgeBudgetSpent float64
	// HedgesGranted and HedgesRefused count the budget's answers.
	HedgesGranted, HedgesRefused int64
	// Probes and ProbeCost are the synthetic probes run and their cost, USD.
	Probes    int64
	ProbeCost float64
	// Benched and Paused count cool-downs and Retry-After pauses started.
	Benched, Paused int64
	// End is the virtual time of the run's last event.
	End time.Time

	nextID    uint64
	recs      []record
	start     time.Time
	budgetOut time.Time // first hedge the budget refused
	figures   map[string]float64
}

// record is one finished request.
type record struct {
	arrival                time.Time
	prompt, output, cached int64
	stream, ok             bool
	ttft                   time.Duration // arrival to first token at the client
	cost, loserCost        float64
	hedged, hedgeWon       bool
	retries                int
	met429                 bool
	calls429               int
	failedTime             time.Duration
	provider               string
	reason                 switchboardv1.RouteReason
	moved                  bool
}

func newResult(policy string, start time.Time) *Result {
	return &Result{Policy: policy, start: start}
}

func (res *Result) add(r *request) {
	rec := record{arrival: r.arrival, reason: r.reason, moved: r.moved, prompt: r.t.prompt, output: r.output, stream: r.t.stream, retries: r.retries, met429: r.met429, calls429: r.calls429,
		failedTime: r.failedTime, hedged: r.hedgeStarted, loserCost: r.loserCost}
	if w := r.winner; w != nil {
		rec.ok, rec.ttft, rec.cached, rec.provider, rec.hedgeWon = true, w.firstAt.Sub(r.arrival), w.a.cached, w.ep.GetProvider(), w.hedge
		rec.cost = w.cost
	}
	res.recs = append(res.recs, rec)
}

// Metric is one figure of the table.
type Metric struct {
	// Key names the figure in machine-readable output.
	Key string
	// Label is the row's title.
	Label string
	// Before and After are the figures measured on production traffic,
	// before and after smart routing; NaN when none was reported.
	Before, After float64
}

var nan = math.NaN()

// Metrics are the rows of the table, in order.
var Metrics = []Metric{
	{"ttft_p50_under_8k", "TTFT p50, <8k prompts (s)", nan, nan},
	{"ttft_p50_8k_32k", "TTFT p50, 8k-32k prompts (s)", nan, nan},
	{"ttft_p50_32k_128k", "TTFT p50, 32k-128k prompts (s)", 18, 3.3},
	{"ttft_mean_32k_128k", "TTFT mean, 32k-128k prompts (s)", nan, nan},
	{"ttft_p50_over_128k", "TTFT p50, >128k prompts (s)", 40, 3.4},
	{"ttft_mean_over_128k", "TTFT mean, >128k prompts (s)", nan, nan},
	{"ttft_p50_stream_over_32k", "TTFT p50, streaming >32k (s)", nan, nan},
	{"ttft_p90_stream_over_32k", "TTFT p90, streaming >32k (s)", 57, 8.7},
	{"usd_per_1k_stream_over_32k", "client $ per 1,000 streaming >32k", 2.49, 1.04},
	{"hedge_usd_per_1k_stream_over_32k", "hedge $ per 1,000 streaming >32k", nan, nan},
	{"hedge_usd_per_1k_requests", "hedge $ per 1,000 requests", nan, nan},
	{"ttft_p50_all", "TTFT p50, all requests (s)", nan, nan},
	{"ttft_p95_all", "TTFT p95, all requests (s)", nan, nan},
	{"usd_per_1k_requests", "client $ per 1,000 requests", nan, nan},
	{"usd_per_1m_tokens", "client $ per 1M tokens", nan, nan},
	{"share_met_429", "share of requests that met a 429", nan, nan},
	{"share_retried", "share of requests retried", nan, nan},
	{"failed_attempt_hours", "time in failed attempts (h)", nan, nan},
	{"turns_moved", "conversation turns moved to another provider", nan, nan},
	{"explored", "requests routed to explore", nan, nan},
	{"requests", "requests", nan, nan},
	{"failed", "requests failed (every attempt)", nan, nan},
	{"extra_calls", "retry calls", nan, nan},
	{"hedges", "hedge calls started", nan, nan},
	{"hedge_wins", "hedges that answered first", nan, nan},
	{"hedge_budget_usd", "hedge budget spent ($)", nan, nan},
	{"hedges_refused", "hedges refused by the budget", nan, nan},
	{"hedge_budget_out_hours", "hedge budget ran out after (h)", nan, nan},
	{"cooldowns", "cool-downs and pauses started", nan, nan},
	{"probe_usd", "probe cost ($)", nan, nan},
}

// Figures returns every metric of the run, by key.
func (res *Result) Figures() map[string]float64 {
	if res.figures == nil {
		res.figures = res.compute()
	}
	return res.figures
}

func (res *Result) compute() map[string]float64 {
	f := map[string]float64{}
	var short, small, mid, long, longStream, all []float64
	var longStreamN int
	var longStreamCost, longStreamHedge, cost, hedgeCost float64
	var toks int64
	var met429, retried, failed, extra, hedges, wins, moved, explored int
	var failedTime time.Duration
	for _, r := range res.recs {
		b := tokens.BucketOf(r.prompt)
		isLongStream := r.stream && r.prompt >= 32*tokens.K
		if isLongStream {
			longStreamN++
			longStreamCost += r.cost
			longStreamHedge += r.loserCost
		}
		cost += r.cost
		hedgeCost += r.loserCost
		failedTime += r.failedTime
		if r.met429 {
			met429++
		}
		if r.retries > 0 {
			retried++
		}
		extra += r.retries
		if r.hedged {
			hedges++
		}
		if r.hedgeWon {
			wins++
		}
		if r.moved {
			moved++
		}
		if r.reason == switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION {
			explored++
		}
		if !r.ok {
			failed++
			continue
		}
		toks += r.prompt + r.output
		s := r.ttft.Seconds()
		all = append(all, s)
		switch b {
		case tokens.BucketUnder8K:
			short = append(short, s)
		case tokens.Bucket8KTo32K:
			small = append(small, s)
		case tokens.Bucket32KTo128K:
			mid = append(mid, s)
		case tokens.BucketOver128K:
			long = append(long, s)
		}
		if isLongStream {
			longStream = append(longStream, s)
		}
	}
	n := float64(len(res.recs))
	f["ttft_p50_under_8k"], f["ttft_p50_8k_32k"] = quantile(short, 0.5), quantile(small, 0.5)
	f["ttft_p50_32k_128k"], f["ttft_mean_32k_128k"] = quantile(mid, 0.5), mean(mid)
	f["ttft_p50_over_128k"], f["ttft_mean_over_128k"] = quantile(long, 0.5), mean(long)
	f["ttft_p90_stream_over_32k"] = quantile(longStream, 0.9)
	f["ttft_p50_stream_over_32k"] = quantile(longStream, 0.5)
	f["usd_per_1k_stream_over_32k"] = per(longStreamCost, float64(longStreamN)) * 1000
	f["hedge_usd_per_1k_stream_over_32k"] = per(longStreamHedge, float64(longStreamN)) * 1000
	f["ttft_p50_all"], f["ttft_p95_all"] = quantile(all, 0.5), quantile(all, 0.95)
	f["usd_per_1k_requests"] = per(cost, n) * 1000
	f["hedge_usd_per_1k_requests"] = per(hedgeCost, n) * 1000
	f["usd_per_1m_tokens"] = per(cost, float64(toks)) * 1e6
	f["share_met_429"], f["share_retried"] = per(float64(met429), n), per(float64(retried), n)
	f["failed_attempt_hours"] = failedTime.Hours()
	f["requests"], f["failed"], f["extra_calls"] = n, float64(failed), float64(extra)
	f["turns_moved"], f["explored"] = float64(moved), float64(explored)
	f["hedges"], f["hedge_wins"] = float64(hedges), float64(wins)
	f["hedge_budget_usd"], f["hedges_refused"] = res.HedgeBudgetSpent, float64(res.HedgesRefused)
	f["hedge_budget_out_hours"] = nan
	if !res.budgetOut.IsZero() {
		f["hedge_budget_out_hours"] = res.budgetOut.Sub(res.start).Hours()
	}
	f["cooldowns"], f["probe_usd"] = float64(res.Benched+res.Paused), res.ProbeCost
	return f
}

// HourlyHedged returns, per UTC hour of arrival, the share of streaming
// requests over 32k tokens that started a hedge; NaN for an hour with none
// of them.
func (res *Result) HourlyHedged() [24]float64 {
	var n, hedged [24]float64
	for _, r := range res.recs {
		if !r.stream || r.prompt < 32*tokens.K {
			continue
		}
		h := r.arrival.UTC().Hour()
		n[h]++
		if r.hedged {
			hedged[h]++
		}
	}
	var out [24]float64
	for h := range out {
		out[h] = per(hedged[h], n[h])
	}
	return out
}

// Served returns, per provider, the share of requests over 32k tokens it answered.
func (res *Result) Served() map[string]float64 {
	out := map[string]float64{}
	n := 0
	for _, r := range res.recs {
		if r.prompt < 32*tokens.K || !r.ok {
			continue
		}
		n++
		out[r.provider]++
	}
	for k := range out {
		out[k] /= float64(n)
	}
	return out
}

// CostBy returns, per provider, what the client paid it for streaming
// requests over 32k tokens, per 1,000 such requests: the parts of the
// client $ per 1,000 streaming >32k figure.
func (res *Result) CostBy() map[string]float64 {
	out := map[string]float64{}
	n := 0
	for _, r := range res.recs {
		if !r.stream || r.prompt < 32*tokens.K {
			continue
		}
		n++
		if r.ok {
			out[r.provider] += r.cost
		}
	}
	for k := range out {
		out[k] *= 1000 / float64(n)
	}
	return out
}

func per(a, b float64) float64 {
	if b == 0 {
		return nan
	}
	return a / b
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return nan
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// quantile is the q-quantile by linear interpolation between order statistics.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return nan
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := q * float64(len(s)-1)
	i := int(h)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (h-float64(i))*(s[i+1]-s[i])
}

// Summary is a policy's figures over several seeds.
type Summary struct {
	// Policy is the policy's name.
	Policy string
	// Runs are the results, one per seed.
	Runs []*Result
}

// interval returns the mean of a metric over the runs and the half-width
// of its 95 % confidence interval (0 with one run).
func (s Summary) interval(key string) (float64, float64) {
	var xs []float64
	for _, r := range s.Runs {
		if v := r.Figures()[key]; !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return meanInterval(xs)
}

// meanInterval is the mean of xs and the half-width of its 95 % confidence
// interval by Student's t (0 with fewer than two values).
func meanInterval(xs []float64) (float64, float64) {
	m := mean(xs)
	if len(xs) < 2 {
		return m, 0
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	return m, tQuantile975(len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
}

// tQuantile975 is Student's t 97.5 % quantile for df degrees of freedom.
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	if df < len(table) {
		return table[df]
	}
	return 1.96
}

// The regret against the oracle is taken on the long streaming calls,
// where the money and the waiting are: client $ per 1,000 of them and their
// TTFT p50 and p90.
const (
	regretCost = "usd_per_1k_stream_over_32k"
	regretP50  = "ttft_p50_stream_over_32k"
	regretP90  = "ttft_p90_stream_over_32k"
)

// overOracle returns, for a metric, the mean over seeds of s's figure's
// excess over the oracle's on the same seed, in percent, and the half-width
// of its 95 % interval: the seeds pair the runs (the same traffic and the
// same provider luck), so the interval is that of the paired differences.
func overOracle(s, oracle Summary, key string) (float64, float64) {
	var d Summary
	for k := range min(len(s.Runs), len(oracle.Runs)) {
		a, b := s.Runs[k].Figures()[key], oracle.Runs[k].Figures()[key]
		d.Runs = append(d.Runs, &Result{figures: map[string]float64{"d": 100 * (a/b - 1)}})
	}
	return d.interval("d")
}

// regret is s's regret against the oracle (see docs/simulation.md): the
// extra cost when its p50 and p90 are no worse than the oracle's, and the
// extra p50 and p90 when its cost is no higher; "no worse" and "no higher"
// mean not beyond the 95 % interval of the paired differences. ok is false
// where the condition fails: then s buys latency with money or the other
// way round, and is not comparable on that figure.
func regret(s, oracle Summary) (cost string, costOK bool, latency string, latencyOK bool) {
	c, chw := overOracle(s, oracle, regretCost)
	p50, p50hw := overOracle(s, oracle, regretP50)
	p90, p90hw := overOracle(s, oracle, regretP90)
	noWorse := func(m, hw float64) bool { return !math.IsNaN(m) && m-hw <= 0 }
	cost, latency = "slower", "dearer"
	if noWorse(p50, p50hw) && noWorse(p90, p90hw) {
		cost, costOK = pct(c, chw), true
	}
	if noWorse(c, chw) {
		latency, latencyOK = pct(p50, p50hw)+" / "+pct(p90, p90hw), true
	}
	return cost, costOK, latency, latencyOK
}

func pct(v, hw float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if v >= 0 {
		s = "+" + s
	}
	if hw > 0 {
		s += " ±" + strconv.FormatFloat(hw, 'f', 1, 64)
	}
	return s + "%"
}

// WriteTable prints the policies side by side, with the figures measured
// on production traffic beside them; with an oracle among them, each
// policy's regret against it; and each hedging policy's hedged share of
// long streaming calls per hour.
func WriteTable(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"metric", "measured before", "measured after"}
	for _, s := range sums {
		head = append(head, s.Policy)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, m := range Metrics {
		row := []string{m.Label, num(m.Before, 0), num(m.After, 0)}
		for _, s := range sums {
			v, hw := s.interval(m.Key)
			row = append(row, num(v, hw))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if i := slices.IndexFunc(sums, func(s Summary) bool { return s.Policy == "oracle" }); i >= 0 {
		rows := []struct {
			label string
			cell  func(s Summary) string
		}{
			{"client $ over oracle, streaming >32k", func(s Summary) string { return pct(overOracle(s, sums[i], regretCost)) }},
			{"TTFT p50 over oracle, streaming >32k", func(s Summary) string { return pct(overOracle(s, sums[i], regretP50)) }},
			{"TTFT p90 over oracle, streaming >32k", func(s Summary) string { return pct(overOracle(s, sums[i], regretP90)) }},
			{"regret: $ at no worse p50 and p90", func(s Summary) string { c, _, _, _ := regret(s, sums[i]); return c }},
			{"regret: p50 / p90 at no higher $", func(s Summary) string { _, _, l, _ := regret(s, sums[i]); return l }},
		}
		for _, r := range rows {
			row := []string{r.label, "-", "-"}
			for _, s := range sums {
				row = append(row, r.cell(s))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeHourly(w, sums); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "By provider (first seed): share of answered requests over 32k tokens | client $ per 1,000 streaming >32k:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	provs := map[string]bool{}
	for _, s := range sums {
		for p := range s.Runs[0].Served() {
			provs[p] = true
		}
	}
	names := make([]string, 0, len(provs))
	for p := range provs {
		names = append(names, p)
	}
	sort.Strings(names)
	head = []string{"provider"}
	for _, s := range sums {
		head = append(head, s.Policy)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, p := range names {
		row := []string{p}
		for _, s := range sums {
			row = append(row, fmt.Sprintf("%.1f%% | %.2f", 100*s.Runs[0].Served()[p], s.Runs[0].CostBy()[p]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

func num(v, hw float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	dec := 3
	switch a := math.Abs(v); {
	case a >= 100:
		dec = 0
	case a >= 1:
		dec = 2
	}
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if hw > 0 {
		s += " ±" + strconv.FormatFloat(hw, 'f', dec, 64)
	}
	return s
}

// WriteRecords writes one CSV row per request of every run, for plots
// (TTFT distributions per policy and size, cost against TTFT).
func WriteRecords(w io.Writer, sums []Summary) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "seed_index", "arrival_s", "prompt_tokens", "cached_tokens", "output_tokens", "stream",
		"answered", "ttft_s", "provider", "client_usd", "hedge_loser_usd", "hedged", "hedge_won", "retries", "route_reason", "moved", "calls_429"})
	for _, s := range sums {
		for k, res := range s.Runs {
			for _, r := range res.recs {
				_ = cw.Write([]string{s.Policy, strconv.Itoa(k), strconv.FormatFloat(r.arrival.Sub(res.start).Seconds(), 'f', 3, 64),
					strconv.FormatInt(r.prompt, 10), strconv.FormatInt(r.cached, 10), strconv.FormatInt(r.output, 10),
					strconv.FormatBool(r.stream), strconv.FormatBool(r.ok), strconv.FormatFloat(r.ttft.Seconds(), 'f', 3, 64),
					r.provider, strconv.FormatFloat(r.cost, 'g', 8, 64), strconv.FormatFloat(r.loserCost, 'g', 8, 64),
					strconv.FormatBool(r.hedged), strconv.FormatBool(r.hedgeWon), strconv.Itoa(r.retries),
					strings.TrimPrefix(r.reason.String(), "ROUTE_REASON_"), strconv.FormatBool(r.moved), strconv.Itoa(r.calls429)})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeHourly prints, per policy that hedged, the share of streaming
// requests over 32k tokens hedged in each UTC hour of arrival, the mean
// over seeds: whether the hedge budget lasts through the busy hours.
func writeHourly(w io.Writer, sums []Summary) error {
	var lines []string
	for _, s := range sums {
		hedged := false
		var mean [24]float64
		var n [24]int
		for _, r := range s.Runs {
			hedged = hedged || r.HedgesGranted > 0
			for h, v := range r.HourlyHedged() {
				if !math.IsNaN(v) {
					mean[h] += v
					n[h]++
				}
			}
		}
		if !hedged {
			continue
		}
		cells := make([]string, 24)
		for h := range cells {
			cells[h] = "-"
			if n[h] > 0 {
				cells[h] = strconv.Itoa(int(math.Round(100 * mean[h] / float64(n[h]))))
			}
		}
		lines = append(lines, fmt.Sprintf("  %s: %s", s.Policy, strings.Join(cells, " ")))
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Hedged share of streaming >32k requests by UTC hour of arrival, 00..23 (%, mean over seeds):")
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}
