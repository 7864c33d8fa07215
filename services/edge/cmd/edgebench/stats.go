package main

import (
	"fmt"
	"slices"
	"time"
)

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999999) - 1 // ceil(n·p/100), 1-based
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// spread is one figure over the rounds: its median, minimum and maximum.
type spread struct {
	Med, Min, Max float64
	N             int
}

// spreadOf summarises the values of one figure, one per round.
func spreadOf(vs []float64) spread {
	if len(vs) == 0 {
		return spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Med: med, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// format prints the median and, over more than one round, [min–max], each
// with the verb given (e.g. "%.0f").
func (s spread) format(verb string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return fmt.Sprintf(verb, s.Med)
	}
	return fmt.Sprintf(verb+" ["+verb+"–"+verb+"]", s.Med, s.Min, s.Max)
}

// signed formats milliseconds added over direct, with an explicit sign.
func (s spread) signed() string { return s.format("%+.2f") }

// pairwise applies f to the figures of the same round of a and b, so a
// ratio or a difference compares runs taken side by side.
func pairwise(a, b []float64, f func(x, y float64) float64) []float64 {
	out := make([]float64, 0, min(len(a), len(b)))
	for i, x := range a {
		if i >= len(b) {
			break
		}
		out = append(out, f(x, b[i]))
	}
	return out
}

func ratio(x, y float64) float64 {
	if y == 0 {
		return 0
	}
	return x / y
}

func minus(x, y float64) float64 { return x - y }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
