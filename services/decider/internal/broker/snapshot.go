package broker

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
)

// SnapshotVersion is the format version written after the magic of every
// snapshot; Restore refuses any other with ErrSnapshotVersion.
const SnapshotVersion = 3

const snapshotMagic = "SBRK"

// Errors of [Broker.Restore], matched with errors.Is.
var (
	// ErrSnapshotVersion is returned for a snapshot of a format this build
	// does not know, or not a broker snapshot at all.
	ErrSnapshotVersion = errors.New("unknown broker snapshot version")
	// ErrSnapshotCorrupt is returned for a snapshot that is truncated, fails
	// its checksum or holds impossible values.
	ErrSnapshotCorrupt = errors.New("corrupt broker snapshot")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot returns the broker's state: bucket levels (and learned buckets'
// limits), route pauses, open reservations, correction factors and the
// queued requests that have an idempotency key, as "SBRK", a version byte,
// the body and a CRC-32C of everything before it.
//
// The cut is consistent between reservations and bucket levels: every
// operation that changes both (reserve, reconcile, expiry) holds its
// reservation shard's lock throughout, and Snapshot holds every shard lock
// while it reads the levels, so a reservation is in the snapshot exactly
// when its charge is. Traffic waits for that copy (a few hundred ns per
// bucket and per open reservation pointer); encoding happens after. The
// queued requests are copied first, under the queue mutex alone: one
// admitted meanwhile may be in the snapshot both as queued and as a
// reservation, which its idempotency key resolves (a re-attach replays the
// reservation).
func (b *Broker) Snapshot() []byte {
	sq := b.captureQueue()
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	t := b.tab.Load()
	bst, entries, expires := b.capture(t)
	now := b.nowNS()

	names, order := bucketNames(bst, entries)
	w := make([]byte, 0, 64+len(order)*48+len(bst)*40+len(entries)*(160+len(e0(entries))*12))
	w = append(w, snapshotMagic...)
	w = append(w, SnapshotVersion)
	w = binary.AppendVarint(w, now)
	// For learning mode after a failover: the longest TTL granted since New
	// or Restore, and when this owner's learning mode ends.
	w = binary.AppendVarint(w, b.granted.Load())
	w = binary.AppendVarint(w, b.consUntil.Load())
	w = binary.AppendUvarint(w, uint64(len(order)))
	for _, bk := range order {
		w = appendString(w, bk.id)
	}
	w = appendBucketStates(w, bst)
	w = appendRoutes(w, t)
	n0 := len(w)
	w = appendEntries(w, entries, expires, names)
	n1 := len(w)
	w = b.appendCorrections(w)
	n2 := len(w)
	w = appendQueue(w, sq)
	// What the snapshot takes but for the open reservations and the queue:
	// the room left for reservations (entryRoom) is what remains of the
	// limit. Buckets, routes and corrections follow the catalog.
	b.baseBytes.Store(int64(n0 + (n2 - n1) + 4))
	return binary.LittleEndian.AppendUint32(w, crc32.Checksum(w, castagnoli))
}

// bucketState is a bucket's state as Snapshot copies it.
type bucketState struct {
	bk          *bucket
	p           def
	level, prev float64
	last, epoch int64
}

// capture copies, under every shard lock, the levels of t's buckets and
// the open reservations with their expiries: the consistent cut. The table
// mutex is held.
func (b *Broker) capture(t *table) (bst []bucketState, entries []*entry, expires []int64) {
	for i := range b.shards {
		b.shards[i].mu.Lock()
	}
	bst = make([]bucketState, len(t.buckets))
	for i, bk := range t.buckets {
		bk.mu.Lock()
		bst[i] = bucketState{bk: bk, p: bk.p, level: bk.level, prev: bk.prev, last: bk.last, epoch: bk.epoch}
		bk.mu.Unlock()
	}
	// An entry is immutable once granted but for its expiry, which Extend
	// moves under the shard lock: it is copied here with the pointer.
	for i := range b.shards {
		for _, e := range b.shards[i].byID {
			entries = append(entries, e)
			expires = append(expires, e.expires)
		}
	}
	for i := range b.shards {
		b.shards[i].mu.Unlock()
	}
	return bst, entries, expires
}

// bucketNames numbers the buckets a snapshot names. Bucket ids are written
// once; charges refer to them by index. The table's buckets come first
// (their states follow, in the same order), then buckets no longer
// configured that old reservations still charge.
func bucketNames(bst []bucketState, entries []*entry) (map[*bucket]int, []*bucket) {
	names := make(map[*bucket]int, len(bst))
	order := make([]*bucket, 0, len(bst))
	for _, s := range bst {
		names[s.bk] = len(order)
		order = append(order, s.bk)
	}
	for _, e := range entries {
		for _, c := range e.recs {
			if _, ok := names[c.b]; !ok {
				names[c.b] = len(order)
				order = append(order, c.b)
			}
		}
	}
	return names, order
}

func appendBucketStates(w []byte, bst []bucketState) []byte {
	w = binary.AppendUvarint(w, uint64(len(bst)))
	for _, s := range bst {
		w = append(w, byte(s.bk.source))
		if s.bk.source == SourceLearned {
			w = append(w, byte(s.bk.scope), byte(s.bk.unit), byte(s.bk.window))
			w = appendString(w, s.bk.key)
			w = appendFloat(w, s.p.capacity)
		}
		w = appendFloat(w, s.level)
		w = appendFloat(w, s.prev)
		w = binary.AppendVarint(w, s.last)
		w = binary.AppendVarint(w, s.epoch)
	}
	return w
}

func appendRoutes(w []byte, t *table) []byte {
	w = binary.AppendUvarint(w, uint64(len(t.routeDefs)))
	for _, r := range t.routeDefs {
		rt := t.routes[r.EndpointID]
		w = appendString(w, r.EndpointID)
		w = appendBool(w, r.dynamic)
		w = binary.AppendVarint(w, rt.pause.until.Load())
		w = binary.AppendVarint(w, int64(rt.pause.reason.Load()))
		w = binary.AppendVarint(w, int64(rt.pause.streak.Load()))
	}
	return w
}

func appendEntries(w []byte, entries []*entry, expires []int64, names map[*bucket]int) []byte {
	w = binary.AppendUvarint(w, uint64(len(entries)))
	for ei, e := range entries {
		r := &e.res
		for _, s := range [...]string{r.ID, r.RequestID, r.IdempotencyKey, r.Identity.TenantID, r.Identity.APIKeyID,
			r.Identity.App, r.Identity.Environment, r.Identity.Partner, r.Model, r.EndpointID} {
			w = appendString(w, s)
		}
		w = binary.AppendVarint(w, int64(r.Identity.Class))
		w = appendDemand(w, r.Estimate)
		w = appendDemand(w, r.Demand)
		w = binary.AppendVarint(w, r.Created.UnixNano())
		w = binary.AppendVarint(w, expires[ei])
		w = binary.AppendUvarint(w, uint64(len(e.recs)))
		for _, c := range e.recs {
			w = binary.AppendUvarint(w, uint64(names[c.b]))
			w = appendFloat(w, c.amount)
			w = binary.AppendVarint(w, c.epoch)
		}
	}
	return w
}

func (b *Broker) appendCorrections(w []byte) []byte {
	var corr []byte
	n := 0
	b.corr.Range(func(k, v any) bool {
		key, c := k.(corrKey), v.(*correction)
		corr = appendString(corr, key.model)
		corr = appendString(corr, key.route)
		corr = appendFloat(corr, load(&c.in))
		corr = appendFloat(corr, load(&c.out))
		corr = appendFloat(corr, load(&c.usd))
		corr = binary.AppendVarint(corr, c.n.Load())
		n++
		return true
	})
	w = binary.AppendUvarint(w, uint64(n))
	return append(w, corr...)
}

// e0 is the charges of the first entry, for a size estimate.
func e0(es []*entry) []charge {
	if len(es) == 0 {
		return nil
	}
	return es[0].recs
}

func appendString(w []byte, s string) []byte {
	w = binary.AppendUvarint(w, uint64(len(s)))
	return append(w, s...)
}

func appendFloat(w []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(w, math.Float64bits(f))
}

func appendBool(w []byte, v bool) []byte {
	if v {
		return append(w, 1)
	}
	return append(w, 0)
}

func appendDemand(w []byte, d Demand) []byte {
	w = binary.AppendVarint(w, d.InputTokens)
	w = binary.AppendVarint(w, d.OutputTokens)
	w = appendFloat(w, d.USD)
	return binary.AppendVarint(w, d.Requests)
}
