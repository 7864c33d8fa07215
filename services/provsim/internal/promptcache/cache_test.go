package promptcache

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

func TestKeysChain(t *testing.T) {
	t.Parallel()
	// "user\n" + 27 bytes + "\n" = 33 bytes: two full 16-byte blocks.
	a := []tokens.Message{{Role: "user", Content: strings.Repeat("a", 27)}}
	keys := Keys(a, 4)
	require.Len(t, keys, 2)
	require.Equal(t, keys, Keys(a, 4), "deterministic")

	// Changing the first block changes every later key, even where the bytes
	// of the later block are equal: the chain makes it a prefix cache.
	b := []tokens.Message{{Role: "user", Content: "b" + strings.Repeat("a", 26)}}
	kb := Keys(b, 4)
	require.NotEqual(t, keys[0], kb[0])
	require.NotEqual(t, keys[1], kb[1])

	require.Nil(t, Keys(a, 0))
	require.Empty(t, Keys([]tokens.Message{{Role: "u", Content: "x"}}, 4), "a partial block is not a key")
}

func TestCache(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	cfg := Config{BlockTokens: 4, MinTokens: 8, TTL: time.Minute, MaxEntries: 100}
	long := func(prefix string) []tokens.Message {
		// 5 + 59 + 1 = 65 bytes: 4 full blocks of 16 bytes.
		return []tokens.Message{{Role: "user", Content: prefix + strings.Repeat("x", 59-len(prefix))}}
	}
	tests := []struct {
		name   string
		record []tokens.Message
		at     time.Duration
		lookup []tokens.Message
		prompt int64
		want   int64
	}{
		{name: "empty cache", lookup: long(""), prompt: 20, want: 0},
		{name: "same prompt hits every full block", record: long(""), lookup: long(""), prompt: 20, want: 16},
		{name: "different first block misses", record: long(""), lookup: long("y"), prompt: 20, want: 0},
		{name: "capped at prompt tokens", record: long(""), lookup: long(""), prompt: 10, want: 10},
		{name: "prompt below min tokens", record: long(""), lookup: long(""), prompt: 7, want: 0},
		{name: "expired after ttl", record: long(""), at: time.Minute, lookup: long(""), prompt: 20, want: 0},
		{
			name:   "shared prefix hits its blocks only",
			record: long(""),
			// Same first 2 blocks (32 bytes), then different.
			lookup: []tokens.Message{{Role: "user", Content: strings.Repeat("x", 27) + strings.Repeat("z", 32)}},
			prompt: 20, want: 8,
		},
		{
			name:   "hit below min tokens counts zero",
			record: long(""),
			lookup: []tokens.Message{{Role: "user", Content: strings.Repeat("x", 11) + strings.Repeat("z", 48)}},
			prompt: 20, want: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(cfg)
			if tt.record != nil {
				c.Record(Keys(tt.record, cfg.BlockTokens), 20, t0)
			}
			got := c.Lookup(Keys(tt.lookup, cfg.BlockTokens), tt.prompt, t0.Add(tt.at))
			require.Equal(t, tt.want, got)
		})
	}
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(0, 0)
	c := New(Config{BlockTokens: 4, TTL: time.Hour, MaxEntries: 3})
	first := Keys([]tokens.Message{{Role: "user", Content: strings.Repeat("a", 59)}}, 4) // 4 blocks
	c.Record(first, 100, t0)
	require.Equal(t, 3, c.Len())
	// The tail block was evicted, the head of the chain survives.
	require.Equal(t, int64(12), c.Lookup(first, 100, t0))

	other := Keys([]tokens.Message{{Role: "user", Content: strings.Repeat("b", 27)}}, 4) // 2 blocks
	c.Record(other, 100, t0.Add(time.Second))
	require.Equal(t, 3, c.Len())
	require.Equal(t, int64(8), c.Lookup(other, 100, t0.Add(time.Second)))
	require.Equal(t, int64(4), c.Lookup(first, 100, t0.Add(time.Second)))
}

func TestPutKeepsEachEntrysOwnTTL(t *testing.T) {
	t.Parallel()
	c := New(Config{BlockTokens: 1, TTL: time.Minute, MaxEntries: 10})
	t0 := time.Unix(1000, 0)
	short, long := Key{1}, Key{2}
	require.True(t, c.Put(short, 5*time.Minute, t0), "a new entry is a write")
	require.True(t, c.Put(long, time.Hour, t0))
	require.False(t, c.Put(long, 5*time.Minute, t0.Add(time.Minute)), "a fresh entry is only refreshed")
	require.True(t, c.Fresh(short, t0.Add(4*time.Minute)))
	require.False(t, c.Fresh(short, t0.Add(5*time.Minute)))
	require.True(t, c.Fresh(long, t0.Add(59*time.Minute)), "a shorter refresh does not shorten it")
	require.True(t, c.Put(short, 5*time.Minute, t0.Add(6*time.Minute)), "an expired entry is written again")
}

func TestRecordReturnsTheTokensWritten(t *testing.T) {
	t.Parallel()
	c := New(Config{BlockTokens: 4, TTL: time.Minute, MaxEntries: 10})
	t0 := time.Unix(1000, 0)
	keys := []Key{{1}, {2}, {3}}
	require.Equal(t, int64(12), c.Record(keys, 20, t0))
	require.Equal(t, int64(4), c.Record(append(keys[:2:2], Key{4}), 20, t0.Add(time.Second)), "only the new block")
	require.Equal(t, int64(12), c.Record(keys, 20, t0.Add(2*time.Minute)), "all expired")
}
