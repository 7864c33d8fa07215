// Package provheaders parses the rate-limit headers of a provider's answer
// (x-ratelimit-*, anthropic-ratelimit-*, retry-after, retry-after-ms) into
// what the provider says of its limits. It is pure parsing of untrusted
// input: the broker folds the result into its buckets and route pauses.
package provheaders

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// LimitInfo is what a provider said about one of its limits.
type LimitInfo struct {
	// Limit is the provider's limit, valid when HasLimit.
	Limit float64
	// HasLimit says Limit was given.
	HasLimit bool
	// Remaining is what the provider says is left, valid when HasRemaining.
	Remaining float64
	// HasRemaining says Remaining was given.
	HasRemaining bool
	// Reset is when the provider says the limit is full again; zero if not given.
	Reset time.Time
}

// Empty reports that the provider said nothing of this limit.
func (l LimitInfo) Empty() bool { return !l.HasLimit && !l.HasRemaining && l.Reset.IsZero() }

// Headers is a provider's rate-limit headers, parsed.
type Headers struct {
	// Requests is the request limit (x-ratelimit-*-requests, anthropic-ratelimit-requests-*).
	Requests LimitInfo
	// Tokens is the combined token limit (x-ratelimit-*-tokens, anthropic-ratelimit-tokens-*).
	Tokens LimitInfo
	// InputTokens is the input token limit (x-ratelimit-*-input-tokens, anthropic-ratelimit-input-tokens-*).
	InputTokens LimitInfo
	// OutputTokens is the output token limit (x-ratelimit-*-output-tokens, anthropic-ratelimit-output-tokens-*).
	OutputTokens LimitInfo
	// RetryAfter is when the provider allows the next call (retry-after-ms
	// wins over retry-after); zero if not given.
	RetryAfter time.Time
}

// Bounds on what a header may say; beyond them it is malformed. A provider
// limit above 1e15 or a reset more than a year away is a bug, not a quota.
const (
	// MaxValue is the largest limit or remaining a header may say.
	MaxValue = 1e15
	// MaxHorizon is the furthest in the future a reset or retry may be.
	MaxHorizon = 366 * 24 * time.Hour
)

// MaxRetryAfter is the longest a provider's own Retry-After (or a reset it
// says a limit waits for) may pause or bench an endpoint, whoever reports
// it: the broker's pauses and the cool-downs of call reports are capped
// at it, so one bogus or invented header cannot bench an endpoint for
// longer. A header beyond it is well-formed, only not believed further.
const MaxRetryAfter = 15 * time.Minute

