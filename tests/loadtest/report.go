package loadtest

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the report as tables: one line of figures per scenario,
// then each scenario's tenants, limits and failed checks.
func (r *Report) Print(w io.Writer) {
	mode := "full"
	if r.Short {
		mode = "short"
	}
	fmt.Fprintf(w, "\nbrokerload (%s run, workload classes in catalog: %v), %s\n\n", mode, r.Classes, r.Elapsed.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trequests\tcompleted\tdeadline misses\tlost\tretries/req (max)\tfairness\tover-admission\tp50\tp99\tresult\t")
	for _, s := range r.Scenarios {
		fair := "-"
		if s.Fairness > 0 {
			fair = fmt.Sprintf("%.2f", s.Fairness)
		}
		result := "ok"
		if !s.Passed {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f%%\t%d\t%d\t%.2f (%d)\t%s\t%g\t%s\t%s\t%s\t\n", s.Name, s.Requests, 100*s.CompletionRate,
			s.DeadlineMisses, s.Lost, s.RetriesMean, s.RetriesMax, fair, s.OverAdmission, ms(s.P50), ms(s.P99), result)
	}
	_ = tw.Flush()
	for _, s := range r.Scenarios {
		fmt.Fprintf(w, "\n%s: %s (%s; retries from %s)\n", s.Name, s.What, s.Span.Round(10*time.Millisecond), s.RetriesSource)
		var st []string
		for _, k := range sortedKeys(s.Statuses) {
			st = append(st, fmt.Sprintf("%s ×%d", k, s.Statuses[k]))
		}
		fmt.Fprintf(w, "  answers: %s\n", strings.Join(st, ", "))
		if len(s.Tenants) > 1 {
			fmt.Fprintf(w, "  contended (demand within own limits above the shared capacity): %v\n", s.Contended)
			for _, t := range s.Tenants {
				fmt.Fprintf(w, "  tenant %-8s %-11s weight %g: sent %d, admitted %d, completed %d, fair share %.1f, fairness %.2f, p50 %s, p99 %s\n",
					t.Tenant, t.Class, t.Weight, t.Sent, t.Admitted, t.Completed, t.FairShare, t.Fairness,
					t.P50.Round(time.Millisecond), t.P99.Round(time.Millisecond))
			}
		}
		var calls []string
		for _, p := range s.Providers {
			calls = append(calls, fmt.Sprintf("%s %d (ok %d, 429 %d, 5xx %d, cancelled %d)", p.Provider, p.Requests, p.OK, p.RateLimited, p.Unavailable, p.Cancelled))
		}
		fmt.Fprintf(w, "  provider calls: %s\n", strings.Join(calls, "; "))
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
		for _, l := range s.Limits {
			mark := "ok"
			if l.Over > 0 {
				mark = fmt.Sprintf("OVER by %g", l.Over)
			}
			fmt.Fprintf(w, "  %-54s %-29s %10.0f ≤ %10.1f  %s\n", l.Subject, l.Source, l.Observed, l.Bound, mark)
		}
		for _, c := range s.Checks {
			if !c.OK {
				fmt.Fprintf(w, "  FAILED: %s: %s\n", c.Name, c.Detail)
			}
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\nover-admission: %g; %s\n", r.OverAdmission, verdict)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
