package stats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// SnapshotVersion is the format version written as the first byte of every
// blob; [Store.Restore] refuses any other with [ErrVersion].
const SnapshotVersion = 2

// Errors of [Store.Restore], matched with errors.Is.
var (
	// ErrVersion is returned for a blob written in a format this build does
	// not know (a newer decider, or not a stats blob at all).
	ErrVersion = errors.New("unknown stats snapshot version")
	// ErrCorrupt is returned for a blob that is truncated, fails its
	// checksum or holds impossible values.
	ErrCorrupt = errors.New("corrupt stats snapshot")
)

// castagnoli is CRC-32C, the checksum etcd and most storage formats use;
// hardware-accelerated on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Bytes per sample at least: a one-byte varint time, 8-byte values and a
// one-byte reporter. Used to refuse a count that the rest of the blob cannot
// hold before allocating.
const (
	minSampleBytes = 1 + 8 + 1
	minRatioBytes  = 1 + 8 + 8 + 1
)

// Snapshot returns the state as one blob per model id (the key; the caller
// adds its prefix), holding the model's output series and every series of the
// model's endpoints. Only samples still inside the window are written. Each
// series is copied under its own lock, so a snapshot taken during traffic is
// consistent per series, not across series; that is enough for statistics
// that a second of traffic changes anyway.
func (s *Store) Snapshot() map[string][]byte {
	cutoff := s.now().UnixNano() - s.p.window
	type shard struct {
		model     *Model
		endpoints []*Endpoint
	}
	shards := make(map[string]*shard)
	get := func(model string) *shard {
		sh, ok := shards[model]
		if !ok {
			sh = &shard{}
			shards[model] = sh
		}
		return sh
	}
	s.endpoints.Range(func(_, v any) bool {
		e := v.(*Endpoint)
		sh := get(ModelOf(e.id))
		sh.endpoints = append(sh.endpoints, e)
		return true
	})
	s.models.Range(func(_, v any) bool {
		m := v.(*Model)
		get(m.id).model = m
		return true
	})
	out := make(map[string][]byte, len(shards))
	for model, sh := range shards {
		// Sorted so that equal states encode to equal bytes (a caller can
		// skip writing an unchanged shard).
		slices.SortFunc(sh.endpoints, func(a, b *Endpoint) int { return strings.Compare(a.id, b.id) })
		out[model] = encodeShard(&s.srcs, model, sh.model, sh.endpoints, cutoff)
	}
	return out
}

// encodeShard writes one blob; see the package documentation for the layout.
func encodeShard(srcs *sources, model string, m *Model, eps []*Endpoint, cutoff int64) []byte {
	tab := newSrcTable()
	body := make([]byte, 0, 64+len(eps)*256)
	if m != nil {
		body = m.output.appendTo(body, cutoff, tab)
	} else {
		body = binary.AppendUvarint(body, 0)
	}
	body = binary.AppendUvarint(body, uint64(len(eps)))
	for _, e := range eps {
		body = appendString(body, e.id)
		for i := range e.ttft {
			body = e.ttft[i].appendTo(body, cutoff, tab)
		}
		body = e.throughput.appendTo(body, cutoff, tab)
		body = e.cache.appendTo(body, cutoff, tab)
	}
	b := make([]byte, 0, 32+len(model)+len(body))
	b = append(b, SnapshotVersion)
	b = binary.AppendUvarint(b, tokens.NumBuckets)
	b = appendString(b, model)
	// The reporters the samples name, in order of first use, so that an
	// unchanged state encodes to the same bytes.
	b = binary.AppendUvarint(b, uint64(len(tab.order)))
	for _, src := range tab.order {
		b = appendString(b, srcs.name(src))
	}
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// srcTable numbers the reporters of one blob.
type srcTable struct {
	local map[uint32]uint64 // store index → blob index
	order []uint32          // by blob index
}

func newSrcTable() *srcTable { return &srcTable{local: map[uint32]uint64{}} }

func (t *srcTable) index(src uint32) uint64 {
	if i, ok := t.local[src]; ok {
		return i
	}
	i := uint64(len(t.order))
	t.local[src] = i
	t.order = append(t.order, src)
	return i
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendTo writes the samples inside the window in their stored order
// (by value). Times are offsets from the series' newest sample, a few bytes
// instead of eight; a base taken from the samples rather than from the clock
// keeps an unchanged series encoding to the same bytes, so that the caller
// can skip rewriting a shard that did not change.
func (m *medianSeries) appendTo(b []byte, cutoff int64, tab *srcTable) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return appendSamples(b, m.samples, cutoff, func(x sample) int64 { return x.at }, func(b []byte, x sample) []byte {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.v))
		return binary.AppendUvarint(b, tab.index(x.src))
	})
}

