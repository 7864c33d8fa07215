// Package numfmt writes numbers in messages people read as people write
// them: 1,000,000 rather than 1e+06, 0.000003 rather than 3e-06.
package numfmt

import (
	"math"
	"strconv"
	"strings"
)

// Number writes v in decimal, never in exponent form, with a comma between
// each group of three digits of its whole part, and with as many decimals
// as v needs and no more: 43862 is "43,862", 1e6 "1,000,000", 0.25 "0.25"
// and 3e-06 "0.000003". NaN and the infinities are "NaN", "+Inf" and "-Inf".
func Number(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	b.Grow(len(sign) + len(whole) + len(whole)/3 + 1 + len(frac))
	b.WriteString(sign)
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if hasFrac {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}

// Int writes n as [Number] does: 1000000 is "1,000,000".
func Int(n int64) string { return Number(float64(n)) }
