package affinity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestCached(t *testing.T) {
	t0 := time.Unix(1000, 0)
	eps := []string{"a/m", "b/m", "c/m"}
	tests := []struct {
		name     string
		record   func(tb *Table)
		prefixes []*switchboardv1.PromptPrefix
		now      time.Time
		want     []int64
	}{
		{
			name:     "nothing recorded",
			record:   func(*Table) {},
			prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 100}},
			now:      t0,
			want:     []int64{0, 0, 0},
		},
		{
			name: "previous turn served on b",
			record: func(tb *Table) {
				tb.Record("b/m", 2, 5000, t0)
			},
			prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 1000}, {Hash: 2, Tokens: 5000}, {Hash: 3, Tokens: 5200}},
			now:      t0.Add(time.Minute),
			want:     []int64{0, 5000, 0},
		},
		{
			name: "longest prefix wins per endpoint",
			record: func(tb *Table) {
				tb.Record("a/m", 1, 1000, t0)
				tb.Record("a/m", 2, 5000, t0)
				tb.Record("c/m", 1, 1000, t0)
			},
			prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 1000}, {Hash: 2, Tokens: 5000}},
			now:      t0,
			want:     []int64{5000, 0, 1000},
		},
		{
			name: "expired after the TTL",
			record: func(tb *Table) {
				tb.Record("b/m", 2, 5000, t0)
			},
			prefixes: []*switchboardv1.PromptPrefix{{Hash: 2, Tokens: 5000}},
			now:      t0.Add(6 * time.Minute),
			want:     []int64{0, 0, 0},
		},
		{
			name: "several endpoints hold the same prompt",
			record: func(tb *Table) {
				tb.Record("a/m", 2, 5000, t0)
				tb.Record("b/m", 2, 5000, t0.Add(time.Second))
				tb.Record("a/m", 2, 5000, t0.Add(2*time.Second))
			},
			prefixes: []*switchboardv1.PromptPrefix{{Hash: 2, Tokens: 5000}},
			now:      t0.Add(time.Minute),
			want:     []int64{5000, 5000, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(Options{})
			tt.record(tb)
			got := make([]int64, len(eps))
			tb.Cached(eps, tt.prefixes, tt.now, got)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBoundedMemory(t *testing.T) {
	tb := New(Options{Capacity: 100})
	t0 := time.Unix(1000, 0)
	for h := uint64(1); h <= 1000; h++ {
		tb.Record("a/m", h, 10, t0)
	}
	require.LessOrEqual(t, tb.Len(), 100)
	got := make([]int64, 1)
	tb.Cached([]string{"a/m"}, []*switchboardv1.PromptPrefix{{Hash: 1000, Tokens: 10}}, t0, got)
	require.Equal(t, int64(10), got[0], "the newest prompt is remembered")
	tb.Cached([]string{"a/m"}, []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 10}}, t0, got)
	require.Zero(t, got[0], "the oldest is forgotten")
}

func BenchmarkCached(b *testing.B) {
	tb := New(Options{})
	t0 := time.Unix(1000, 0)
	eps := make([]string, 20)
	for i := range eps {
		eps[i] = string(rune('a'+i)) + "/m"
	}
	prefixes := make([]*switchboardv1.PromptPrefix, 32)
	for i := range prefixes {
		prefixes[i] = &switchboardv1.PromptPrefix{Hash: uint64(i + 1), Tokens: int64(i * 1000)}
	}
	tb.Record(eps[3], 20, 20000, t0)
	got := make([]int64, len(eps))
	b.ReportAllocs()
	for b.Loop() {
		tb.Cached(eps, prefixes, t0, got)
	}
}