// Parse parses a provider's rate-limit headers, as name and value pairs, as
// of now. It never
// fails as a whole: a malformed header is skipped and reported in the error
// (errors.Join of each problem), and everything else is returned. Names are
// matched in any case. Accepted values:
//
//   - limit and remaining: a non-negative decimal number;
//   - reset (x-ratelimit-reset-*): a Go duration ("1s", "6m0s", "12ms"), a
//     number of seconds ("30", "0.5"), a Unix epoch in seconds (≥ 1e9) or
//     milliseconds (≥ 1e12), or an RFC 3339 time;
//   - anthropic-ratelimit-*-reset: an RFC 3339 time, or any of the above;
//   - retry-after: seconds or an HTTP date; retry-after-ms: milliseconds.
//
// A time already past is taken as now.
func Parse(hs iter.Seq2[string, string], now time.Time) (Headers, error) {
	var p Headers
	var errs []error
	var retryMS time.Time
	for name, v := range hs {
		name = strings.ToLower(strings.TrimSpace(name))
		v = strings.TrimSpace(v)
		var err error
		switch {
		case name == "retry-after":
			p.RetryAfter, err = parseRetryAfter(v, now)
		case name == "retry-after-ms":
			retryMS, err = parseMillis(v, now)
		case strings.HasPrefix(name, "x-ratelimit-"):
			kind, family, ok := strings.Cut(name[len("x-ratelimit-"):], "-")
			if li := p.family(family); ok && li != nil {
				err = li.set(kind, v, now)
			}
		case strings.HasPrefix(name, "anthropic-ratelimit-"):
			rest := name[len("anthropic-ratelimit-"):]
			i := strings.LastIndexByte(rest, '-')
			if i > 0 {
				if li := p.family(rest[:i]); li != nil {
					err = li.set(rest[i+1:], v, now)
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("header %s: %w", name, err))
		}
	}
	if !retryMS.IsZero() {
		p.RetryAfter = retryMS
	}
	return p, errors.Join(errs...)
}

func (p *Headers) family(f string) *LimitInfo {
	switch f {
	case "requests":
		return &p.Requests
	case "tokens":
		return &p.Tokens
	case "input-tokens":
		return &p.InputTokens
	case "output-tokens":
		return &p.OutputTokens
	}
	return nil
}

func (l *LimitInfo) set(kind, v string, now time.Time) error {
	switch kind {
	case "limit":
		f, err := parseAmount(v)
		if err != nil {
			return err
		}
		l.Limit, l.HasLimit = f, true
	case "remaining":
		f, err := parseAmount(v)
		if err != nil {
			return err
		}
		l.Remaining, l.HasRemaining = f, true
	case "reset":
		t, err := parseReset(v, now)
		if err != nil {
			return err
		}
		l.Reset = t
	}
	return nil
}

func parseAmount(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= MaxValue) {
		return 0, fmt.Errorf("%q is not a non-negative number", trunc(v))
	}
	return f, nil
}

// parseReset parses a reset value into an absolute time.
func parseReset(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, errors.New("empty reset")
	}
	if c := v[len(v)-1]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		if d, err := time.ParseDuration(v); err == nil {
			return after(now, d)
		}
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case !(f >= 0) || math.IsInf(f, 0):
			return time.Time{}, fmt.Errorf("%q is not a non-negative number", trunc(v))
		case f >= 1e12:
			return epoch(now, f/1e3)
		case f >= 1e9:
			return epoch(now, f)
		}
		return after(now, time.Duration(f*float64(time.Second)))
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return at(now, t)
	}
	return time.Time{}, fmt.Errorf("%q is not a duration, a number of seconds, an epoch or an RFC 3339 time", trunc(v))
}

func parseRetryAfter(v string, now time.Time) (time.Time, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(f >= 0) || f > MaxHorizon.Seconds() {
			return time.Time{}, fmt.Errorf("%q is out of range", trunc(v))
		}
		return after(now, time.Duration(f*float64(time.Second)))
	}
	if t, err := http.ParseTime(v); err == nil {
		return at(now, t)
	}
	return time.Time{}, fmt.Errorf("%q is neither seconds nor an HTTP date", trunc(v))
}

func parseMillis(v string, now time.Time) (time.Time, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) || f > float64(MaxHorizon.Milliseconds()) {
		return time.Time{}, fmt.Errorf("%q is not a number of milliseconds in range", trunc(v))
	}
	return after(now, time.Duration(f*float64(time.Millisecond)))
}

func after(now time.Time, d time.Duration) (time.Time, error) {
	if d < 0 || d > MaxHorizon {
		return time.Time{}, fmt.Errorf("duration %s is out of range", d)
	}
	return now.Add(d).UTC(), nil
}

func epoch(now time.Time, sec float64) (time.Time, error) {
	whole, frac := math.Modf(sec)
	return at(now, time.Unix(int64(whole), int64(frac*1e9)))
}

func at(now, t time.Time) (time.Time, error) {
	if t.Before(now) {
		return now.UTC(), nil
	}
	if t.Sub(now) > MaxHorizon {
		return time.Time{}, fmt.Errorf("time %s is too far ahead", t.UTC().Format(time.RFC3339))
	}
	return t.UTC(), nil
}

// trunc keeps error messages short whatever a provider sends.
func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
