package stats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

// populate fills s with nModels × nEndpoints endpoints, each series with
// perSeries samples spread over the last 10 minutes.
func populate(s *Store, clk *fakeClock, nModels, nEndpoints, perSeries int) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := clk.Now()
	for m := range nModels {
		model := fmt.Sprintf("vendor/model-%d", m)
		for e := range nEndpoints {
			id := fmt.Sprintf("p%02d/%s", e, model)
			for range perSeries {
				at := now.Add(-time.Duration(rng.Int64N(int64(10 * time.Minute))))
				for b := range tokens.Bucket(tokens.NumBuckets) {
					s.ObserveTTFT(id, b, time.Duration(rng.Int64N(int64(30*time.Second))), at)
				}
				s.ObserveThroughput(id, 5+rng.Float64()*200, at)
				p := 1 + rng.Int64N(200_000)
				s.ObserveCache(id, p, rng.Int64N(p+1), at)
			}
		}
		for range perSeries {
			s.ObserveOutput(model, rng.Int64N(4000), now.Add(-time.Duration(rng.Int64N(int64(10*time.Minute)))))
		}
	}
}

// requireSameReads checks that every reader answers identically on a and b.
func requireSameReads(t *testing.T, a, b *Store, nModels, nEndpoints int) {
	t.Helper()
	for m := range nModels {
		model := fmt.Sprintf("vendor/model-%d", m)
		for e := range nEndpoints {
			id := fmt.Sprintf("p%02d/%s", e, model)
			for bk := range tokens.Bucket(tokens.NumBuckets) {
				v1, n1, ok1 := a.TTFT(id, bk)
				v2, n2, ok2 := b.TTFT(id, bk)
				require.True(t, ok1)
				require.Equal(t, []any{v1, n1, ok1}, []any{v2, n2, ok2}, "%s %s", id, bk)
			}
			v1, n1, ok1 := a.Throughput(id)
			v2, n2, ok2 := b.Throughput(id)
			require.Equal(t, []any{v1, n1, ok1}, []any{v2, n2, ok2})
			v1, n1, ok1 = a.CacheHitRate(id)
			v2, n2, ok2 = b.CacheHitRate(id)
			require.Equal(t, []any{v1, n1, ok1}, []any{v2, n2, ok2})
		}
		o1, n1, ok1 := a.TypicalOutput(model)
		o2, n2, ok2 := b.TypicalOutput(model)
		require.Equal(t, []any{o1, n1, ok1}, []any{o2, n2, ok2})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	clk := newClock()
	src := New(Config{Now: clk.Now})
	populate(src, clk, 3, 20, 80) // more than MaxSamples: full rings
	snap := src.Snapshot()
	require.Len(t, snap, 3)
	for key, blob := range snap {
		require.Contains(t, key, "vendor/model-")
		require.Equal(t, byte(SnapshotVersion), blob[0])
	}

	dst := New(Config{Now: clk.Now})
	require.NoError(t, dst.Restore(snap))
	requireSameReads(t, src, dst, 3, 20)
	require.Equal(t, snap, dst.Snapshot(), "a restored store re-encodes byte for byte")

	// Time passing without samples leaving the window changes no byte, so
	// the caller's "write only changed shards" skips them.
	clk.Advance(time.Minute)
	require.Equal(t, snap, src.Snapshot())

	// Aging continues identically after the restore.
	clk.Advance(7 * time.Minute)
	src.Refresh()
	dst.Refresh()
	requireSameReads(t, src, dst, 3, 20)
}

func TestRestoreReplacesAndKeepsNewest(t *testing.T) {
	clk := newClock()
	src := New(Config{Now: clk.Now})
	for i := range 8 {
		src.ObserveTTFT("a/m", 0, time.Duration(i+1)*time.Second, clk.Now().Add(time.Duration(i-8)*time.Second))
	}
	dst := New(Config{Now: clk.Now, MaxSamples: 3})
	dst.ObserveTTFT("a/m", 0, time.Hour, time.Time{})       // replaced
	dst.ObserveTTFT("a/m", 1, time.Hour, time.Time{})       // replaced by an empty series
	dst.ObserveTTFT("other/x", 0, time.Minute, time.Time{}) // not in the blob: kept
	require.NoError(t, dst.Restore(src.Snapshot()))

	got, n, ok := dst.TTFT("a/m", 0)
	require.True(t, ok)
	require.Equal(t, 3, n, "MaxSamples of the restoring store applies")
	require.Equal(t, 7*time.Second, got, "the newest three are 6s, 7s, 8s")
	_, _, ok = dst.TTFT("a/m", 1)
	require.False(t, ok)
	got, _, _ = dst.TTFT("other/x", 0)
	require.Equal(t, time.Minute, got)
}

func TestSnapshotDropsExpiredSamples(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	s.ObserveTTFT("a/m", 0, time.Second, time.Time{})
	clk.Advance(DefaultWindow)
	d, err := decodeShard(s.Snapshot()["m"])
	require.NoError(t, err)
	require.Len(t, d.endpoints, 1)
	require.Empty(t, d.endpoints[0].ttft[0])
}

// TestSnapshotSize checks the shard bound of the package documentation: a
// model with 20 endpoints and every series full stays far below etcd's 1.5 MiB.
func TestSnapshotSize(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	populate(s, clk, 1, 20, DefaultMaxSamples)
	blob := s.Snapshot()["vendor/model-0"]
	t.Logf("20 endpoints, full series: %d bytes (%d per endpoint)", len(blob), len(blob)/20)
	require.Less(t, len(blob), 20*6500+1500)
}

// reseal recomputes the checksum of a blob edited by a test, so that the
// decoder's other checks are reached.
func reseal(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
}

func TestRestoreRejectsBadBlobs(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	s.ObserveTTFT("a/m", 0, time.Second, time.Time{})
	s.ObserveCache("a/m", 10, 5, time.Time{})
	good := s.Snapshot()["m"]
	_, err := decodeShard(encodeRaw(t, "m", "a/m", 1))
	require.NoError(t, err, "the raw encoder of these tests writes valid blobs")
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }

	tests := []struct {
		name string
		blob []byte
		want error
	}{
		{name: "empty", blob: nil, want: ErrCorrupt},
		{name: "unknown version", blob: mutate(func(b []byte) []byte { b[0] = SnapshotVersion + 1; return b }), want: ErrVersion},
		{name: "the version before reporters", blob: mutate(func(b []byte) []byte { b[0] = 1; return b }), want: ErrVersion},
		{name: "JSON", blob: []byte(`{"v":1}`), want: ErrVersion},
		{name: "too short", blob: []byte{SnapshotVersion, 0}, want: ErrCorrupt},
		{name: "flipped bit", blob: mutate(func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }), want: ErrCorrupt},
		{name: "truncated", blob: mutate(func(b []byte) []byte { return b[:len(b)-5] }), want: ErrCorrupt},
		{name: "trailing bytes", blob: mutate(func(b []byte) []byte {
			return reseal(append(b[:len(b)-4], 0, 0, 0, 0, 0))
		}), want: ErrCorrupt},
		{name: "other bucket count", blob: mutate(func(b []byte) []byte { b[1] = 5; return reseal(b) }), want: ErrVersion},
		{name: "negative TTFT", blob: encodeRaw(t, "m", "a/m", -1), want: ErrCorrupt},
		{name: "endpoint of another model", blob: encodeRaw(t, "m", "a/other", 1), want: ErrCorrupt},
		{name: "reporter not in the table", blob: encodeRawFrom(t, "m", "a/m", 1, 1), want: ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := New(Config{Now: clk.Now})
			err := dst.Restore(map[string][]byte{"bad": tt.blob, "m": good})
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, `"bad"`)
			_, _, ok := dst.TTFT("a/m", 0)
			require.True(t, ok, "the good shard is loaded regardless")
		})
	}
}

