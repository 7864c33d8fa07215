package sse

import (
	"io"
	"testing"
)

// loop reads a stream over and over.
type loop struct {
	b   []byte
	off int
}

func (l *loop) Read(p []byte) (int, error) {
	if l.off == len(l.b) {
		l.off = 0
	}
	n := copy(p, l.b[l.off:])
	l.off += n
	return n, nil
}

// BenchmarkNext reads one event of a provider's stream per op.
func BenchmarkNext(b *testing.B) {
	stream := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n" +
		": keep-alive\n\n")
	r := NewReader(&loop{b: stream}, 0)
	for b.Loop() {
		if _, err := r.Next(); err != nil && err != io.EOF {
			b.Fatal(err)
		}
	}
}
