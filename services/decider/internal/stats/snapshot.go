package stats

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

// Errors of [Store.Restore], matched with errors.Is.
var (
	// ErrVersion is returned for a shard written by a build with another
	// number of prompt-size buckets.
	ErrVersion = errors.New("stats snapshot of another version")
	// ErrCorrupt is returned for a shard that does not decode or holds
	// impossible values.
	ErrCorrupt = errors.New("corrupt stats snapshot")
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
		if b := encodeShard(&s.srcs, &s.regs, model, sh.model, sh.endpoints, cutoff); b != nil {
			out[model] = b
		}
	}
	return out
}

// encodeShard writes one shard, a statev1.StatsShard.
func encodeShard(srcs *sources, regs *regions, model string, m *Model, eps []*Endpoint, cutoff int64) []byte {
	tab := newSrcTable()
	msg := &statev1.StatsShard{SizeBuckets: tokens.NumBuckets, Model: utf8Safe(model)}
	if m != nil {
		msg.Output = m.output.encode(cutoff, tab)
	}
	msg.Endpoints = make([]*statev1.StatsEndpoint, 0, len(eps))
	for _, e := range eps {
		pe := &statev1.StatsEndpoint{Id: utf8Safe(e.id), Ttft: make([]*statev1.StatsSeries, len(e.ttft))}
		for i := range e.ttft {
			pe.Ttft[i] = e.ttft[i].encode(cutoff, tab)
		}
		pe.Throughput = e.throughput.encode(cutoff, tab)
		pe.Cache = e.cache.encode(cutoff, tab)
		pe.Regions = encodeRegions(regs, e, cutoff, tab)
		msg.Endpoints = append(msg.Endpoints, pe)
	}
	// The reporters the samples name, in order of first use, so that an
	// unchanged state encodes to the same bytes.
	msg.Reporters = make([]string, len(tab.order))
	for i, src := range tab.order {
		msg.Reporters[i] = utf8Safe(srcs.name(src))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil // unreachable: every string is valid UTF-8 (utf8Safe)
	}
	if len(b) > maxShardBytes {
		// Many endpoints, each with many regions' full series: the
		// regional figures are dropped from the save rather than the
		// shard failing etcd's value limit; the global ones are kept, and
		// the regions learn theirs again from traffic.
		for _, pe := range msg.Endpoints {
			pe.Regions = nil
		}
		if b, err = (proto.MarshalOptions{Deterministic: true}).Marshal(msg); err != nil {
			return nil
		}
	}
	return b
}

// maxShardBytes bounds a shard with its regional series, below etcd's
// 1.5 MiB value limit with room for the key and the request.
const maxShardBytes = 1 << 20

// encodeRegions writes e's regional TTFT series that hold samples, by
// region name rather than by the store's numbering, so that equal states
// encode to equal bytes (reporters too are numbered in that order).
func encodeRegions(regs *regions, e *Endpoint, cutoff int64, tab *srcTable) []*statev1.StatsRegion {
	type named struct {
		name string
		rt   *regionalTTFT
	}
	var rs []named
	e.eachRegional(func(r Region, rt *regionalTTFT) { rs = append(rs, named{regs.name(r), rt}) })
	slices.SortFunc(rs, func(a, b named) int { return strings.Compare(a.name, b.name) })
	var out []*statev1.StatsRegion
	for _, x := range rs {
		pr := &statev1.StatsRegion{Region: utf8Safe(x.name), Ttft: make([]*statev1.StatsSeries, len(x.rt))}
		n := 0
		for i := range x.rt {
			pr.Ttft[i] = x.rt[i].encode(cutoff, tab)
			n += len(pr.Ttft[i].GetValues())
		}
		if n > 0 { // a region whose samples all left the window is not written
			out = append(out, pr)
		}
	}
	return out
}

// utf8Safe returns s with any invalid UTF-8 replaced, as a protobuf string
// must be; ids of the catalog and reporter names never need it, and the
// replacement keeps an endpoint id's model (the '/' is never replaced).
func utf8Safe(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// srcTable numbers the reporters of one blob.
type srcTable struct {
	local map[uint32]uint32 // store index → blob index
	order []uint32          // by blob index
}

func newSrcTable() *srcTable { return &srcTable{local: map[uint32]uint32{}} }

func (t *srcTable) index(src uint32) uint32 {
	if i, ok := t.local[src]; ok {
		return i
	}
	i := uint32(len(t.order))
	t.local[src] = i
	t.order = append(t.order, src)
	return i
}

// encode returns the samples inside the window in their stored order
// (by value). Times are offsets from the series' newest sample, a few bytes
// instead of eight; a base taken from the samples rather than from the clock
// keeps an unchanged series encoding to the same bytes, so that the caller
// can skip rewriting a shard that did not change.
func (m *medianSeries) encode(cutoff int64, tab *srcTable) *statev1.StatsSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &statev1.StatsSeries{}
	base, n := newest(m.samples, cutoff, func(x sample) int64 { return x.at })
	if n == 0 {
		return out
	}
	out.NewestUnixNano = base
	out.OffsetsNano = make([]int64, 0, n)
	out.Values = make([]float64, 0, n)
	out.Reporters = make([]uint32, 0, n)
	for _, x := range m.samples {
		if x.at > cutoff {
			out.OffsetsNano = append(out.OffsetsNano, x.at-base)
			out.Values = append(out.Values, x.v)
			out.Reporters = append(out.Reporters, tab.index(x.src))
		}
	}
	return out
}