// encodeRaw writes a blob with one endpoint holding one TTFT sample of value
// v, bypassing the store's validation.
func encodeRaw(t *testing.T, model, id string, v float64) []byte {
	t.Helper()
	return encodeRawFrom(t, model, id, v, 0)
}

// encodeRawFrom is encodeRaw with the sample's reporter index src (the
// blob's table names one reporter).
func encodeRawFrom(t *testing.T, model, id string, v float64, src uint64) []byte {
	t.Helper()
	b := []byte{SnapshotVersion}
	b = binary.AppendUvarint(b, tokens.NumBuckets)
	b = appendString(b, model)
	b = binary.AppendUvarint(b, 1) // one reporter,
	b = appendString(b, "edge-1")
	b = binary.AppendUvarint(b, 0) // output
	b = binary.AppendUvarint(b, 1)
	b = appendString(b, id)
	b = binary.AppendUvarint(b, 1)              // one TTFT sample in the first bucket,
	b = binary.AppendVarint(b, 1_800_000_000e9) // newest at,
	b = binary.AppendVarint(b, 0)               // at that time,
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	b = binary.AppendUvarint(b, src)
	for range tokens.NumBuckets + 1 {
		b = binary.AppendUvarint(b, 0)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// FuzzRestore feeds arbitrary bytes to Restore: it must return an error or
// load something, never panic or allocate without bound. The checksum is
// recomputed on half the inputs so the fuzzer reaches the parser.
func FuzzRestore(f *testing.F) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	populate(s, clk, 1, 2, 3)
	for _, blob := range s.Snapshot() {
		f.Add(blob, false)
	}
	f.Add([]byte{SnapshotVersion, 4, 0, 0, 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, blob []byte, fixSum bool) {
		if fixSum && len(blob) >= 5 {
			blob = reseal(blob)
		}
		err := New(Config{Now: clk.Now}).Restore(map[string][]byte{"k": blob})
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}