func (r *ratioSeries) appendTo(b []byte, cutoff int64, tab *srcTable) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return appendSamples(b, r.samples, cutoff, func(x ratioSample) int64 { return x.at }, func(b []byte, x ratioSample) []byte {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.num))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.den))
		return binary.AppendUvarint(b, tab.index(x.src))
	})
}

// appendSamples writes the count of samples newer than cutoff, the newest
// one's time as the base, then each such sample as its time offset and
// values; both series kinds share the layout, only their values differ.
func appendSamples[S any](b []byte, samples []S, cutoff int64, at func(S) int64, values func([]byte, S) []byte) []byte {
	n, base := 0, int64(math.MinInt64)
	for _, x := range samples {
		if t := at(x); t > cutoff {
			n++
			base = max(base, t)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	if n == 0 {
		return b
	}
	b = binary.AppendVarint(b, base)
	for _, x := range samples {
		if t := at(x); t > cutoff {
			b = binary.AppendVarint(b, t-base)
			b = values(b, x)
		}
	}
	return b
}

// Restore loads blobs written by [Store.Snapshot]. Every series present in a
// valid blob replaces the one in memory; series the blobs do not mention are
// left alone. A blob that cannot be decoded is skipped whole (never half
// loaded) and reported in the returned error, which joins one error per bad
// key, each wrapping [ErrVersion] or [ErrCorrupt]; the valid blobs are loaded
// regardless. A series holding more samples than MaxSamples keeps the newest.
func (s *Store) Restore(shards map[string][]byte) error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(shards)) {
		d, err := decodeShard(shards[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("restore stats shard %q: %w", key, err))
			continue
		}
		s.load(d)
	}
	return errors.Join(errs...)
}

// decodedShard is a blob decoded and validated, before it touches the store.
type decodedShard struct {
	model     string
	sources   []string // the blob's reporters; samples' src index them
	output    []sample
	endpoints []decodedEndpoint
}

type decodedEndpoint struct {
	id         string
	ttft       [tokens.NumBuckets][]sample
	throughput []sample
	cache      []ratioSample
}

// load installs a decoded shard.
func (s *Store) load(d *decodedShard) {
	now := s.now().UnixNano()
	ids := make([]uint32, len(d.sources))
	for i, name := range d.sources {
		ids[i] = s.srcs.id(name)
	}
	d.remap(ids)
	if len(d.output) > 0 {
		s.Model(d.model).output.replace(&s.p, d.output, now, false)
	} else if v, ok := s.models.Load(d.model); ok {
		v.(*Model).output.replace(&s.p, nil, now, false)
	}
	for _, de := range d.endpoints {
		e := s.Endpoint(de.id)
		for i := range e.ttft {
			e.ttft[i].replace(&s.p, de.ttft[i], now, true)
		}
		e.throughput.replace(&s.p, de.throughput, now, false)
		e.cache.replace(&s.p, de.cache, now)
	}
}

// replace swaps the series' samples for xs and republishes. Inserting one by
// one keeps the value order and the MaxSamples bound whatever the blob holds.
func (m *medianSeries) replace(p *params, xs []sample, now int64, outliers bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.samples)
	m.samples = m.samples[:0]
	if len(xs) == 0 {
		m.samples = nil // give the buffer back (Forget, an emptied series)
	}
	for _, x := range xs {
		m.insert(p, x)
	}
	m.recompute(p, now, outliers)
}

func (r *ratioSeries) replace(p *params, xs []ratioSample, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.samples)
	r.samples = r.samples[:0]
	if len(xs) == 0 {
		r.samples = nil // give the buffer back (Forget, an emptied series)
	}
	for _, x := range xs {
		r.insert(p, x)
	}
	r.recompute(p, now)
}

