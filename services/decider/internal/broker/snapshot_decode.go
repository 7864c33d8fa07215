package broker

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

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
	granted int64 // longest TTL granted, ns
	learn   int64 // the owner's learning mode ends, Unix ns
	buckets []snapBucket
	routes  []snapRoute
	entries []snapEntry
	corr    []snapCorr
	queue   snapQueue
}

func decodeSnapshot(blob []byte) (*snapshot, error) {
	if len(blob) < len(snapshotMagic)+1+4 || string(blob[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no broker snapshot magic", ErrSnapshotVersion)
	}
	v := blob[len(snapshotMagic)]
	if v != SnapshotVersion {
		return nil, fmt.Errorf("%w: %d", ErrSnapshotVersion, v)
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	r := &reader{b: body[len(snapshotMagic)+1:]}
	s := &snapshot{}
	r.varint() // taken at, for humans and future use
	s.granted, s.learn = r.varint(), r.varint()
	if s.granted < 0 {
		r.fail("bad granted TTL")
	}
	var names []string
	for n := r.count(1); n > 0 && r.err == nil; n-- {
		names = append(names, r.str())
	}
	s.buckets = r.buckets(names)
	for n := r.count(1 + 1 + 3); n > 0 && r.err == nil; n-- {
		s.routes = append(s.routes, r.route())
	}
	for n := r.count(10 + 1 + 2*11 + 3); n > 0 && r.err == nil; n-- {
		s.entries = append(s.entries, r.entry(names))
	}
	for n := r.count(2 + 24 + 1); n > 0 && r.err == nil; n-- {
		c := snapCorr{key: corrKey{model: r.str(), route: r.str()}, in: r.float(), out: r.float(), us: r.float(), n: r.varint()}
		if !(c.in > 0 && c.out > 0 && c.us > 0) || c.n < 0 {
			r.fail("bad correction")
		}
		s.corr = append(s.corr, c)
	}
	s.queue = r.queue()
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// buckets reads the bucket states, the first of names in order.
func (r *reader) buckets(names []string) []snapBucket {
	var out []snapBucket
	states := r.count(1 + 8 + 8 + 1 + 1)
	if states > len(names) {
		r.fail("more bucket states than buckets")
	}
	for i := 0; i < states && r.err == nil; i++ {
		sb := snapBucket{id: names[i], source: Source(r.byte1())}
		switch sb.source {
		case SourceConfigured:
		case SourceLearned:
			sb.learned = r.learned(sb.id)
		default:
			r.fail("bad bucket source")
		}
		sb.level, sb.prev = r.float(), r.float()
		sb.last, sb.epoch = r.varint(), r.varint()
		out = append(out, sb)
	}
	return out
}

// learned reads the definition of the learned bucket named id.
func (r *reader) learned(id string) def {
	d := def{scope: Scope(r.byte1()), unit: Unit(r.byte1()), window: Window(r.byte1()), rule: RuleTokenBucket, source: SourceLearned}
	d.key = r.str()
	d.capacity = r.float()
	d.period = int64(d.window.Duration())
	if d.scope < ScopeAPIKey || d.scope > ScopeModelRoute || d.unit < UnitRequests || d.unit >= UnitConcurrentRequests ||
		d.window < WindowSecond || d.window > WindowHour || !(d.capacity > 0) {
		r.fail("bad learned bucket")
	}
	d.id = bucketID(d.scope, d.key, d.unit, d.window, d.rule, d.source)
	if d.id != id {
		r.fail("learned bucket id mismatch")
	}
	return d
}

// route reads a route and its pause.
func (r *reader) route() snapRoute {
	sr := snapRoute{endpoint: r.str(), dynamic: r.byte1() != 0, until: r.varint()}
	reason, streak := r.varint(), r.varint()
	if reason < 0 || reason > int64(ReasonDeadline) || streak < 0 || streak > math.MaxInt32 {
		r.fail("bad route pause")
	}
	sr.reason, sr.streak = int32(reason), int32(streak)
	return sr
}

// entry reads an open reservation, its charges naming buckets by their
// index in names.
func (r *reader) entry(names []string) snapEntry {
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
	return se
}
