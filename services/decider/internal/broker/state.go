package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// DefaultMaxStateBytes is the default of Options.MaxStateBytes: 1 MiB, so
// the snapshot, the hedge budget's state (at most
// hedge.MaxStateBytes) and the transaction around them stay within etcd's
// default request limit (--max-request-bytes, 1.5 MiB).
const DefaultMaxStateBytes = 1 << 20

// maxQueueSnapBytes is the part of the state kept for queued requests: a
// snapshot carries queued requests, in their order, while they fit in it
// (see captureQueue); the rest lose only their place after a failover.
const maxQueueSnapBytes = 64 << 10

// Refusal codes of the broker's own state.
const (
	// CodeStateFull: the open reservations fill what the broker's snapshot
	// may hold; a reservation is admitted again once others end.
	CodeStateFull = "broker_full"
	// CodeNotDurable: the owner cannot save its state, so it admits
	// nothing a next owner would not know of.
	CodeNotDurable = "broker_not_durable"
)

// checkFields refuses a request whose strings exceed the limits the
// gRPC boundary applies (services/decider/internal/validate), or are not
// UTF-8 as protobuf strings are: the broker holds them in its snapshot, so
// it bounds them itself, whoever calls it.
func (r *ReserveRequest) checkFields() error {
	for _, f := range [...]struct {
		name string
		v    string
		max  int
	}{
		{"request id", r.RequestID, validate.MaxIDLen},
		{"idempotency key", r.IdempotencyKey, validate.MaxKeyLen},
		{"tenant id", r.Identity.TenantID, validate.MaxNameLen},
		{"api key id", r.Identity.APIKeyID, validate.MaxNameLen},
		{"app", r.Identity.App, validate.MaxNameLen},
		{"environment", r.Identity.Environment, validate.MaxNameLen},
		{"partner", r.Identity.Partner, validate.MaxNameLen},
		{"model", r.Model, validate.MaxModelLen},
		{"endpoint id", r.EndpointID, validate.MaxModelLen},
	} {
		if len(f.v) > f.max {
			return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, f.name, f.max)
		}
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, f.name)
		}
	}
	return nil
}

// Bounds of what fields take in a snapshot's protobuf encoding: every tag
// takes one byte (field numbers below 16), a number its longest varint (a
// negative int32 or int64 takes ten bytes), a double eight.
const (
	intField    = 1 + binary.MaxVarintLen64
	dblField    = 1 + 8
	demandField = 1 + 1 + 3*intField + dblField // its length takes one byte
	chargeField = 1 + 1 + (1 + binary.MaxVarintLen32) + dblField + intField
)

// strField is what a string field of n bytes takes at most.
func strField(n int) int64 { return 1 + int64(uvarintLen(uint64(n))+n) }

// msgField is what a message field whose content takes n bytes takes.
func msgField(n int64) int64 { return 1 + int64(uvarintLen(uint64(n))) + n }

func uvarintLen(v uint64) int {
	var a [binary.MaxVarintLen64]byte
	return binary.PutUvarint(a[:], v)
}

// identitySize bounds what id takes in a snapshot.
func identitySize(id *Identity) int64 {
	n := int64(intField) // the class
	for _, s := range [...]string{id.TenantID, id.APIKeyID, id.App, id.Environment, id.Partner} {
		n += strField(len(s))
	}
	return msgField(n)
}

// entrySize bounds what the snapshot takes for e: its strings exactly,
// every number at its longest.
func entrySize(e *entry) int64 {
	r := &e.res
	return reservationSize(identitySize(&r.Identity), len(e.recs), len(r.ID), len(r.RequestID), len(r.IdempotencyKey),
		len(r.Model), len(r.EndpointID))
}

// reservationSize is what a reservation takes whose identity takes id
// bytes, with n charges and strings of the lengths given.
func reservationSize(id int64, n int, strs ...int) int64 {
	c := id + 2*demandField + 2*intField + int64(n)*chargeField // created, expires
	for _, l := range strs {
		c += strField(l)
	}
	return msgField(c)
}

// MaxEntryBytes is the most one open reservation takes in a snapshot with
// charges on n buckets, when every string is as long as the broker allows.
func MaxEntryBytes(n int) int64 {
	id := intField + 5*strField(validate.MaxNameLen)
	return reservationSize(msgField(int64(id)), n, len(newID(0)), validate.MaxIDLen, validate.MaxKeyLen,
		validate.MaxModelLen, validate.MaxModelLen)
}

// entryRoom is how many bytes open reservations may take: the state's
// limit less what the rest of the last snapshot took and the queue's part.
func (b *Broker) entryRoom() int64 {
	return int64(b.opts.MaxStateBytes) - b.baseBytes.Load() - maxQueueSnapBytes
}

// claimState counts size bytes of a new reservation against the state's
// limit, or refuses it (the claim is then not counted).
func (b *Broker) claimState(size int64, cls WorkloadClass) *Refusal {
	if b.stateBytes.Add(size) <= b.entryRoom() {
		return nil
	}
	b.stateBytes.Add(-size)
	return &Refusal{
		Reason: ReasonRetryableCapacity, BucketID: "broker:state", Scope: ScopeModelRoute, Unit: UnitConcurrentRequests,
		Class: cls, RetryAfter: b.opts.ConcurrencyRetry, Code: CodeStateFull,
		Message: "the rate-limit broker holds as many open reservations as its saved state can carry",
	}
}

// StateBytes reports what the open reservations take of the state, and the
// most they may take now (see Options.MaxStateBytes).
func (b *Broker) StateBytes() (used, room int64) { return b.stateBytes.Load(), b.entryRoom() }

// SetDurable says whether the owner's state is saved. While it is not
// (durable false), Reserve admits nothing: a reservation granted then would
// be unknown to a next owner restoring the last saved state, so after a
// crash it would be admitted twice. Queued requests keep waiting, and
// AwaitDurable's callers are released once it is saved again.
func (b *Broker) SetDurable(durable bool) {
	b.dmu.Lock()
	defer b.dmu.Unlock()
	b.undurable.Store(!durable)
	switch {
	case durable && b.saved != nil:
		close(b.saved)
		b.saved = nil
	case !durable && b.saved == nil:
		b.saved = make(chan struct{})
	}
}

// AwaitDurable waits until the state is saved (at once when it is) or ctx
// ends, and reports whether it is saved.
func (b *Broker) AwaitDurable(ctx context.Context) bool {
	b.dmu.Lock()
	saved := b.saved
	b.dmu.Unlock()
	if saved == nil {
		return true
	}
	b.durableWaits.Add(1)
	defer b.durableWaits.Add(-1)
	select {
	case <-saved:
		return true
	case <-ctx.Done():
		return false
	}
}

// DurableWaiters is how many callers wait in AwaitDurable now.
func (b *Broker) DurableWaiters() int64 { return b.durableWaits.Load() }

// NotDurableRefusals is how many reservations were refused because the
// state was not saved (broker_not_durable) since the broker started.
func (b *Broker) NotDurableRefusals() int64 { return b.notDurable.Load() }

// durableRefusal is the refusal of a reservation while the state is not
// saved, nil when it is.
func (b *Broker) durableRefusal(cls WorkloadClass) *Refusal {
	if !b.undurable.Load() {
		return nil
	}
	b.notDurable.Add(1)
	return &Refusal{
		Reason: ReasonRetryableOverload, BucketID: "broker:durable", Scope: ScopeModelRoute, Unit: UnitRequests,
		Class: cls, RetryAfter: time.Second, Code: CodeNotDurable,
		Message: "the rate-limit broker cannot save its state; admitting nothing until it can",
	}
}
