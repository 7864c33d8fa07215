package sse

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds provider streams, which the edge does not control, to the
// reader, delivered in pieces of a fuzzed size: it must never panic or loop,
// never return an event over its limit or anything but the documented
// errors, and see the same events however the bytes were split.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\ndata: b\n\n",
		"data:a\r\n\r\ndata: [DONE]\r\n\r\n",
		": keep-alive\n\nevent: x\nid: 3\nretry: 5\ndata: a\n\n",
		"data: a\ndata: b\n\n",
		"data: a\n\ndata: {\"x",
		"data: a\n",
		"data: [DONE]",
		"data: [DONE]\n",
		"data\n\n:\n\ndata:\r\n\r\n",
		"\r\n\n\r\r\n",
		"data: " + string(bytes.Repeat([]byte("x"), 100)) + "\n\n",
		"",
	} {
		f.Add([]byte(s), uint8(0), uint16(0))
		f.Add([]byte(s), uint8(1), uint16(16))
		f.Add([]byte(s), uint8(3), uint16(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8, max uint16) {
		limit := int(max)
		whole, wholeErr := readAll(t, bytes.NewReader(in), limit, len(in))
		split, splitErr := readAll(t, &pieces{b: in, n: int(piece), t: t}, limit, len(in))
		if !errors.Is(splitErr, classOf(wholeErr)) {
			t.Fatalf("split into %d-byte reads: error %v, whole: %v", piece, splitErr, wholeErr)
		}
		if len(whole) != len(split) {
			t.Fatalf("split into %d-byte reads: %d events, whole: %d", piece, len(split), len(whole))
		}
		for i := range whole {
			if !bytes.Equal(whole[i], split[i]) {
				t.Fatalf("event %d: %q split, %q whole", i, split[i], whole[i])
			}
		}
	})
}

// readAll reads every event of r and the error that ended the stream,
// checking each against the reader's contract.
func readAll(t *testing.T, r io.Reader, limit, inLen int) ([][]byte, error) {
	t.Helper()
	max := limit
	if max <= 0 {
		max = DefaultMaxEventBytes
	}
	sr := NewReader(r, limit)
	p, _ := r.(*pieces)
	var events [][]byte
	total := 0
	// Every event consumes at least one byte (its blank line), so a stream
	// of n bytes has at most n events.
	for range inLen + 1 {
		if p != nil {
			// An event Ready says is whole is read without reading on.
			p.ready = sr.Ready()
		}
		ev, err := sr.Next()
		if err != nil {
			if classOf(err) == nil {
				t.Fatalf("undocumented error %v", err)
			}
			return events, err
		}
		if len(ev) > max {
			t.Fatalf("event of %d bytes over the %d limit", len(ev), max)
		}
		total += len(ev)
		if total > inLen {
			t.Fatalf("%d bytes of events from %d bytes of stream", total, inLen)
		}
		events = append(events, bytes.Clone(ev))
	}
	t.Fatalf("more than %d events from %d bytes", inLen+1, inLen)
	return nil, nil
}

// classOf maps an error to the documented one it is, or nil.
func classOf(err error) error {
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, ErrEventTooLarge} {
		if errors.Is(err, e) {
			return e
		}
	}
	return nil
}

// pieces returns b at most n bytes per Read (all of it when n is 0). It
// fails the test when read while ready is set.
type pieces struct {
	b     []byte
	n     int
	t     *testing.T
	ready bool
}

func (p *pieces) Read(out []byte) (int, error) {
	if p.ready {
		p.t.Fatalf("read on although Ready said the next event was whole")
	}
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := len(out)
	if p.n > 0 {
		n = min(n, p.n)
	}
	n = copy(out, p.b[:min(n, len(p.b))])
	p.b = p.b[n:]
	return n, nil
}
