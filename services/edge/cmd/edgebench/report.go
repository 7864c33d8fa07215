package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func (l load) String() string {
	kind := "non-streaming"
	if l.stream {
		kind = "streaming"
	}
	if l.slow {
		kind = "slow streams"
	}
	return fmt.Sprintf("c=%d %s", l.conc, kind)
}

// figure extracts one number from each round's sample.
func figure(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func rps(s sample) float64      { return s.rps() }
func p50(s sample) float64      { return ms(percentile(s.latencies, 50)) }
func p99(s sample) float64      { return ms(percentile(s.latencies, 99)) }
func ttfc50(s sample) float64   { return ms(percentile(s.ttfc, 50)) }
func ttfc99(s sample) float64   { return ms(percentile(s.ttfc, 99)) }
func errCount(s sample) float64 { return float64(s.errs) }

// cpuOf is the CPU per request of the processes named, summed.
func cpuOf(procs ...string) func(sample) float64 {
	return func(s sample) float64 {
		var sum float64
		for _, p := range procs {
			sum += s.cpuPerReq(p)
		}
		return sum
	}
}

// processes charged to each target, in the order printed.
var targetProcs = map[string][]string{direct: {"upstream"}, proxy: {"proxy"}, switchboard: {"edge", "decider"}}

// row is one target's figures under one load, over the rounds.
type row struct {
	load, target             string
	rps, vsProxy             spread
	p50, p99, ttfc50, ttfc99 spread
	addP50, addP99, addTTFC  spread // over direct, same round
	cpu                      map[string]spread
	cpuTotal                 spread
	errs                     spread
}

// rows computes the table of one load: figures compared with the proxy
// and with direct are taken round by round, side by side.
func rows(l load, byTarget map[string][]sample) []row {
	var out []row
	for _, t := range []string{direct, proxy, switchboard} {
		ss, ok := byTarget[t]
		if !ok {
			continue
		}
		r := row{
			load: l.String(), target: t,
			rps: spreadOf(figure(ss, rps)), p50: spreadOf(figure(ss, p50)), p99: spreadOf(figure(ss, p99)),
			ttfc50: spreadOf(figure(ss, ttfc50)), ttfc99: spreadOf(figure(ss, ttfc99)), errs: spreadOf(figure(ss, errCount)),
			cpu: map[string]spread{}, cpuTotal: spreadOf(figure(ss, cpuOf(targetProcs[t]...))),
		}
		if px, ok := byTarget[proxy]; ok {
			r.vsProxy = spreadOf(pairwise(figure(ss, rps), figure(px, rps), ratio))
		}
		if d, ok := byTarget[direct]; ok {
			r.addP50 = spreadOf(pairwise(figure(ss, p50), figure(d, p50), minus))
			r.addP99 = spreadOf(pairwise(figure(ss, p99), figure(d, p99), minus))
			r.addTTFC = spreadOf(pairwise(figure(ss, ttfc50), figure(d, ttfc50), minus))
		}
		for _, p := range targetProcs[t] {
			r.cpu[p] = spreadOf(figure(ss, cpuOf(p)))
		}
		out = append(out, r)
	}
	return out
}

// printRows writes one load's table.
func printRows(w io.Writer, title string, rs []row) {
	fmt.Fprintf(w, "%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\treq/s\tvs proxy\tp50 ms\tp99 ms\tfirst chunk p50 ms\tfirst chunk p99 ms\t+p50 over direct\t+p99 over direct\t+first chunk p50\tCPU µs/req\terrors")
	for _, r := range rs {
		var cpu []string
		for _, p := range targetProcs[r.target] {
			cpu = append(cpu, p+" "+r.cpu[p].format("%.0f"))
		}
		cpuCell := strings.Join(cpu, " + ")
		if len(cpu) > 1 {
			cpuCell = r.cpuTotal.format("%.0f") + " (" + cpuCell + ")"
		}
		add := func(s spread) string {
			if r.target == direct {
				return "–"
			}
			return s.signed()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.target, r.rps.format("%.0f"), r.vsProxy.format("%.2fx"),
			r.p50.format("%.2f"), r.p99.format("%.2f"), r.ttfc50.format("%.2f"), r.ttfc99.format("%.2f"),
			add(r.addP50), add(r.addP99), add(r.addTTFC), cpuCell, r.errs.format("%.0f"))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// printResults writes a table per load, the slow-stream phase, and the
// summary in the form of the project's targets.
func printResults(w io.Writer, cfg config, res *results) {
	fmt.Fprintln(w, "\nEach figure: median [min–max] over the rounds; \"over direct\" and \"vs proxy\" compare runs of the same round.")
	fmt.Fprintln(w, "CPU µs/req: user+system CPU of the process over the measurement, per request completed (/proc/<pid>/stat).")
	fmt.Fprintln(w)
	for _, l := range res.loads {
		printRows(w, l.String(), rows(l, res.samples[l]))
	}
	if len(res.slow) > 0 {
		single := map[string][]sample{}
		for t, s := range res.slow {
			single[t] = []sample{s}
		}
		l := load{conc: cfg.streams, stream: true, slow: true}
		printRows(w, fmt.Sprintf("%s (chunks %s apart; one round)", l, cfg.slowInterval), rows(l, single))
		m := res.memory
		fmt.Fprintf(w, "memory per open stream, %d streams open: edge Go heap+stacks %s, edge RSS %s; proxy RSS %s\n\n",
			m.streams, kib(m.edgeHeap, m.edgeHeapErr), kib(m.edgeRSS, m.edgeRSSErr), kib(m.proxyRSS, nil))
	}
	printSummary(w, cfg, res)
}

func kib(b int64, err error) string {
	if err != nil {
		return "unread (" + err.Error() + ")"
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/1024)
}

// printSummary writes the headline figures as a Markdown table: load |
// ReverseProxy | Switchboard | target.
func printSummary(w io.Writer, cfg config, res *results) {
	find := func(conc int, stream bool) (px, sb row, ok bool) {
		l := load{conc: conc, stream: stream}
		ss, found := res.samples[l]
		if !found {
			return row{}, row{}, false
		}
		for _, r := range rows(l, ss) {
			switch r.target {
			case proxy:
				px = r
			case switchboard:
				sb = r
			}
		}
		return px, sb, true
	}
	fmt.Fprintln(w, "| load | ReverseProxy | Switchboard | target |")
	fmt.Fprintln(w, "|---|---|---|---|")
	if px, sb, ok := find(1, true); ok {
		fmt.Fprintf(w, "| c=1 streaming, time to first chunk added over direct, p50 | %s ms | %s ms | ≤ +0.40 ms |\n",
			px.addTTFC.signed(), sb.addTTFC.signed())
	}
	if px, sb, ok := find(64, true); ok {
		fmt.Fprintf(w, "| c=64 streaming, requests/s | 1.00x (%s/s) | %s | ≥ 0.80x |\n", px.rps.format("%.0f"), sb.vsProxy.format("%.2fx"))
		fmt.Fprintf(w, "| CPU per streamed request (edge + decider), c=64 | %s µs | %s µs (edge %s, decider %s) | ≤ 350 µs |\n",
			px.cpuTotal.format("%.0f"), sb.cpuTotal.format("%.0f"), sb.cpu["edge"].format("%.0f"), sb.cpu["decider"].format("%.0f"))
	}
	if px, sb, ok := find(64, false); ok {
		fmt.Fprintf(w, "| c=64 non-streaming, requests/s | 1.00x (%s/s) | %s | ≥ 0.80x |\n", px.rps.format("%.0f"), sb.vsProxy.format("%.2fx"))
	}
	if len(res.slow) > 0 {
		rs := rows(load{conc: cfg.streams, stream: true, slow: true}, map[string][]sample{
			direct: {res.slow[direct]}, proxy: {res.slow[proxy]}, switchboard: {res.slow[switchboard]},
		})
		fmt.Fprintf(w, "| %d concurrent streams, p99 latency added over direct | %s ms | %s ms | |\n",
			cfg.streams, rs[1].addP99.signed(), rs[2].addP99.signed())
		m := res.memory
		fmt.Fprintf(w, "| memory per open stream (%d open) | RSS %s | Go heap+stacks %s, RSS %s | |\n",
			m.streams, kib(m.proxyRSS, nil), kib(m.edgeHeap, m.edgeHeapErr), kib(m.edgeRSS, m.edgeRSSErr))
	}
	fmt.Fprintln(w)
}
