package upstream

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

var (
	errFirstTokenTimeout = errors.New("no first token before the deadline")
	errIdleTimeout       = errors.New("stream idle for too long")
)

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
