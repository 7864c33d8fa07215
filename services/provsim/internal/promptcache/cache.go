// Package promptcache simulates a provider's automatic prompt-prefix cache, the
// kind OpenAI and DeepSeek run: a prompt whose beginning was seen recently is
// billed partly as cached input and its prefill is faster.
//
// The rule, relied upon by tests and documented in the README:
//
//  1. The prompt is serialised canonically: for each message its role, "\n",
//     its content text, "\n".
//  2. The bytes are cut into blocks of BlockTokens*4 bytes (4 bytes being one
//     token in pkg/tokens); a trailing partial block is never cached.
//  3. Block i is keyed by the chained hash h(i) = sha256(h(i-1) || block i),
//     so a block only hits when everything before it matched too — a prefix
//     cache, not a bag of blocks.
//  4. cached_tokens = BlockTokens × the number of leading blocks whose key was
//     recorded within TTL; it is 0 when the prompt or that number is below
//     MinTokens, and never more than the prompt's tokens.
//  5. Once a prompt has been prefilled, all its full blocks are recorded (or
//     refreshed) with the current time. The store is an LRU bounded to
//     MaxEntries blocks.
//
// One Cache belongs to one provider and model, so providers never share hits.
package promptcache

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// Key is the chained hash of one block.
type Key [sha256.Size]byte

// Config sizes a Cache. Zero values are not defaulted here: the caller owns
// defaults so that they are visible in its configuration.
type Config struct {
	// BlockTokens is the cache granularity in tokens (Required, > 0).
	BlockTokens int64
	// MinTokens is the smallest prompt, and smallest hit, that counts (Optional).
	MinTokens int64
	// TTL is how long a recorded block stays valid without being refreshed (Required, > 0).
	TTL time.Duration
	// MaxEntries bounds the number of blocks kept (Required, > 0).
	MaxEntries int
}

// Cache is a bounded LRU of block keys with their last-recorded time. It is
// safe for concurrent use.
type Cache struct {
	cfg Config

	mu      sync.Mutex
	order   *list.List // of *entry, most recently recorded first
	entries map[Key]*list.Element
}

type entry struct {
	key Key
	// until is when the entry expires: its last recording plus its TTL.
	until time.Time
}

// New returns an empty Cache.
func New(cfg Config) *Cache {
	return &Cache{cfg: cfg, order: list.New(), entries: make(map[Key]*list.Element)}
}

// Config returns the configuration the Cache was built with.
func (c *Cache) Config() Config { return c.cfg }

// Keys returns the chained keys of the full blocks of msgs' canonical form.
func Keys(msgs []tokens.Message, blockTokens int64) []Key {
	blockBytes := int(blockTokens) * tokens.BytesPerToken
	if blockBytes <= 0 {
		return nil
	}
	size := 0
	for _, m := range msgs {
		size += len(m.Role) + len(m.Content) + 2
	}
	buf := make([]byte, 0, size)
	for _, m := range msgs {
		buf = append(buf, m.Role...)
		buf = append(buf, '\n')
		buf = append(buf, m.Content...)
		buf = append(buf, '\n')
	}
	keys := make([]Key, 0, len(buf)/blockBytes)
	var prev Key
	h := sha256.New()
	for off := 0; off+blockBytes <= len(buf); off += blockBytes {
		h.Reset()
		h.Write(prev[:])
		h.Write(buf[off : off+blockBytes])
		h.Sum(prev[:0])
		keys = append(keys, prev)
	}
	return keys
}

// Lookup returns the cached tokens of a prompt of promptTokens tokens whose
// block keys are keys, at time now. It does not change the cache: only a
// prefilled prompt refreshes its blocks (see Record).
func (c *Cache) Lookup(keys []Key, promptTokens int64, now time.Time) int64 {
	if promptTokens < c.cfg.MinTokens {
		return 0
	}
	c.mu.Lock()
	hits := int64(0)
	for _, k := range keys {
		el, ok := c.entries[k]
		if !ok || !now.Before(el.Value.(*entry).until) {
			break
		}
		hits++
	}
	c.mu.Unlock()
	cached := hits * c.cfg.BlockTokens
	if cached < c.cfg.MinTokens {
		return 0
	}
	return min(cached, promptTokens)
}

// Record stores or refreshes keys at time now, evicting the least recently
// recorded blocks beyond MaxEntries, and returns the tokens it wrote: those
// of the blocks that were absent or expired. Prompts under MinTokens are not
// recorded, as they could never produce a hit that counts.
func (c *Cache) Record(keys []Key, promptTokens int64, now time.Time) int64 {
	if promptTokens < c.cfg.MinTokens {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	written := int64(0)
	// Record back to front so a prompt's first block ends up the most recent:
	// eviction then trims prompts from their tails, and never cuts the head of
	// a chain whose later blocks would be unreachable anyway.
	for i := len(keys) - 1; i >= 0; i-- {
		if c.put(keys[i], c.cfg.TTL, now) {
			written += c.cfg.BlockTokens
		}
	}
	c.evict()
	return written
}

// Fresh reports whether k was recorded and has not expired at now.
func (c *Cache) Fresh(k Key, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[k]
	return ok && now.Before(el.Value.(*entry).until)
}

// Put stores or refreshes one key with its own ttl, as an explicit cache
// breakpoint asks, and reports whether it was absent or expired (a write
// rather than a refresh). A refresh never shortens an entry's life.
func (c *Cache) Put(k Key, ttl time.Duration, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	wrote := c.put(k, ttl, now)
	c.evict()
	return wrote
}

func (c *Cache) put(k Key, ttl time.Duration, now time.Time) bool {
	until := now.Add(ttl)
	if el, ok := c.entries[k]; ok {
		e := el.Value.(*entry)
		expired := !now.Before(e.until)
		if expired || until.After(e.until) {
			e.until = until
		}
		c.order.MoveToFront(el)
		return expired
	}
	c.entries[k] = c.order.PushFront(&entry{key: k, until: until})
	return true
}

func (c *Cache) evict() {
	for c.order.Len() > c.cfg.MaxEntries {
		back := c.order.Back()
		c.order.Remove(back)
		delete(c.entries, back.Value.(*entry).key)
	}
}

// Len returns the number of blocks held, expired ones included until evicted.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