func (r *ratioSeries) encode(cutoff int64, tab *srcTable) *statev1.StatsRatioSeries {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &statev1.StatsRatioSeries{}
	base, n := newest(r.samples, cutoff, func(x ratioSample) int64 { return x.at })
	if n == 0 {
		return out
	}
	out.NewestUnixNano = base
	out.OffsetsNano = make([]int64, 0, n)
	out.Parts = make([]float64, 0, n)
	out.Wholes = make([]float64, 0, n)
	out.Reporters = make([]uint32, 0, n)
	for _, x := range r.samples {
		if x.at > cutoff {
			out.OffsetsNano = append(out.OffsetsNano, x.at-base)
			out.Parts = append(out.Parts, x.num)
			out.Wholes = append(out.Wholes, x.den)
			out.Reporters = append(out.Reporters, tab.index(x.src))
		}
	}
	return out
}

// newest returns the newest time of the samples newer than cutoff and their
// number.
func newest[S any](samples []S, cutoff int64, at func(S) int64) (base int64, n int) {
	base = math.MinInt64
	for _, x := range samples {
		if t := at(x); t > cutoff {
			n++
			base = max(base, t)
		}
	}
	return base, n
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
	regions    []decodedRegion
}

// decodedRegion is an endpoint's TTFT series of one region.
type decodedRegion struct {
	name string
	ttft [tokens.NumBuckets][]sample
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
		// A region the shard does not name has no samples left: emptied,
		// as the global series are replaced.
		named := make(map[Region]bool, len(de.regions))
		for _, dr := range de.regions {
			r := s.regs.id(dr.name)
			rt := e.regional(r, true)
			if rt == nil {
				continue // past MaxRegions: its samples count in the global series
			}
			named[r] = true
			for i := range rt {
				rt[i].replace(&s.p, dr.ttft[i], now, true)
			}
		}
		e.eachRegional(func(r Region, rt *regionalTTFT) {
			if !named[r] {
				for i := range rt {
					rt[i].replace(&s.p, nil, now, true)
				}
			}
		})
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

// decodeShard parses and validates one shard without touching the store.
func decodeShard(blob []byte) (*decodedShard, error) {
	if len(blob) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	var msg statev1.StatsShard
	if err := proto.Unmarshal(blob, &msg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if msg.GetSizeBuckets() != tokens.NumBuckets {
		return nil, fmt.Errorf("%w: %d size buckets, this build has %d", ErrVersion, msg.GetSizeBuckets(), tokens.NumBuckets)
	}
	d := &decodedShard{model: msg.GetModel(), sources: msg.GetReporters()}
	nsrc := len(d.sources)
	var err error
	if d.output, err = decodeSamples(msg.GetOutput(), nsrc, validCount); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	d.endpoints = make([]decodedEndpoint, 0, len(msg.GetEndpoints()))
	for _, pe := range msg.GetEndpoints() {
		e := decodedEndpoint{id: pe.GetId()}
		if e.id == "" || ModelOf(e.id) != d.model {
			return nil, fmt.Errorf("%w: endpoint %q does not belong to model %q", ErrCorrupt, e.id, d.model)
		}
		if len(pe.GetTtft()) != len(e.ttft) {
			return nil, fmt.Errorf("%w: endpoint %q has %d TTFT series, not %d", ErrCorrupt, e.id, len(pe.GetTtft()), len(e.ttft))
		}
		for i, ps := range pe.GetTtft() {
			if e.ttft[i], err = decodeSamples(ps, nsrc, validDuration); err != nil {
				return nil, fmt.Errorf("endpoint %q ttft: %w", e.id, err)
			}
		}
		if e.throughput, err = decodeSamples(pe.GetThroughput(), nsrc, validRate); err != nil {
			return nil, fmt.Errorf("endpoint %q throughput: %w", e.id, err)
		}
		if e.cache, err = decodeRatios(pe.GetCache(), nsrc); err != nil {
			return nil, fmt.Errorf("endpoint %q cache: %w", e.id, err)
		}
		if e.regions, err = decodeRegions(e.id, pe.GetRegions(), nsrc); err != nil {
			return nil, err
		}
		d.endpoints = append(d.endpoints, e)
	}
	return d, nil
}

// decodeRegions validates an endpoint's regional series: each region named
// once, not empty, with one series per bucket.
func decodeRegions(id string, prs []*statev1.StatsRegion, nsrc int) ([]decodedRegion, error) {
	if len(prs) == 0 {
		return nil, nil
	}
	out := make([]decodedRegion, 0, len(prs))
	seen := make(map[string]bool, len(prs))
	for _, pr := range prs {
		dr := decodedRegion{name: pr.GetRegion()}
		if dr.name == "" || seen[dr.name] {
			return nil, fmt.Errorf("%w: endpoint %q region %q empty or repeated", ErrCorrupt, id, dr.name)
		}
		seen[dr.name] = true
		if len(pr.GetTtft()) != len(dr.ttft) {
			return nil, fmt.Errorf("%w: endpoint %q region %q has %d TTFT series, not %d", ErrCorrupt, id, dr.name, len(pr.GetTtft()), len(dr.ttft))
		}
		for i, ps := range pr.GetTtft() {
			var err error
			if dr.ttft[i], err = decodeSamples(ps, nsrc, validDuration); err != nil {
				return nil, fmt.Errorf("endpoint %q region %q ttft: %w", id, dr.name, err)
			}
		}
		out = append(out, dr)
	}
	return out, nil
}

// Value checks per series, so that a shard from a buggy writer cannot publish
// a negative TTFT or a rate above 1.
func validDuration(v float64) bool { return v >= 0 && v <= math.MaxInt64 }
func validRate(v float64) bool     { return v > 0 && !math.IsInf(v, 1) }
func validCount(v float64) bool    { return v >= 0 && v <= math.MaxInt64 }

// sampleTime checks a sample's reporter index and returns its time, refusing
// an offset that overflows.
func sampleTime(base, off int64, src uint32, nsrc int) (int64, error) {
	t := base + off
	if off > 0 && t < base || off < 0 && t > base {
		return 0, fmt.Errorf("%w: time out of range", ErrCorrupt)
	}
	if int64(src) >= int64(nsrc) {
		return 0, fmt.Errorf("%w: reporter %d of %d", ErrCorrupt, src, nsrc)
	}
	return t, nil
}

// decodeSamples validates a series; nsrc is the number of the shard's
// reporters. A nil or empty series is no samples.
func decodeSamples(ps *statev1.StatsSeries, nsrc int, valid func(float64) bool) ([]sample, error) {
	n := len(ps.GetOffsetsNano())
	if len(ps.GetValues()) != n || len(ps.GetReporters()) != n {
		return nil, fmt.Errorf("%w: %d times, %d values, %d reporters", ErrCorrupt, n, len(ps.GetValues()), len(ps.GetReporters()))
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]sample, 0, n)
	for i, off := range ps.GetOffsetsNano() {
		at, err := sampleTime(ps.GetNewestUnixNano(), off, ps.GetReporters()[i], nsrc)
		if err != nil {
			return nil, err
		}
		v := ps.GetValues()[i]
		if !valid(v) {
			return nil, fmt.Errorf("%w: invalid sample value %v", ErrCorrupt, v)
		}
		out = append(out, sample{at: at, v: v, src: ps.GetReporters()[i]})
	}
	return out, nil
}

// decodeRatios is decodeSamples for a cache series.
func decodeRatios(ps *statev1.StatsRatioSeries, nsrc int) ([]ratioSample, error) {
	n := len(ps.GetOffsetsNano())
	if len(ps.GetParts()) != n || len(ps.GetWholes()) != n || len(ps.GetReporters()) != n {
		return nil, fmt.Errorf("%w: %d times, %d parts, %d wholes, %d reporters",
			ErrCorrupt, n, len(ps.GetParts()), len(ps.GetWholes()), len(ps.GetReporters()))
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]ratioSample, 0, n)
	for i, off := range ps.GetOffsetsNano() {
		at, err := sampleTime(ps.GetNewestUnixNano(), off, ps.GetReporters()[i], nsrc)
		if err != nil {
			return nil, err
		}
		x := ratioSample{at: at, num: ps.GetParts()[i], den: ps.GetWholes()[i], src: ps.GetReporters()[i]}
		if !(x.den > 0) || math.IsInf(x.den, 1) || !(x.num >= 0) || x.num > x.den {
			return nil, fmt.Errorf("%w: invalid cache sample %v/%v", ErrCorrupt, x.num, x.den)
		}
		out = append(out, x)
	}
	return out, nil
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
		for ri := range e.regions {
			for i := range e.regions[ri].ttft {
				med(e.regions[ri].ttft[i])
			}
		}
		for i := range e.cache {
			e.cache[i].src = ids[e.cache[i].src]
		}
	}
}
