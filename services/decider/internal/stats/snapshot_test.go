package stats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
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
		require.Equal(t, key, decodeMsg(t, blob).GetModel())
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

// decodeMsg parses a shard for a test to edit it.
func decodeMsg(t *testing.T, b []byte) *statev1.StatsShard {
	t.Helper()
	var m statev1.StatsShard
	require.NoError(t, proto.Unmarshal(b, &m))
	return &m
}

func encodeMsg(t testing.TB, m *statev1.StatsShard) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestRestoreRejectsBadBlobs(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	s.ObserveTTFT("a/m", 0, time.Second, time.Time{})
	s.ObserveCache("a/m", 10, 5, time.Time{})
	good := s.Snapshot()["m"]
	_, err := decodeShard(encodeRaw(t, "m", "a/m", 1))
	require.NoError(t, err, "the raw encoder of these tests writes valid shards")
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	edit := func(f func(m *statev1.StatsShard)) []byte {
		m := decodeMsg(t, good)
		f(m)
		return encodeMsg(t, m)
	}
	huge := int64(math.MaxInt64)

	tests := []struct {
		name string
		blob []byte
		want error
	}{
		{name: "empty", blob: nil, want: ErrCorrupt},
		{name: "JSON", blob: []byte(`{"v":1}`), want: ErrCorrupt},
		{name: "not a shard", blob: []byte{0x0a, 0x02, 'h', 'i'}, want: ErrVersion},
		{name: "truncated", blob: mutate(func(b []byte) []byte { return b[:len(b)-5] }), want: ErrCorrupt},
		{name: "trailing bytes", blob: mutate(func(b []byte) []byte { return append(b, 0, 0, 0, 0, 0) }), want: ErrCorrupt},
		{name: "other bucket count", blob: edit(func(m *statev1.StatsShard) { m.SizeBuckets = 5 }), want: ErrVersion},
		{name: "a TTFT series missing", blob: edit(func(m *statev1.StatsShard) {
			m.Endpoints[0].Ttft = m.Endpoints[0].Ttft[:tokens.NumBuckets-1]
		}), want: ErrCorrupt},
		{name: "a value missing", blob: edit(func(m *statev1.StatsShard) { m.Endpoints[0].Ttft[0].Values = nil }), want: ErrCorrupt},
		{name: "a cache part missing", blob: edit(func(m *statev1.StatsShard) { m.Endpoints[0].Cache.Parts = nil }), want: ErrCorrupt},
		{name: "cache part above its whole", blob: edit(func(m *statev1.StatsShard) { m.Endpoints[0].Cache.Parts[0] = 11 }), want: ErrCorrupt},
		{name: "time out of range", blob: edit(func(m *statev1.StatsShard) {
			m.Endpoints[0].Ttft[0].NewestUnixNano = huge
			m.Endpoints[0].Ttft[0].OffsetsNano[0] = 1
		}), want: ErrCorrupt},
		{name: "invalid UTF-8", blob: mutate(func(b []byte) []byte {
			i := bytes.Index(b, []byte("a/m"))
			b[i] = 0xff
			return b
		}), want: ErrCorrupt},
		{name: "negative TTFT", blob: encodeRaw(t, "m", "a/m", -1), want: ErrCorrupt},
		{name: "NaN TTFT", blob: encodeRaw(t, "m", "a/m", nan()), want: ErrCorrupt},
		{name: "endpoint of another model", blob: encodeRaw(t, "m", "a/other", 1), want: ErrCorrupt},
		{name: "endpoint without an id", blob: encodeRaw(t, "m", "", 1), want: ErrCorrupt},
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

// TestRestoreRefusesWhole checks that a shard with one bad sample, after
// valid endpoints, loads nothing: the earlier endpoints are not half loaded.
func TestRestoreRefusesWhole(t *testing.T) {
	clk := newClock()
	src := New(Config{Now: clk.Now})
	src.ObserveTTFT("a/m", 0, time.Second, time.Time{})
	src.ObserveTTFT("b/m", 0, time.Second, time.Time{})
	m := decodeMsg(t, src.Snapshot()["m"])
	require.Len(t, m.Endpoints, 2)
	m.Endpoints[1].Ttft[0].Values[0] = -1
	dst := New(Config{Now: clk.Now})
	require.ErrorIs(t, dst.Restore(map[string][]byte{"m": encodeMsg(t, m)}), ErrCorrupt)
	_, _, ok := dst.TTFT("a/m", 0)
	require.False(t, ok, "the valid endpoint before the bad one is not loaded")
	require.Empty(t, dst.Snapshot())
}

// encodeRaw writes a shard with one endpoint holding one TTFT sample of
// value v, bypassing the store's validation.
func encodeRaw(t testing.TB, model, id string, v float64) []byte {
	t.Helper()
	return encodeRawFrom(t, model, id, v, 0)
}

// encodeRawFrom is encodeRaw with the sample's reporter index src (the
// shard's table names one reporter).
func encodeRawFrom(t testing.TB, model, id string, v float64, src uint32) []byte {
	t.Helper()
	e := &statev1.StatsEndpoint{
		Id:         id,
		Throughput: &statev1.StatsSeries{},
		Cache:      &statev1.StatsRatioSeries{},
	}
	for range tokens.NumBuckets {
		e.Ttft = append(e.Ttft, &statev1.StatsSeries{})
	}
	e.Ttft[0] = &statev1.StatsSeries{
		NewestUnixNano: 1_800_000_000e9,
		OffsetsNano:    []int64{0},
		Values:         []float64{v},
		Reporters:      []uint32{src},
	}
	return encodeMsg(t, &statev1.StatsShard{
		SizeBuckets: tokens.NumBuckets,
		Model:       model,
		Reporters:   []string{"edge-1"},
		Endpoints:   []*statev1.StatsEndpoint{e},
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: it must return an error of
// a known kind or load something, never panic or allocate without bound, and
// what it loads re-encodes to a shard that restores without error.
func FuzzRestore(f *testing.F) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	populate(s, clk, 1, 2, 3)
	for _, blob := range s.Snapshot() {
		f.Add(blob)
	}
	f.Add(encodeRaw(f, "m", "a/m", 1))
	f.Add(encodeRawFrom(f, "m", "a/m", 1, 7))
	f.Add([]byte{0x08, 0x04, 0x12, 0x01, 'm', 0x2a, 0x02, 0x0a, 0xff})
	f.Fuzz(func(t *testing.T, blob []byte) {
		dst := New(Config{Now: clk.Now})
		err := dst.Restore(map[string][]byte{"k": blob})
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if err := New(Config{Now: clk.Now}).Restore(dst.Snapshot()); err != nil {
			t.Fatalf("a restored store's snapshot does not restore: %v", err)
		}
	})
}
