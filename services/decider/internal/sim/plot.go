package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// Plot sizes, in SVG user units.
const (
	plotW, plotH   = 720.0, 420.0
	padL, padR     = 60.0, 170.0
	padT, padB     = 30.0, 50.0
	plotMinSeconds = 0.1
	plotMaxSeconds = 120.0
)

var plotColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#ff7f0e", "#17becf", "#7f7f7f"}

// WriteTTFTPlot draws, as SVG, the distribution of TTFT per policy (first
// seed) for answered requests in bucket b: the share of requests (y) whose
// first token came within t seconds (x, log scale).
func WriteTTFTPlot(w io.Writer, sums []Summary, b tokens.Bucket) error {
	var sb strings.Builder
	title := fmt.Sprintf("TTFT of %s prompts: share answered within t", b)
	svgHead(&sb, title)
	x := func(s float64) float64 {
		s = min(max(s, plotMinSeconds), plotMaxSeconds)
		return padL + (plotW-padL-padR)*math.Log(s/plotMinSeconds)/math.Log(plotMaxSeconds/plotMinSeconds)
	}
	y := func(share float64) float64 { return plotH - padB - (plotH-padT-padB)*share }
	for _, s := range []float64{0.1, 0.3, 1, 3, 10, 30, 100} {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n",
			x(s), y(0), x(s), y(1), x(s), y(0)+18, s)
	}
	for _, q := range []float64{0, 0.5, 0.9, 1} {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n",
			x(plotMinSeconds), y(q), x(plotMaxSeconds), y(q), padL-6, y(q)+4, q)
	}
	for i, s := range sums {
		var v []float64
		for _, r := range s.Runs[0].recs {
			if r.ok && tokens.BucketOf(r.prompt) == b {
				v = append(v, r.ttft.Seconds())
			}
		}
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		var pts []string
		step := max(len(v)/400, 1)
		for k := 0; k < len(v); k += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(v[k]), y(float64(k+1)/float64(len(v)))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(v[len(v)-1]), y(1)))
		c := plotColors[i%len(plotColors)]
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		legend(&sb, i, c, fmt.Sprintf("%s (n=%d)", s.Policy, len(v)))
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// WriteCostPlot draws, as SVG, each policy's client cost per 1,000
// streaming requests over 32k tokens (y) against their TTFT p50 (x), mean
// over the seeds.
func WriteCostPlot(w io.Writer, sums []Summary) error {
	var sb strings.Builder
	svgHead(&sb, "Streaming >32k: client $ per 1,000 against TTFT p50")
	type pt struct{ p50, cost float64 }
	pts := make([]pt, len(sums))
	maxX, maxY := 1.0, 1.0
	for i, s := range sums {
		pts[i].p50, _ = s.interval("ttft_p50_stream_over_32k")
		pts[i].cost, _ = s.interval("usd_per_1k_stream_over_32k")
		maxX, maxY = max(maxX, pts[i].p50), max(maxY, pts[i].cost)
	}
	maxX, maxY = math.Ceil(maxX*1.1), math.Ceil(maxY*1.1)
	x := func(v float64) float64 { return padL + (plotW-padL-padR)*v/maxX }
	y := func(v float64) float64 { return plotH - padB - (plotH-padT-padB)*v/maxY }
	for k := 0.0; k <= maxX; k += math.Max(1, math.Round(maxX/8)) {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n",
			x(k), y(0), x(k), y(maxY), x(k), y(0)+18, k)
	}
	for k := 0.0; k <= maxY; k += math.Max(0.5, math.Round(maxY/6*2)/2) {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">$%g</text>`+"\n",
			x(0), y(k), x(maxX), y(k), padL-6, y(k)+4, k)
	}
	for i, s := range sums {
		if math.IsNaN(pts[i].p50) || math.IsNaN(pts[i].cost) {
			continue
		}
		c := plotColors[i%len(plotColors)]
		fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s"/><text x="%.1f" y="%.1f" font-size="10">%s</text>`+"\n",
			x(pts[i].p50), y(pts[i].cost), c, x(pts[i].p50)+8, y(pts[i].cost)-8, escapeXML(s.Policy))
		legend(&sb, i, c, s.Policy)
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

func svgHead(sb *strings.Builder, title string) {
	fmt.Fprintf(sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH)
	fmt.Fprintf(sb, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="18" font-size="14">%s</text>`+"\n", padL, escapeXML(title))
}

func legend(sb *strings.Builder, i int, color, label string) {
	lx, ly := plotW-padR+15, padT+20*float64(i)+10
	fmt.Fprintf(sb, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
		lx, ly-10, color, lx+18, ly, escapeXML(label))
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
