package jsonscan

import (
	"math/rand/v2"
	"testing"
)

// TestPiecesMatchesScanner feeds every valid text of the corpus in random
// pieces: Pieces says whole exactly once the Scanner's end of the value was
// fed, and never for a value that is not an object or an array.
func TestPiecesMatchesScanner(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 2))
	for _, data := range corpus() {
		if Valid(data) {
			checkPieces(t, data, r.Uint64())
		}
	}
}

// FuzzPieces is TestPiecesMatchesScanner on arbitrary valid texts and cuts.
func FuzzPieces(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), uint64(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, cuts uint64) {
		if Valid(data) {
			checkPieces(t, data, cuts)
		}
	})
}

// checkPieces feeds data, a valid text, in pieces cut where seed says.
func checkPieces(t *testing.T, data []byte, seed uint64) {
	t.Helper()
	s := New(data)
	c := s.Peek()
	container := c == '{' || c == '['
	s.Skip(1)
	end := s.Pos() // just past the value
	r := rand.New(rand.NewPCG(seed, 0))
	var p Pieces
	for fed := 0; fed < len(data); {
		n := min(1+r.IntN(8), len(data)-fed)
		p.Feed(string(data[fed : fed+n]))
		fed += n
		if want := container && fed >= end; p.Whole() != want {
			t.Fatalf("%q: after %d bytes Whole says %v, the value ends at %d", data, fed, p.Whole(), end)
		}
	}
}
