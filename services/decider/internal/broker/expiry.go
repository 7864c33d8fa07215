package broker

import "time"

// releaseExpired releases an expired entry: its concurrency always, the rest
// only where the bucket refunds on expiry (refunds); its charges are kept as
// a tombstone for a late reconciliation. The entry's shard lock is held.
func (b *Broker) releaseExpired(sh *shard, e *entry, now int64) {
	b.remember(sh, e, now, true)
	for _, c := range e.recs {
		if c.b.rule != RuleConcurrency && !b.refunds(c.b) {
			continue
		}
		c.b.mu.Lock()
		c.b.advance(now)
		c.b.settle(c.amount, c.epoch)
		c.b.mu.Unlock()
	}
}

// Expire releases every reservation whose TTL has passed at now and returns
// how many. The decider calls it from a ticker; Reserve and Reconcile also
// expire lazily. It costs O(shards + expired), not O(open reservations):
// each shard keeps its reservations in a min-heap by expiry. It also
// forgets the retry state of logical requests past its TTL. When requests
// wait in the admission queues it then runs a dispatch pass (see
// [Broker.Pump]): what expiry released may admit them, and their
// deadlines are enforced even without the dispatch timer.
func (b *Broker) Expire(now time.Time) int {
	b.expireRetries(now.UnixNano())
	n := b.expire(now.UnixNano())
	if b.q.n.Load() > 0 {
		b.pump(now.UnixNano(), false)
	}
	return n
}

func (b *Broker) expire(now int64) int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		if sh.next.Load() > now && now-sh.firstClosed.Load() < int64(b.opts.Tombstone) {
			continue
		}
		sh.mu.Lock()
		for len(sh.heap) > 0 && sh.heap[0].expires <= now {
			e := sh.heap[0]
			sh.remove(e)
			b.releaseExpired(sh, e, now)
			n++
		}
		b.pruneClosed(sh, now)
		sh.mu.Unlock()
	}
	return n
}

func (b *Broker) expiryDue(now int64) bool {
	for i := range b.shards {
		if b.shards[i].next.Load() <= now {
			return true
		}
	}
	return false
}

// refunds reports whether an expired reservation's charge on bk is given
// back: the bucket's own rule (its limit's refund_on_expiry), else
// Options.RefundOnExpiry.
func (b *Broker) refunds(bk *bucket) bool {
	bk.mu.Lock() // a catalog change may replace bk.p
	r := bk.p.refund
	bk.mu.Unlock()
	switch r {
	case refundYes:
		return true
	case refundNo:
		return false
	}
	return b.opts.RefundOnExpiry
}
