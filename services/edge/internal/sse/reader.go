// Package sse reads the server-sent-event streams OpenAI-compatible providers
// answer streamed chat requests with. Only the data field matters to the edge;
// comments (keep-alives such as ": OPENROUTER PROCESSING") and the event, id and
// retry fields are skipped.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// DefaultMaxEventBytes bounds one event. Chunks carrying a whole tool-call
// argument or a long reasoning block can be large, but an unbounded line would
// let one misbehaving provider exhaust the edge's memory.
const DefaultMaxEventBytes = 8 << 20

// ErrEventTooLarge is returned when an event exceeds the reader's limit.
var ErrEventTooLarge = errors.New("sse: event too large")

// Reader yields the data payloads of a server-sent-event stream.
type Reader struct {
	br  *bufio.Reader
	max int
	// line gathers a line longer than the read buffer; data is the event
	// being read. Both are reused from event to event.
	line, data []byte
}

// readBufferSize is the read buffer of one stream. Chat chunks are a few
// hundred bytes, so 4 KiB holds several; a longer line is gathered across
// reads (readLine), so the size bounds no event, only what each open
// stream holds: at 64 KiB the buffers were most of an edge's memory per
// stream and of its allocations (docs/benchmarks.md).
const readBufferSize = 4 << 10

// maxKeptBytes bounds the event buffer a stream keeps for its next event.
const maxKeptBytes = 64 << 10

// readers keeps released Readers, their buffers with them, for the next
// streams: every streamed call needs one.
var readers sync.Pool

// NewReader returns a Reader over r that refuses events larger than maxBytes
// (DefaultMaxEventBytes when maxBytes <= 0).
func NewReader(r io.Reader, maxBytes int) *Reader {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxEventBytes
	}
	if rd, ok := readers.Get().(*Reader); ok {
		rd.br.Reset(r)
		rd.max = maxBytes
		return rd
	}
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize), max: maxBytes}
}

// Release gives the Reader back for another stream once its stream is done
// with: neither it nor anything Next returned may be used afterwards.
func (r *Reader) Release() {
	r.br.Reset(nil)
	if cap(r.data) > maxKeptBytes {
		r.data = nil
	}
	if cap(r.line) > maxKeptBytes {
		r.line = nil
	}
	r.data, r.line = r.data[:0], r.line[:0]
	readers.Put(r)
}

// Next returns the data of the next event, its data lines joined by "\n". It
// returns io.EOF when the stream ended cleanly between events and
// io.ErrUnexpectedEOF when it ended inside one. The returned slice is only
// valid until the next call.
func (r *Reader) Next() ([]byte, error) {
	if cap(r.data) > maxKeptBytes {
		// One large event does not make every stream hold its size.
		r.data = nil
	}
	data := r.data[:0]
	seen := false
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if done := endsWithDone(data, seen, line); done != nil {
					return done, nil
				}
				if seen || len(line) > 0 {
					return nil, io.ErrUnexpectedEOF
				}
				return nil, io.EOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if seen {
				return data, nil
			}
			continue // blank lines between events
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue
		}
		if seen {
			data = append(data, '\n')
			r.data = data
		}
		if len(data)+len(value) > r.max {
			return nil, fmt.Errorf("%w (over %d bytes)", ErrEventTooLarge, r.max)
		}
		data = append(data, value...)
		r.data = data
		seen = true
	}
}

// Ready reports whether the next event is already read from the stream,
// whole: Next will return it without waiting for the provider. A relay
// holds back what it has for the client only while this is so, and
// writes it out before Next would wait.
func (r *Reader) Ready() bool {
	buf, _ := r.br.Peek(r.br.Buffered()) // never reads: all of it is buffered
	seen := false
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return false
		}
		line := bytes.TrimSuffix(buf[:i], []byte("\r"))
		buf = buf[i+1:]
		switch {
		case len(line) == 0:
			if seen {
				return true
			}
		case line[0] == ':':
		default:
			field, _, _ := bytes.Cut(line, []byte(":"))
			seen = seen || string(field) == "data"
		}
	}
}

// done is the terminator OpenAI-compatible streams end with.
var done = []byte("[DONE]")

// endsWithDone returns the terminator event when the stream ended on it
// without the blank line that would close its event: the event pending
// (data, seen) is exactly [DONE], or nothing is pending and the unterminated
// last line is "data: [DONE]". Several providers close the connection right
// after the terminator; their answer is complete, not dropped. Anything else
// cut off at the end stays an incomplete event.
func endsWithDone(data []byte, seen bool, last []byte) []byte {
	if seen {
		if len(last) == 0 && bytes.Equal(data, done) {
			return bytes.Clone(done)
		}
		return nil
	}
	field, value, _ := bytes.Cut(bytes.TrimSuffix(last, []byte("\r")), []byte(":"))
	if string(field) == "data" && bytes.Equal(bytes.TrimPrefix(value, []byte(" ")), done) {
		return bytes.Clone(done)
	}
	return nil
}

// readLine returns the next line without its terminator ("\n" or "\r\n"). At
// the end of the stream it returns what was read with io.EOF. The line is
// valid until the next read: a line within the read buffer is returned
// from it, uncopied.
func (r *Reader) readLine() ([]byte, error) {
	frag, err := r.br.ReadSlice('\n')
	if err == nil {
		if len(frag) > r.max+2 {
			return nil, fmt.Errorf("%w (over %d bytes)", ErrEventTooLarge, r.max)
		}
		return bytes.TrimSuffix(frag[:len(frag)-1], []byte("\r")), nil
	}
	r.line = r.line[:0]
	for {
		if len(r.line)+len(frag) > r.max+2 {
			return nil, fmt.Errorf("%w (over %d bytes)", ErrEventTooLarge, r.max)
		}
		r.line = append(r.line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			frag, err = r.br.ReadSlice('\n')
			continue
		}
		if err != nil {
			return r.line, err
		}
		line := r.line[:len(r.line)-1]
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}
