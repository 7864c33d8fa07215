package broker

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

// Errors of [Broker.Restore], matched with errors.Is.
var (
	// ErrSnapshotVersion is returned for an empty value: not a broker
	// snapshot at all.
	ErrSnapshotVersion = errors.New("not a broker snapshot")
	// ErrSnapshotCorrupt is returned for a snapshot that does not decode or
	// holds impossible values.
	ErrSnapshotCorrupt = errors.New("corrupt broker snapshot")
)

// Snapshot returns the broker's state: bucket levels (and learned buckets'
// limits), route pauses, open reservations, correction factors and the
// queued requests that have an idempotency key, as a protobuf
// switchboard.state.v1.BrokerSnapshot (proto/switchboard/state/v1/
// state.proto), encoded deterministically.
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

	names, order := bucketNames(bst, entries)
	msg := &statev1.BrokerSnapshot{
		TakenUnixNano: b.nowNS(),
		// For learning mode after a failover: the longest TTL granted since
		// New or Restore, and when this owner's learning mode ends.
		GrantedTtlNano:        b.granted.Load(),
		LearningUntilUnixNano: b.consUntil.Load(),
		BucketIds:             make([]string, len(order)),
	}
	for i, bk := range order {
		msg.BucketIds[i] = safe(bk.id)
	}
	msg.Buckets = encodeBucketStates(bst)
	msg.Routes = encodeRoutes(t)
	msg.Corrections = b.encodeCorrections()
	// What the snapshot takes but for the open reservations and the queue:
	// the room left for reservations (entryRoom) is what remains of the
	// limit. Buckets, routes and corrections follow the catalog.
	b.baseBytes.Store(int64(proto.Size(msg)))
	msg.Reservations = encodeEntries(entries, expires, names)
	msg.Queue = encodeQueue(sq)
	w, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		// Unreachable: every string is valid UTF-8 (safe).
		panic("broker: encode snapshot: " + err.Error())
	}
	return w
}

// safe returns s as a protobuf string must be, valid UTF-8. The strings of
// requests are refused otherwise (checkFields) and the catalog's are UTF-8,
// so it returns s unchanged.
func safe(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

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

func encodeBucketStates(bst []bucketState) []*statev1.BrokerBucket {
	out := make([]*statev1.BrokerBucket, len(bst))
	for i, s := range bst {
		pb := &statev1.BrokerBucket{
			Source: uint32(s.bk.source), Level: s.level, Prev: s.prev, LastUnixNano: s.last, Epoch: s.epoch,
		}
		if s.bk.source == SourceLearned {
			pb.Learned = &statev1.BrokerLearnedBucket{
				Scope: uint32(s.bk.scope), Unit: uint32(s.bk.unit), Window: uint32(s.bk.window),
				Key: safe(s.bk.key), Capacity: s.p.capacity,
			}
		}
		out[i] = pb
	}
	return out
}

func encodeRoutes(t *table) []*statev1.BrokerRoute {
	out := make([]*statev1.BrokerRoute, len(t.routeDefs))
	for i, r := range t.routeDefs {
		rt := t.routes[r.EndpointID]
		out[i] = &statev1.BrokerRoute{
			EndpointId: safe(r.EndpointID), Dynamic: r.dynamic, PausedUntilUnixNano: rt.pause.until.Load(),
			PauseReason: rt.pause.reason.Load(), PauseStreak: rt.pause.streak.Load(),
		}
	}
	return out
}

func encodeIdentity(id Identity) *statev1.BrokerIdentity {
	return &statev1.BrokerIdentity{
		TenantId: safe(id.TenantID), ApiKeyId: safe(id.APIKeyID), App: safe(id.App),
		Environment: safe(id.Environment), Partner: safe(id.Partner), Class: int32(id.Class),
	}
}

func encodeDemand(d Demand) *statev1.BrokerDemand {
	return &statev1.BrokerDemand{InputTokens: d.InputTokens, OutputTokens: d.OutputTokens, Usd: d.USD, Requests: d.Requests}
}

func encodeEntries(entries []*entry, expires []int64, names map[*bucket]int) []*statev1.BrokerReservation {
	out := make([]*statev1.BrokerReservation, len(entries))
	for ei, e := range entries {
		r := &e.res
		pr := &statev1.BrokerReservation{
			Id: safe(r.ID), RequestId: safe(r.RequestID), IdempotencyKey: safe(r.IdempotencyKey),
			Identity: encodeIdentity(r.Identity), Model: safe(r.Model), EndpointId: safe(r.EndpointID),
			Estimate: encodeDemand(r.Estimate), Demand: encodeDemand(r.Demand),
			CreatedUnixNano: r.Created.UnixNano(), ExpiresUnixNano: expires[ei],
			Charges: make([]*statev1.BrokerCharge, len(e.recs)),
		}
		for i, c := range e.recs {
			pr.Charges[i] = &statev1.BrokerCharge{Bucket: uint32(names[c.b]), Amount: c.amount, Epoch: c.epoch}
		}
		out[ei] = pr
	}
	return out
}

func (b *Broker) encodeCorrections() []*statev1.BrokerCorrection {
	var out []*statev1.BrokerCorrection
	b.corr.Range(func(k, v any) bool {
		key, c := k.(corrKey), v.(*correction)
		out = append(out, &statev1.BrokerCorrection{
			Model: safe(key.model), Route: safe(key.route),
			Input: load(&c.in), Output: load(&c.out), Usd: load(&c.usd), Count: c.n.Load(),
		})
		return true
	})
	return out
}
