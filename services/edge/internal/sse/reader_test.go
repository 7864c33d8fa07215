package sse

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 300_000)
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error
	}{
		{name: "simple", in: "data: a\n\ndata: b\n\n", want: []string{"a", "b"}, wantErr: io.EOF},
		{name: "crlf and no space", in: "data:a\r\n\r\ndata: [DONE]\r\n\r\n", want: []string{"a", "[DONE]"}, wantErr: io.EOF},
		{name: "comments and other fields", in: ": keep-alive\n\nevent: x\nid: 3\nretry: 5\ndata: a\n\n", want: []string{"a"}, wantErr: io.EOF},
		{name: "multi-line data", in: "data: a\ndata: b\n\n", want: []string{"a\nb"}, wantErr: io.EOF},
		{name: "long line", in: "data: " + long + "\n\n", want: []string{long}, wantErr: io.EOF},
		{name: "truncated event", in: "data: a\n\ndata: {\"x", want: []string{"a"}, wantErr: io.ErrUnexpectedEOF},
		{name: "event without blank line", in: "data: a\n", wantErr: io.ErrUnexpectedEOF},
		// Some providers close right after the terminator without the blank
		// line that would end its event: still a clean end.
		{name: "done then end of stream", in: "data: a\n\ndata: [DONE]\n", want: []string{"a", "[DONE]"}, wantErr: io.EOF},
		{name: "done without newline", in: "data: a\n\ndata: [DONE]", want: []string{"a", "[DONE]"}, wantErr: io.EOF},
		{name: "done with crlf then end", in: "data: [DONE]\r\n", want: []string{"[DONE]"}, wantErr: io.EOF},
		{name: "truncated done", in: "data: a\n\ndata: [DO", want: []string{"a"}, wantErr: io.ErrUnexpectedEOF},
		{name: "done after other data lines", in: "data: a\ndata: [DONE]\n", wantErr: io.ErrUnexpectedEOF},
		{name: "too large", in: "data: " + long + "\n\n", max: 1000, wantErr: ErrEventTooLarge},
		{name: "empty", in: "", wantErr: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), tt.max)
			var got []string
			var err error
			for {
				var b []byte
				b, err = r.Next()
				if err != nil {
					break
				}
				got = append(got, string(b))
			}
			require.Equal(t, tt.want, got)
			require.True(t, errors.Is(err, tt.wantErr), "err = %v", err)
		})
	}
}

// TestReleasedReaderStartsClean: a reader given back and taken again for
// another stream reads only that stream, nothing left from the last one.
func TestReleasedReaderStartsClean(t *testing.T) {
	for range 3 {
		r := NewReader(strings.NewReader("data: a\n\ndata: left over\n\ndata: b"), 0)
		ev, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, "a", string(ev))
		r.Release()
		r = NewReader(strings.NewReader("data: c\n\n"), 0)
		ev, err = r.Next()
		require.NoError(t, err)
		require.Equal(t, "c", string(ev))
		_, err = r.Next()
		require.ErrorIs(t, err, io.EOF)
		r.Release()
	}
}

// TestReady: Ready says whether the next event is whole in what was read,
// so that Next returns it without reading the stream again.
func TestReady(t *testing.T) {
	tests := []struct {
		rest  string
		ready bool
	}{
		{rest: "", ready: false},
		{rest: "data: b\n\n", ready: true},
		{rest: "data: b\r\n\r\n", ready: true},
		{rest: "data: b\n", ready: false},
		{rest: "data: b", ready: false},
		{rest: ": keep-alive\n\n", ready: false},
		{rest: "event: x\nid: 1\n\n", ready: false},
		{rest: ": keep-alive\n\nevent: x\n\ndata: b\n\n", ready: true},
		{rest: "data: b\ndata: c\n\n", ready: true},
		{rest: "data\n\n", ready: true},
		{rest: "\n\n\n", ready: false},
	}
	for _, tt := range tests {
		r := NewReader(strings.NewReader("data: a\n\n"+tt.rest), 0)
		ev, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, "a", string(ev))
		require.Equal(t, tt.ready, r.Ready(), "%q", tt.rest)
		if tt.ready {
			// Ready promised an event: Next returns one, not an error.
			_, err := r.Next()
			require.NoError(t, err, "%q", tt.rest)
		}
	}
}
