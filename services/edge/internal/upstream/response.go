package upstream

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// maxResponseBytes bounds a non-streamed answer held in memory.
const maxResponseBytes = 64 << 20

// maxErrorBodyBytes bounds how much of a provider's error answer is read.
const maxErrorBodyBytes = 64 << 10

// maxHeldBytes bounds the chunks held back before the first token; past it
// the answer is committed anyway rather than buffered without end.
const maxHeldBytes = 1 << 20

// buffers keeps the buffers streams are relayed through (*[]byte), for
// the next streams.
var buffers sync.Pool

// maxKeptBuffer bounds the buffers kept: one answer of megabytes does not
// make the pool hold its size.
const maxKeptBuffer = 64 << 10

// getBuffer returns an empty buffer for relaying a stream.
func getBuffer() []byte {
	if b, ok := buffers.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 512) // a few chunks; an open stream holds it
}

// putBuffer gives back a buffer no longer used.
func putBuffer(b []byte) {
	if b == nil || cap(b) > maxKeptBuffer {
		return
	}
	buffers.Put(&b)
}

// maxPendingBytes bounds the chunks written to the client together.
const maxPendingBytes = 32 << 10

// maxErrorText bounds provider text copied into reports and client errors.
const maxErrorText = 512

// rateLimitHeaders keeps the provider headers the decider folds into its
// quota model: x-ratelimit-*, Anthropic's anthropic-ratelimit-* and
// Retry-After, lowercased, in a stable order.
func rateLimitHeaders(h http.Header) []*switchboardv1.Header {
	var out []*switchboardv1.Header
	for name, values := range h {
		// Only the names kept are lowered: the others cost nothing.
		if !hasPrefixFold(name, "x-ratelimit-") && !hasPrefixFold(name, "anthropic-ratelimit-") && !strings.EqualFold(name, "retry-after") {
			continue
		}
		lower := strings.ToLower(name)
		for _, v := range values {
			out = append(out, &switchboardv1.Header{Name: lower, Value: v})
		}
	}
	slices.SortFunc(out, func(a, b *switchboardv1.Header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// hasPrefixFold reports whether s begins with prefix, case aside: for a
// header name (ASCII, as the HTTP client accepts no other) what
// strings.HasPrefix(strings.ToLower(s), prefix) says for a lower-case prefix.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date; 0 when
// absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs > 86400 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// transportText describes a transport error without the request URL, which
// may carry credentials in its query or user info.
func transportText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func redact(s, secret string) string {
	if secret == "" || s == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
