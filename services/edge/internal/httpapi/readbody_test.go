package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// BenchmarkReadBody reads a chat request of 4 KB (a system prompt and a
// question), as a client sends it, with its Content-Length.
func BenchmarkReadBody(b *testing.B) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a helpful assistant. ", 140) + `"},{"role":"user","content":"q"}]}`)
	s := &Server{opts: Options{MaxBodyBytes: 4 << 20}}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		got, aerr := s.readBody(httptest.NewRecorder(), r)
		if aerr != nil || len(got) != len(body) {
			b.Fatalf("read %d bytes: %v", len(got), aerr)
		}
	}
}

// TestReadAllMatchesIOReadAll: the presized read gives what io.ReadAll
// gives, whatever the body says of its length, and passes read errors on.
func TestReadAllMatchesIOReadAll(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, 4096, maxPresizedBody, maxPresizedBody + 1, 200_000} {
		body := bytes.Repeat([]byte("x"), size)
		for _, claimed := range []int64{-1, 0, int64(size) - 1, int64(size), int64(size) + 1, maxPresizedBody + 10} {
			got, err := readAll(iotest.HalfReader(bytes.NewReader(body)), claimed)
			require.NoError(t, err)
			require.Equal(t, body, got, "size %d, claimed %d", size, claimed)
		}
	}
	boom := errors.New("boom")
	_, err := readAll(iotest.TimeoutReader(bytes.NewReader([]byte("abc"))), 3)
	require.ErrorIs(t, err, iotest.ErrTimeout)
	_, err = readAll(iotest.ErrReader(boom), 10)
	require.ErrorIs(t, err, boom)
}
