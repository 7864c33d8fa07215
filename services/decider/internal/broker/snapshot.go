package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// SnapshotVersion is the format version written after the magic of every
// snapshot; Restore also reads version 1 (which did not record the longest
// TTL granted) and refuses any other with ErrSnapshotVersion.
const SnapshotVersion = 2

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
// limits), route pauses, open reservations and correction factors, as
// "SBRK", a version byte, the body and a CRC-32C of everything before it.
//
// The cut is consistent between reservations and bucket levels: every
// operation that changes both (reserve, reconcile, expiry) holds its
// reservation shard's lock throughout, and Snapshot holds every shard lock
// while it reads the levels, so a reservation is in the snapshot exactly
// when its charge is. Traffic waits for that copy (a few hundred ns per
// bucket and per open reservation pointer); encoding happens after.
func (b *Broker) Snapshot() []byte {
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	t := b.tab.Load()
	type state struct {
		bk          *bucket
		p           def
		level, prev float64
		last, epoch int64
	}
	for i := range b.shards {
		b.shards[i].mu.Lock()
	}
	bst := make([]state, len(t.buckets))
	for i, bk := range t.buckets {
		bk.mu.Lock()
		bst[i] = state{bk: bk, p: bk.p, level: bk.level, prev: bk.prev, last: bk.last, epoch: bk.epoch}
		bk.mu.Unlock()
	}
	// An entry is immutable once granted but for its expiry, which Extend
	// moves under the shard lock: it is copied here with the pointer.
	var entries []*entry
	var expires []int64
	for i := range b.shards {
		for _, e := range b.shards[i].byID {
			entries = append(entries, e)
			expires = append(expires, e.expires)
		}
	}
	for i := range b.shards {
		b.shards[i].mu.Unlock()
	}
	now := b.nowNS()

	// Bucket ids are written once; charges refer to them by index. The
	// table's buckets come first (their states follow, in the same order),
	// then buckets no longer configured that old reservations still charge.
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
	w := make([]byte, 0, 64+len(order)*48+len(bst)*40+len(entries)*(160+len(e0(entries))*12))
	w = append(w, snapshotMagic...)
	w = append(w, SnapshotVersion)
	w = binary.AppendVarint(w, now)
	// Since version 2: for learning mode after a failover, the longest TTL
	// granted since New or Restore, and when this owner's learning mode ends.
	w = binary.AppendVarint(w, b.granted.Load())
	w = binary.AppendVarint(w, b.consUntil.Load())
	w = binary.AppendUvarint(w, uint64(len(order)))
	for _, bk := range order {
		w = appendString(w, bk.id)
	}
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
	w = binary.AppendUvarint(w, uint64(len(t.routeDefs)))
	for _, r := range t.routeDefs {
		rt := t.routes[r.EndpointID]
		w = appendString(w, r.EndpointID)
		w = appendBool(w, r.dynamic)
		w = binary.AppendVarint(w, rt.pause.until.Load())
		w = binary.AppendVarint(w, int64(rt.pause.reason.Load()))
		w = binary.AppendVarint(w, int64(rt.pause.streak.Load()))
	}
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
	w = append(w, corr...)
	return binary.LittleEndian.AppendUint32(w, crc32.Checksum(w, castagnoli))
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

// reader decodes a snapshot body; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrSnapshotCorrupt, what)
	}
	r.b = nil
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least min bytes each, refusing one the
// rest of the snapshot cannot hold before anything is allocated for it. With
// min 0 it reads a plain index, bounded by the caller.
func (r *reader) count(min int) int {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad count")
		return 0
	}
	r.b = r.b[n:]
	if min == 0 {
		if v > math.MaxInt32 {
			r.fail("index out of range")
			return 0
		}
		return int(v)
	}
	if v > uint64(len(r.b)/min) {
		r.fail("count larger than the snapshot")
		return 0
	}
	return int(v)
}

func (r *reader) byte1() byte {
	if len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) str() string {
	n := r.count(1)
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// float reads a finite float.
func (r *reader) float() float64 {
	if len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	if math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail("non-finite number")
		return 0
	}
	return f
}

func (r *reader) demand() Demand {
	d := Demand{InputTokens: r.varint(), OutputTokens: r.varint(), USD: r.float(), Requests: r.varint()}
	if d.validate() != nil {
		r.fail("negative demand")
	}
	return d
}

type snapBucket struct {
	id          string
	source      Source
	learned     def
	level, prev float64
	last, epoch int64
}

type snapRoute struct {
	endpoint       string
	dynamic        bool
	until          int64
	reason, streak int32
}

type snapCharge struct {
	bucket string
	amount float64
	epoch  int64
}

type snapEntry struct {
	res     Reservation
	expires int64
	charges []snapCharge
}

