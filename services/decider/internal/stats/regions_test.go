package stats

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

func TestRegionalFigures(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for range 3 {
		s.From("edge-us").In("us-east").ObserveTTFT("a/m", 1, 100*time.Millisecond, time.Time{})
		s.From("edge-eu").In("eu-west").ObserveTTFT("a/m", 1, 3*time.Second, time.Time{})
		s.From("edge-x").ObserveTTFT("a/m", 1, time.Second, time.Time{})
	}
	us, eu := s.Region("us-east"), s.Region("eu-west")
	require.NotZero(t, us)
	require.NotEqual(t, us, eu)
	require.Equal(t, "eu-west", s.RegionName(eu))
	require.Zero(t, s.Region("ap-south"), "a region no reporter named is none")

	v, n, ok := s.TTFTIn("a/m", us, 1)
	require.True(t, ok)
	require.Equal(t, []any{100 * time.Millisecond, 3}, []any{v, n})
	v, n, _ = s.TTFTIn("a/m", eu, 1)
	require.Equal(t, []any{3 * time.Second, 3}, []any{v, n})
	v, n, _ = s.TTFT("a/m", 1)
	require.Equal(t, []any{time.Second, 9}, []any{v, n}, "the global figure holds every sample")
	_, _, ok = s.TTFTIn("a/m", us, 0)
	require.False(t, ok, "buckets stay apart")
	_, _, ok = s.TTFTIn("a/m", 0, 1)
	require.False(t, ok, "no region has no figure of its own")

	clk.Advance(DefaultWindow)
	s.Refresh()
	_, _, ok = s.TTFTIn("a/m", us, 1)
	require.False(t, ok, "the regional series age like the global ones")

	s.From("edge-us").In("us-east").ObserveTTFT("a/m", 1, 100*time.Millisecond, time.Time{})
	h := s.Endpoint("a/m")
	s.Forget("a/m")
	_, _, ok = h.TTFTIn(us, 1)
	require.False(t, ok, "a forgotten endpoint's regional series read as empty")
}

func TestRegionsAreBounded(t *testing.T) {
	s := New(Config{Now: newClock().Now})
	for i := range MaxRegions + 5 {
		s.From("edge").In(fmt.Sprintf("r%02d", i)).ObserveTTFT("a/m", 0, time.Second, time.Time{})
	}
	require.NotZero(t, s.Region(fmt.Sprintf("r%02d", MaxRegions-1)))
	require.Zero(t, s.Region(fmt.Sprintf("r%02d", MaxRegions)), "regions past the bound count in the global figures only")
	_, n, _ := s.TTFT("a/m", 0)
	require.Equal(t, MaxRegions+5, n)
	d, err := decodeShard(s.Snapshot()["m"])
	require.NoError(t, err)
	require.Len(t, d.endpoints[0].regions, MaxRegions)
}

func TestSnapshotKeepsRegions(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for i := range 4 {
		s.From("edge-us").In("us-east").ObserveTTFT("a/m", 2, time.Duration(i+1)*100*time.Millisecond, time.Time{})
		s.From("edge-eu").In("eu-west").ObserveTTFT("a/m", 2, time.Duration(i+1)*time.Second, time.Time{})
	}
	dst := New(Config{Now: clk.Now})
	dst.From("other").In("eu-west") // region indices differ between the stores
	dst.From("stale").In("ap-south").ObserveTTFT("a/m", 2, time.Minute, time.Time{})
	require.NoError(t, dst.Restore(s.Snapshot()))
	for _, r := range []string{"us-east", "eu-west"} {
		v1, n1, ok := s.TTFTIn("a/m", s.Region(r), 2)
		require.True(t, ok)
		v2, n2, _ := dst.TTFTIn("a/m", dst.Region(r), 2)
		require.Equal(t, []any{v1, n1}, []any{v2, n2}, r)
	}
	_, _, ok := dst.TTFTIn("a/m", dst.Region("ap-south"), 2)
	require.False(t, ok, "a region the shard does not hold is emptied, as the global series are replaced")
	require.Equal(t, s.Snapshot(), dst.Snapshot(), "and encode to the same bytes")
}

func TestRestoreRejectsBadRegions(t *testing.T) {
	s := New(Config{Now: newClock().Now})
	s.From("edge-us").In("us-east").ObserveTTFT("a/m", 0, time.Second, time.Time{})
	good := s.Snapshot()["m"]
	tests := []struct {
		name   string
		mutate func(*statev1.StatsRegion, *statev1.StatsEndpoint)
	}{
		{name: "unnamed region", mutate: func(r *statev1.StatsRegion, _ *statev1.StatsEndpoint) { r.Region = "" }},
		{name: "region twice", mutate: func(r *statev1.StatsRegion, e *statev1.StatsEndpoint) { e.Regions = append(e.Regions, r) }},
		{name: "missing bucket", mutate: func(r *statev1.StatsRegion, _ *statev1.StatsEndpoint) { r.Ttft = r.Ttft[1:] }},
		{name: "negative ttft", mutate: func(r *statev1.StatsRegion, _ *statev1.StatsEndpoint) { r.Ttft[0].Values[0] = -1 }},
		{name: "unknown reporter", mutate: func(r *statev1.StatsRegion, _ *statev1.StatsEndpoint) { r.Ttft[0].Reporters[0] = 9 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := decodeMsg(t, good)
			require.Len(t, m.GetEndpoints()[0].GetRegions(), 1)
			tt.mutate(m.GetEndpoints()[0].GetRegions()[0], m.GetEndpoints()[0])
			dst := New(Config{Now: newClock().Now})
			require.ErrorIs(t, dst.Restore(map[string][]byte{"m": encodeMsg(t, m)}), ErrCorrupt)
			_, _, ok := dst.TTFT("a/m", 0)
			require.False(t, ok, "refused whole")
		})
	}
}

// TestSnapshotOfManyRegionsStaysBounded: 20 endpoints with every series of
// MaxRegions regions full would pass etcd's value limit; the shard keeps the
// global series and drops the regional ones.
func TestSnapshotOfManyRegionsStaysBounded(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	populate(s, clk, 1, 20, DefaultMaxSamples)
	for r := range MaxRegions {
		from := s.From(fmt.Sprintf("edge-%d", r)).In(fmt.Sprintf("r%02d", r))
		for e := range 20 {
			for i := range DefaultMaxSamples {
				for b := range tokens.Bucket(tokens.NumBuckets) {
					from.ObserveTTFT(fmt.Sprintf("p%02d/vendor/model-0", e), b, time.Duration(i+r+1)*time.Millisecond, clk.Now().Add(-time.Duration(i)*time.Second))
				}
			}
		}
	}
	blob := s.Snapshot()["vendor/model-0"]
	t.Logf("20 endpoints, %d regions, full series: %d bytes", MaxRegions, len(blob))
	require.LessOrEqual(t, len(blob), maxShardBytes)
	d, err := decodeShard(blob)
	require.NoError(t, err)
	require.Len(t, d.endpoints, 20)
	require.Len(t, d.endpoints[0].ttft[0], DefaultMaxSamples)
	require.Empty(t, d.endpoints[0].regions, "the regional series are what is dropped")
}
