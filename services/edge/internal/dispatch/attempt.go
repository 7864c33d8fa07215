package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// maxErrorText bounds provider text copied into reports and client errors.
const maxErrorText = 512

var (
	errFirstTokenTimeout = errors.New("no first token before the deadline")
	errIdleTimeout       = errors.New("stream idle for too long")
)

// rateLimitHeaders keeps the provider headers the decider folds into its
// quota model: x-ratelimit-* and Retry-After, lowercased, in a stable order.
func rateLimitHeaders(h http.Header) []*switchboardv1.Header {
	var out []*switchboardv1.Header
	for name, values := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, "x-ratelimit-") && lower != "retry-after" {
			continue
		}
		for _, v := range values {
			out = append(out, &switchboardv1.Header{Name: lower, Value: v})
		}
	}
	slices.SortFunc(out, func(a, b *switchboardv1.Header) int { return strings.Compare(a.Name, b.Name) })
	return out
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

// watchdog cancels an attempt when the provider is too slow: first against
// the first-token deadline, then, once the answer started, against the idle
// timeout, re-armed by every read.
type watchdog struct {
	timer *time.Timer
	idle  time.Duration
	// idleMode is read by the timer's goroutine to pick the cause.
	idleMode atomic.Bool
}

func newWatchdog(first, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{idle: idle}
	w.timer = time.AfterFunc(first, func() {
		if w.idleMode.Load() {
			cancel(errIdleTimeout)
		} else {
			cancel(errFirstTokenTimeout)
		}
	})
	return w
}

// started switches from the first-token deadline to the idle timeout.
func (w *watchdog) started() {
	if w.idleMode.CompareAndSwap(false, true) {
		w.timer.Reset(w.idle)
	}
}

// touch re-arms the idle timeout; before the first token it does nothing,
// because chunks without tokens must not extend the first-token deadline.
func (w *watchdog) touch() {
	if w.idleMode.Load() {
		w.timer.Reset(w.idle)
	}
}

func (w *watchdog) stop() { w.timer.Stop() }

// pause stops the clock while the edge writes to the client: time blocked
// on a slow client is not the provider's silence. resume re-arms it.
func (w *watchdog) pause() { w.timer.Stop() }

// resume re-arms the idle timeout after a pause.
func (w *watchdog) resume() { w.touch() }

// watchedReader touches the watchdog on every read that returned data.
type watchedReader struct {
	r  io.Reader
	wd *watchdog
}

// Read implements [io.Reader].
func (r watchedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.wd.touch()
	}
	return n, err
}
