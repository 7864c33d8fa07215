package broker

import (
	"math"
	"time"
)

// Restore loads a snapshot taken by Snapshot, as of now, into a broker built
// from the current configuration; it is meant for a new owner right after
// New. Bucket levels are restored by bucket id (clamped to today's limits;
// buckets no longer configured are skipped, learned ones are recreated),
// then refill from the snapshot's times on their next use, as the provider's
// did meanwhile. Reservations are added with their original ids, so edges
// reconcile them here; charges on buckets that no longer exist are dropped;
// those already expired at now are expired at once; open reservations the
// broker held before are dropped. Correction factors and route pauses are
// restored. Queued requests are restored as Broker.ReserveWait's
// re-attach window allows (Options.QueueReattach): in their order, with
// their ids, for their callers' retries. A snapshot that fails to decode
// changes nothing. After an
// unclean stop of the snapshot's owner, call SetConservative(LearningUntil)
// afterwards (see learning mode).
func (b *Broker) Restore(blob []byte, now time.Time) error {
	s, err := decodeSnapshot(blob)
	if err != nil {
		return err
	}
	b.restore(s, now.UnixNano())
	b.expire(now.UnixNano())
	b.restoreQueue(s.queue, now.UnixNano())
	return nil
}

func (b *Broker) restore(s *snapshot, now int64) {
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	t := b.restoreTable(s, now)

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
	restoreLevels(t, s)
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
		b.restoreEntry(t, &se)
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

// restoreTable installs the table the snapshot needs: today's buckets and
// routes plus its learned buckets and the routes it created for endpoints
// the configuration does not name. The table mutex is held.
func (b *Broker) restoreTable(s *snapshot, now int64) *table {
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
	return t
}

// restoreLevels sets the levels of t's buckets the snapshot knows, clamped
// to today's limits.
func restoreLevels(t *table, s *snapshot) {
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
}

// restoreEntry adds a snapshot's open reservation, its charges on buckets
// t no longer has dropped. Every shard lock is held.
func (b *Broker) restoreEntry(t *table, se *snapEntry) {
	si, _ := shardOf(se.res.ID)
	sh := &b.shards[si]
	if sh.byID[se.res.ID] != nil {
		return
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
	e.size = entrySize(e)
	b.stateBytes.Add(e.size) // restored whatever the limit: it was granted
	sh.insert(e)
}
