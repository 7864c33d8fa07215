// Package logbuf holds log lines for a moment and writes them out together,
// so that a server logging a line per request makes a write system call per
// batch of lines rather than per line.
package logbuf

import (
	"io"
	"sync"
	"time"
)

// maxPending is how much is held before it is written out at once, however
// soon.
const maxPending = 64 << 10

// Writer writes what it is given to its destination within its interval,
// or at once when more than 64 KiB is pending. Safe for concurrent use.
// What is pending when the process dies is lost: Close (or Flush) before
// exiting.
type Writer struct {
	dst      io.Writer
	interval time.Duration

	mu      sync.Mutex
	pending []byte
	spare   []byte // the other buffer, swapped in while one is written
	timer   *time.Timer
	closed  bool
	writing sync.Mutex // orders the writes to dst
}

// New returns a Writer to dst that holds lines up to interval.
func New(dst io.Writer, interval time.Duration) *Writer {
	return &Writer{dst: dst, interval: interval}
}

// Write holds a copy of p; it never fails (a write error of the destination
// is dropped, as a logger would drop it). After Close it writes through.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.writing.Lock()
		defer w.writing.Unlock()
		return w.dst.Write(p)
	}
	w.pending = append(w.pending, p...)
	if len(w.pending) >= maxPending {
		_ = w.flushLocked() // a write error is dropped, as a logger would drop it
		return len(p), nil
	}
	if len(w.pending) == len(p) { // the first line held: write it out within the interval
		if w.timer == nil {
			w.timer = time.AfterFunc(w.interval, func() { _ = w.Flush() })
		} else {
			w.timer.Reset(w.interval)
		}
	}
	w.mu.Unlock()
	return len(p), nil
}

// Flush writes out what is pending.
func (w *Writer) Flush() error {
	w.mu.Lock()
	return w.flushLocked()
}

// flushLocked takes the pending bytes, unlocks w.mu and writes them. Lock
// order: mu, then writing, which keeps the writes in the order of the
// lines.
func (w *Writer) flushLocked() error {
	out := w.pending
	w.pending, w.spare = w.spare[:0], nil
	w.writing.Lock()
	w.mu.Unlock()
	var err error
	if len(out) > 0 {
		_, err = w.dst.Write(out)
	}
	w.writing.Unlock()
	if cap(out) <= 4*maxPending { // keep it as the spare, unless unusually large
		w.mu.Lock()
		if w.spare == nil {
			w.spare = out[:0]
		}
		w.mu.Unlock()
	}
	return err
}

// Close writes out what is pending; later writes go straight through.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	return w.flushLocked()
}
