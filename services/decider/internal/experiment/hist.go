package experiment

import (
	"math"
)

// A hist counts positive values in fixed log-scale bins: bin i holds
// [histMin·histGrowth^i, histMin·histGrowth^(i+1)), the first bin also
// everything below, the last everything above. Every hist has the same
// bins, so two merge by adding counts (another replica's, another block's),
// and a quantile is read back within half a bin (±2%) however many values
// were added.
type hist struct {
	lo     int      // the bin of counts[0]
	counts []uint64 // bins lo … lo+len-1: only the range seen, so a block costs a few hundred bytes, not every bin
	n      uint64
}

const (
	histMin    = 0.01 // ms or tokens/s
	histGrowth = 1.04
	histBins   = 705 // histMin·1.04^705 ≈ 1e10
)

var logGrowth = math.Log(histGrowth)

func binOf(v float64) int {
	if !(v > histMin) { // also NaN
		return 0
	}
	return min(int(math.Log(v/histMin)/logGrowth), histBins-1)
}

// binMid is the geometric middle of bin i.
func binMid(i int) float64 { return histMin * math.Pow(histGrowth, float64(i)+0.5) }

// cover grows counts to hold bins from to to (inclusive).
func (h *hist) cover(from, to int) {
	if h.counts == nil {
		h.lo, h.counts = from, make([]uint64, to-from+1)
		return
	}
	if from < h.lo {
		h.counts = append(make([]uint64, h.lo-from, h.lo-from+len(h.counts)), h.counts...)
		h.lo = from
	}
	if hi := h.lo + len(h.counts) - 1; to > hi {
		h.counts = append(h.counts, make([]uint64, to-hi)...)
	}
}

func (h *hist) addBin(i int, c uint64) {
	h.cover(i, i)
	h.counts[i-h.lo] += c
	h.n += c
}

func (h *hist) add(v float64) { h.addBin(binOf(v), 1) }

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	h.cover(o.lo, o.lo+len(o.counts)-1)
	for j, c := range o.counts {
		h.counts[o.lo+j-h.lo] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q < 1), false when empty.
func (h *hist) quantile(q float64) (float64, bool) {
	if h.n == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for j, c := range h.counts {
		seen += c
		if seen >= rank {
			return binMid(h.lo + j), true
		}
	}
	return binMid(h.lo + len(h.counts) - 1), true
}

// sparse returns the non-empty bins as index, count pairs, for storage.
func (h *hist) sparse() []uint64 {
	var out []uint64
	for j, c := range h.counts {
		if c > 0 {
			out = append(out, uint64(h.lo+j), c)
		}
	}
	return out
}

// fromSparse rebuilds a hist from sparse, ignoring bins out of range.
func fromSparse(s []uint64) hist {
	var h hist
	for i := 0; i+1 < len(s); i += 2 {
		if s[i] >= histBins || s[i+1] == 0 {
			continue
		}
		h.addBin(int(s[i]), s[i+1])
	}
	return h
}