type snapCorr struct {
	key         corrKey
	in, out, us float64
	n           int64
}

type snapshot struct {
	granted int64 // longest TTL granted, ns; -1 when not recorded
	learn   int64 // the owner's learning mode ends, Unix ns
	buckets []snapBucket
	routes  []snapRoute
	entries []snapEntry
	corr    []snapCorr
}

func decodeSnapshot(blob []byte) (*snapshot, error) {
	if len(blob) < len(snapshotMagic)+1+4 || string(blob[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no broker snapshot magic", ErrSnapshotVersion)
	}
	v := blob[len(snapshotMagic)]
	if v != 1 && v != SnapshotVersion {
		return nil, fmt.Errorf("%w: %d", ErrSnapshotVersion, v)
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	r := &reader{b: body[len(snapshotMagic)+1:]}
	s := &snapshot{granted: -1}
	r.varint() // taken at, for humans and future use
	if v >= 2 {
		s.granted, s.learn = r.varint(), r.varint()
		if s.granted < 0 {
			r.fail("bad granted TTL")
		}
	}
	var names []string
	for n := r.count(1); n > 0 && r.err == nil; n-- {
		names = append(names, r.str())
	}
	states := r.count(1 + 8 + 8 + 1 + 1)
	if states > len(names) {
		r.fail("more bucket states than buckets")
	}
	for i := 0; i < states && r.err == nil; i++ {
		sb := snapBucket{id: names[i], source: Source(r.byte1())}
		switch sb.source {
		case SourceConfigured:
		case SourceLearned:
			d := def{scope: Scope(r.byte1()), unit: Unit(r.byte1()), window: Window(r.byte1()), rule: RuleTokenBucket, source: SourceLearned}
			d.key = r.str()
			d.capacity = r.float()
			d.period = int64(d.window.Duration())
			if d.scope < ScopeAPIKey || d.scope > ScopeModelRoute || d.unit < UnitRequests || d.unit >= UnitConcurrentRequests ||
				d.window < WindowSecond || d.window > WindowHour || !(d.capacity > 0) {
				r.fail("bad learned bucket")
			}
			d.id = bucketID(d.scope, d.key, d.unit, d.window, d.rule, d.source)
			if d.id != sb.id {
				r.fail("learned bucket id mismatch")
			}
			sb.learned = d
		default:
			r.fail("bad bucket source")
		}
		sb.level, sb.prev = r.float(), r.float()
		sb.last, sb.epoch = r.varint(), r.varint()
		s.buckets = append(s.buckets, sb)
	}
	for n := r.count(1 + 1 + 3); n > 0 && r.err == nil; n-- {
		sr := snapRoute{endpoint: r.str(), dynamic: r.byte1() != 0, until: r.varint()}
		reason, streak := r.varint(), r.varint()
		if reason < 0 || reason > int64(ReasonDeadline) || streak < 0 || streak > math.MaxInt32 {
			r.fail("bad route pause")
		}
		sr.reason, sr.streak = int32(reason), int32(streak)
		s.routes = append(s.routes, sr)
	}
	for n := r.count(10 + 1 + 2*11 + 3); n > 0 && r.err == nil; n-- {
		var se snapEntry
		res := &se.res
		for _, p := range [...]*string{&res.ID, &res.RequestID, &res.IdempotencyKey, &res.Identity.TenantID, &res.Identity.APIKeyID,
			&res.Identity.App, &res.Identity.Environment, &res.Identity.Partner, &res.Model, &res.EndpointID} {
			*p = r.str()
		}
		if _, ok := shardOf(res.ID); !ok && r.err == nil {
			r.fail("bad reservation id")
		}
		class := r.varint()
		if class < 0 || class > int64(ClassBatch) {
			r.fail("bad workload class")
		}
		res.Identity.Class = WorkloadClass(class)
		res.Estimate, res.Demand = r.demand(), r.demand()
		created := r.varint()
		se.expires = r.varint()
		res.Created, res.Expires = time.Unix(0, created).UTC(), time.Unix(0, se.expires).UTC()
		for m := r.count(1 + 8 + 1); m > 0 && r.err == nil; m-- {
			i := r.count(0)
			c := snapCharge{amount: r.float(), epoch: r.varint()}
			if i >= len(names) || c.amount < 0 {
				r.fail("bad charge")
				break
			}
			c.bucket = names[i]
			se.charges = append(se.charges, c)
		}
		s.entries = append(s.entries, se)
	}
	for n := r.count(2 + 24 + 1); n > 0 && r.err == nil; n-- {
		c := snapCorr{key: corrKey{model: r.str(), route: r.str()}, in: r.float(), out: r.float(), us: r.float(), n: r.varint()}
		if !(c.in > 0 && c.out > 0 && c.us > 0) || c.n < 0 {
			r.fail("bad correction")
		}
		s.corr = append(s.corr, c)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// Restore loads a snapshot taken by Snapshot, as of now, into a broker built
// from the current configuration; it is meant for a new owner right after
// New. Bucket levels are restored by bucket id (clamped to today's limits;
// buckets no longer configured are skipped, learned ones are recreated),
// then refill from the snapshot's times on their next use, as the provider's
// did meanwhile. Reservations are added with their original ids, so edges
// reconcile them here; charges on buckets that no longer exist are dropped;
// those already expired at now are expired at once; open reservations the
// broker held before are dropped. Correction factors and route pauses are
// restored. A snapshot that fails to decode changes nothing. After an
// unclean stop of the snapshot's owner, call SetConservative(LearningUntil)
// afterwards (see learning mode).
func (b *Broker) Restore(blob []byte, now time.Time) error {
	s, err := decodeSnapshot(blob)
	if err != nil {
		return err
	}
	b.restore(s, now.UnixNano())
	b.expire(now.UnixNano())
	return nil
}

func (b *Broker) restore(s *snapshot, now int64) {
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	old := b.tab.Load()
	bs := old.buckets
	for _, sb := range s.buckets {
		if sb.source == SourceLearned && old.byID[sb.id] == nil {
			bs = append(bs[:len(bs):len(bs)], newBucket(sb.learned, b.idx.Add(1), now))
		}
	}
	routes := make([]Route, 0, len(old.routeDefs)+len(s.routes))
	for _, r := range old.routeDefs {
		routes = append(routes, r.Route)
	}
	var added []string
	for _, sr := range s.routes {
		if old.routes[sr.endpoint] == nil && sr.dynamic {
			routes = append(routes, Route{EndpointID: sr.endpoint})
			added = append(added, sr.endpoint)
		}
	}
	t := buildTable(bs, sortRoutes(routes), old)
	for i := range t.routeDefs {
		for _, a := range added {
			if t.routeDefs[i].EndpointID == a {
				t.routeDefs[i].dynamic = true
			}
		}
	}
	b.tab.Store(t)

	for i := range b.shards {
		b.shards[i].mu.Lock()
	}
	defer func() {
		for i := range b.shards {
			b.shards[i].mu.Unlock()
		}
	}()
	// The snapshot replaces the open reservations: a replica that owned the
	// broker before may still hold ones another owner has settled since.
	for i := range b.shards {
		sh := &b.shards[i]
		for _, e := range sh.byID {
			sh.remove(e)
		}
	}
	b.granted.Store(0)
	b.prevGranted.Store(s.granted)
	b.prevLearn.Store(s.learn)
	for _, sb := range s.buckets {
		bk := t.byID[sb.id]
		if bk == nil {
			continue
		}
		bk.mu.Lock()
		bk.level, bk.prev, bk.last, bk.epoch = sb.level, sb.prev, sb.last, sb.epoch
		if bk.rule != RuleRamp {
			bk.level = math.Min(bk.level, bk.p.max())
		}
		bk.mu.Unlock()
	}
	for _, sr := range s.routes {
		rt := t.routes[sr.endpoint]
		if rt == nil {
			continue
		}
		if sr.until > rt.pause.until.Load() {
			rt.pause.until.Store(sr.until)
			rt.pause.reason.Store(sr.reason)
		}
		rt.pause.streak.Store(sr.streak)
	}
	for _, se := range s.entries {
		si, _ := shardOf(se.res.ID)
		sh := &b.shards[si]
		if sh.byID[se.res.ID] != nil {
			continue
		}
		e := &entry{res: se.res, expires: se.expires, ttl: b.ttlOf(se.res.Created.UnixNano(), se.expires)}
		for _, c := range se.charges {
			bk := t.byID[c.bucket]
			if bk == nil {
				continue
			}
			e.recs = append(e.recs, charge{b: bk, amount: c.amount, epoch: c.epoch})
			e.res.Charges = append(e.res.Charges, Charge{BucketID: bk.id, Scope: bk.scope, Unit: bk.unit, Amount: c.amount})
		}
		if e.res.IdempotencyKey != "" {
			e.idem = idemKey{tenant: e.res.Identity.TenantID, key: e.res.IdempotencyKey}
			if e.idem.shard() != si {
				e.idem = idemKey{} // not where a retry would look; keep it reconcilable only
			}
		}
		sh.insert(e)
	}
	for _, c := range s.corr {
		o := &b.opts.Correction
		nc := newCorrection()
		nc.in.Store(math.Float64bits(clamp(c.in, o.Min, o.Max)))
		nc.out.Store(math.Float64bits(clamp(c.out, o.Min, o.Max)))
		nc.usd.Store(math.Float64bits(clamp(c.us, o.Min, o.Max)))
		nc.n.Store(c.n)
		b.corr.Store(c.key, nc)
	}
}