// decodeShard parses and validates one blob without touching the store.
func decodeShard(blob []byte) (*decodedShard, error) {
	if len(blob) == 0 {
		return nil, fmt.Errorf("%w: empty blob", ErrCorrupt)
	}
	// The version first: a future format may move or drop the checksum.
	if blob[0] != SnapshotVersion {
		return nil, fmt.Errorf("%w %d", ErrVersion, blob[0])
	}
	if len(blob) < 1+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(blob))
	}
	body, sum := blob[:len(blob)-4], binary.LittleEndian.Uint32(blob[len(blob)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r := reader{b: body[1:]}
	if nb := r.uvarint(); r.err == nil && nb != tokens.NumBuckets {
		return nil, fmt.Errorf("%w: %d size buckets, this build has %d", ErrVersion, nb, tokens.NumBuckets)
	}
	d := &decodedShard{model: r.str()}
	ns := r.count(1)
	for range ns {
		d.sources = append(d.sources, r.str())
	}
	r.nsrc = uint64(len(d.sources))
	d.output = r.samples(validCount)
	n := r.count(1 + tokens.NumBuckets + 2) // an endpoint takes at least its id length and six counts
	if r.err == nil {
		d.endpoints = make([]decodedEndpoint, 0, n)
	}
	for range n {
		if r.err != nil {
			break
		}
		e := decodedEndpoint{id: r.str()}
		if r.err == nil && (e.id == "" || ModelOf(e.id) != d.model) {
			r.fail("endpoint %q does not belong to model %q", e.id, d.model)
		}
		for i := range e.ttft {
			e.ttft[i] = r.samples(validDuration)
		}
		e.throughput = r.samples(validRate)
		e.cache = r.ratios()
		d.endpoints = append(d.endpoints, e)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return d, nil
}

// Value checks per series, so that a blob from a buggy writer cannot publish
// a negative TTFT or a rate above 1.
func validDuration(v float64) bool { return v >= 0 && v <= math.MaxInt64 }
func validRate(v float64) bool     { return v > 0 && !math.IsInf(v, 1) }
func validCount(v float64) bool    { return v >= 0 && v <= math.MaxInt64 }

// reader decodes a blob; the first error sticks and later reads return zero.
type reader struct {
	b    []byte
	err  error
	nsrc uint64 // reporters in the blob's table
}

// src reads a sample's reporter, an index into the blob's table.
func (r *reader) src() uint32 {
	i := r.uvarint()
	if r.err == nil && i >= r.nsrc {
		r.fail("reporter %d of %d", i, r.nsrc)
	}
	return uint32(i)
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) float() float64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// count reads an element count and refuses one the remaining bytes cannot
// hold at minBytes each, so a damaged count cannot trigger a huge allocation.
func (r *reader) count(minBytes int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/minBytes) {
		r.fail("count %d exceeds the %d remaining bytes", n, len(r.b))
	}
	if r.err != nil {
		return 0
	}
	return int(n)
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

// at reads a sample time: an offset from base, checked for overflow.
func (r *reader) at(base int64) int64 {
	off := r.varint()
	t := base + off
	if r.err == nil && (off > 0 && t < base || off < 0 && t > base) {
		r.fail("time out of range")
	}
	return t
}

func (r *reader) samples(valid func(float64) bool) []sample {
	n := r.count(minSampleBytes)
	if n == 0 {
		return nil
	}
	base := r.varint()
	out := make([]sample, 0, n)
	for range n {
		x := sample{at: r.at(base), v: r.float(), src: r.src()}
		if r.err != nil {
			return nil
		}
		if !valid(x.v) {
			r.fail("invalid sample value %v", x.v)
			return nil
		}
		out = append(out, x)
	}
	return out
}

func (r *reader) ratios() []ratioSample {
	n := r.count(minRatioBytes)
	if n == 0 {
		return nil
	}
	base := r.varint()
	out := make([]ratioSample, 0, n)
	for range n {
		x := ratioSample{at: r.at(base), num: r.float(), den: r.float(), src: r.src()}
		if r.err != nil {
			return nil
		}
		if !(x.den > 0) || math.IsInf(x.den, 1) || !(x.num >= 0) || x.num > x.den {
			r.fail("invalid cache sample %v/%v", x.num, x.den)
			return nil
		}
		out = append(out, x)
	}
	return out
}

// remap turns the samples' blob indices into the store's.
func (d *decodedShard) remap(ids []uint32) {
	med := func(xs []sample) {
		for i := range xs {
			xs[i].src = ids[xs[i].src]
		}
	}
	med(d.output)
	for ei := range d.endpoints {
		e := &d.endpoints[ei]
		for i := range e.ttft {
			med(e.ttft[i])
		}
		med(e.throughput)
		for i := range e.cache {
			e.cache[i].src = ids[e.cache[i].src]
		}
	}
}