func TestLatest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	eps := []string{"a/m", "b/m", "c/m"}
	prefixes := []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 1000}, {Hash: 2, Tokens: 5000}, {Hash: 3, Tokens: 5200}}
	tests := []struct {
		name   string
		record func(tb *Table)
		now    time.Time
		want   int
		wantAt time.Time
		wantOK bool
	}{
		{name: "nothing recorded", record: func(*Table) {}, now: t0},
		{
			name:   "the last turn's endpoint",
			record: func(tb *Table) { tb.Record("b/m", 2, 5000, t0) },
			now:    t0.Add(8 * time.Minute), want: 1, wantAt: t0, wantOK: true,
		},
		{
			name:   "outside the window",
			record: func(tb *Table) { tb.Record("b/m", 2, 5000, t0) },
			now:    t0.Add(11 * time.Minute),
		},
		{
			name: "the longest prefix wins over a more recent shorter one",
			record: func(tb *Table) {
				tb.Record("b/m", 2, 5000, t0)
				tb.Record("c/m", 1, 1000, t0.Add(time.Minute))
			},
			now: t0.Add(2 * time.Minute), want: 1, wantAt: t0, wantOK: true,
		},
		{
			name: "of the endpoints that served the prefix, the most recent",
			record: func(tb *Table) {
				tb.Record("a/m", 2, 5000, t0)
				tb.Record("c/m", 2, 5000, t0.Add(time.Minute))
			},
			now: t0.Add(2 * time.Minute), want: 2, wantAt: t0.Add(time.Minute), wantOK: true,
		},
		{
			name: "a stale longest prefix gives way to a live shorter one",
			record: func(tb *Table) {
				tb.Record("a/m", 2, 5000, t0)
				tb.Record("c/m", 1, 1000, t0.Add(9*time.Minute))
			},
			now: t0.Add(12 * time.Minute), want: 2, wantAt: t0.Add(9 * time.Minute), wantOK: true,
		},
		{
			name:   "an endpoint of another model is not one of these",
			record: func(tb *Table) { tb.Record("z/other", 2, 5000, t0) },
			now:    t0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(Options{})
			tt.record(tb)
			i, at, ok := tb.Latest(eps, prefixes, tt.now, 10*time.Minute)
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, tt.want, i)
				require.Equal(t, tt.wantAt, at)
			}
		})
	}
	_, _, ok := New(Options{}).Latest(eps, nil, t0, time.Minute)
	require.False(t, ok)
}

// TestServedRecordsPrefixes: an endpoint that served a prompt holds each of
// its prefixes, so a new question after a shared system prompt is priced
// with the cache of every endpoint that served that system prompt, the
// longest prefix each holds; but a prefix served only inside a longer
// prompt is no conversation's turn.
func TestServedRecordsPrefixes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	eps := []string{"a/m", "b/m", "c/m"}
	tb := New(Options{})
	// tools (1), system (2), then each endpoint's own question.
	tb.Served("a/m", 10, 20100, []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 2, Tokens: 20000}, {Hash: 10, Tokens: 20100}}, t0)
	tb.Served("b/m", 11, 20100, []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 2, Tokens: 20000}, {Hash: 11, Tokens: 20100}}, t0)
	// c shares only the tool block.
	tb.Served("c/m", 12, 9000, []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 5, Tokens: 8900}, {Hash: 12, Tokens: 9000}}, t0)

	question := []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 2, Tokens: 20000}, {Hash: 99, Tokens: 20080}}
	cached := make([]int64, 3)
	tb.Cached(eps, question, t0.Add(time.Minute), cached)
	require.Equal(t, []int64{20000, 20000, 300}, cached, "the longest prefix each endpoint served")

	_, _, ok := tb.Latest(eps, question, t0.Add(time.Minute), 10*time.Minute)
	require.False(t, ok, "a shared system prompt is no conversation")

	// The next turn of a's question is a's conversation.
	next := append(question[:2:2], &switchboardv1.PromptPrefix{Hash: 10, Tokens: 20100}, &switchboardv1.PromptPrefix{Hash: 13, Tokens: 20300})
	i, _, ok := tb.Latest(eps, next, t0.Add(time.Minute), 10*time.Minute)
	require.True(t, ok)
	require.Equal(t, 0, i)

	// A prompt served whole stays a turn when its endpoint serves it again
	// inside a longer one (the conversation's next turn).
	tb.Served("a/m", 13, 20300, next, t0.Add(2*time.Minute))
	i, _, ok = tb.Latest(eps, next[:3], t0.Add(3*time.Minute), 10*time.Minute)
	require.True(t, ok)
	require.Equal(t, 0, i)

	// A prefix's size is at most the prompt's; nonsense is not recorded.
	tb.Served("b/m", 20, 100, []*switchboardv1.PromptPrefix{{Hash: 21, Tokens: 5000}, {Hash: 0, Tokens: 7}, nil}, t0)
	tb.Cached(eps, []*switchboardv1.PromptPrefix{{Hash: 21, Tokens: 5000}}, t0, cached)
	require.Equal(t, []int64{0, 100, 0}, cached)
	tb.Served("", 30, 100, question, t0)
	tb.Served("b/m", 0, 0, nil, t0)
}

// TestServedIsBoundedPerReport: a report with more prefixes than the edge
// sends adds at most MaxPrefixesPerReport of them, the longest, and the
// prompt.
func TestServedIsBoundedPerReport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := New(Options{})
	var many []*switchboardv1.PromptPrefix
	for i := range 1000 {
		many = append(many, &switchboardv1.PromptPrefix{Hash: uint64(i + 1), Tokens: int64(i + 1)})
	}
	tb.Served("a/m", 5000, 2000, many, t0)
	require.Equal(t, MaxPrefixesPerReport+1, tb.Len())
	cached := make([]int64, 1)
	tb.Cached([]string{"a/m"}, many[len(many)-1:], t0, cached)
	require.Equal(t, []int64{1000}, cached, "the longest kept")
}
