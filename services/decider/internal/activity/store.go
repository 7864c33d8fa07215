// Package activity is the activity log: every client request with its
// tenant, model, serving endpoint, attempts, hedge, tokens, cost and status.
// Edges send the records in batches on the Report stream; one
// writer goroutine merges the batches of every edge into one bbolt
// transaction at a time, so the log costs a few fsyncs a second however many
// requests there are, and nothing is written on the request path.
//
// A tenant reads its own calls only: every key starts with the tenant, every
// query is bounded to that prefix, and a lookup by id checks the prefix, so
// another tenant's id is indistinguishable from a missing one. Ids are chosen
// by edges, so two tenants may use the same one: every index is keyed by
// tenant and id together.
package activity

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

var (
	bucketRecords = []byte("records") // tenant \x00 inverted-time id → record
	bucketIDs     = []byte("ids")     // tenant \x00 id → records key
	bucketByTime  = []byte("by_time") // time tenant \x00 id → records key, for retention
	bucketMeta    = []byte("meta")    // schema → version
)

// schema is the layout of the indexes, stored in the file. A file of
// another layout is refused at Open, never read: no version that wrote
// another was ever released.
const schema = 2

var keySchema = []byte("schema")

// ErrNotFound means no record of that id for that tenant.
var ErrNotFound = errors.New("no such activity record")

// ErrBadCursor means a cursor that this tenant's listing did not produce.
var ErrBadCursor = errors.New("invalid cursor")

// Options configure a Store.
type Options struct {
	// Path is the database file. (Required)
	Path string
	// Retention is how long records are kept. (Optional) Defaults to 30 days.
	Retention time.Duration
	// Logger (Required)
	Logger *slog.Logger
	// Now is the clock for retention. (Optional) Defaults to time.Now.
	Now func() time.Time
	// Stored, when set, is called after each commit with the records it
	// stored for the first time: a record an edge sends again (delivery is
	// at least once) is not passed twice. It runs on the writer, so it
	// must be quick. (Optional)
	Stored func(records []*switchboardv1.ActivityRecord)
}

// Store is the durable activity log.
type Store struct {
	o      Options
	db     *bolt.DB
	in     chan batch
	wg     sync.WaitGroup
	mu     sync.RWMutex // held for reading while sending, so Close never closes under a sender
	closed bool
}

// Open opens (creating if needed) the log and starts its writer.
func Open(o Options) (*Store, error) {
	if o.Retention <= 0 {
		o.Retention = 30 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	db, err := bolt.Open(o.Path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open activity log %s: %w", o.Path, err)
	}
	if err := db.Update(initBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init activity log %s: %w", o.Path, err)
	}
	s := &Store{o: o, db: db, in: make(chan batch, 1024)}
	s.prune()
	s.wg.Go(s.writer)
	return s, nil
}

// initBuckets creates the buckets of a new log and checks an existing one
// is of this schema.
func initBuckets(tx *bolt.Tx) error {
	fresh := tx.Bucket(bucketRecords) == nil
	for _, b := range [][]byte{bucketRecords, bucketIDs, bucketByTime, bucketMeta} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	v := meta.Get(keySchema)
	switch {
	case len(v) == 8 && binary.BigEndian.Uint64(v) == schema:
		return nil
	case fresh:
		return meta.Put(keySchema, binary.BigEndian.AppendUint64(nil, schema))
	case len(v) == 8:
		return fmt.Errorf("schema %d, this version reads only schema %d", binary.BigEndian.Uint64(v), schema)
	}
	return fmt.Errorf("no schema, this version reads only schema %d", schema)
}

// batch is one Add: its records and where to say they are durable.
type batch struct {
	records []*switchboardv1.ActivityRecord
	done    chan error
}

// Add writes records and returns once they are durable (committed), so an
// edge is only told a batch arrived when a crash can no longer lose it. The
// writer merges concurrent batches into one transaction, so many edges cost
// one fsync. It blocks when the writer is behind: back-pressure on the
// Report stream rather than a lost record.
func (s *Store) Add(records []*switchboardv1.ActivityRecord) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errors.New("activity log closed")
	}
	if len(records) == 0 {
		s.mu.RUnlock()
		return nil
	}
	b := batch{records: records, done: make(chan error, 1)}
	s.in <- b
	s.mu.RUnlock()
	return <-b.done
}

// writer merges queued batches into one transaction at a time.
func (s *Store) writer() {
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
		select {
		case first, ok := <-s.in:
			if !ok {
				return
			}
			batches := []batch{first}
			all := first.records
		drain:
			for {
				select {
				case more, ok := <-s.in:
					if !ok {
						break drain
					}
					batches = append(batches, more)
					all = append(all, more.records...)
				default:
					break drain
				}
			}
			fresh, err := s.write(all)
			if err != nil {
				s.o.Logger.Error("writing activity records", "records", len(all), "err", err)
			} else if s.o.Stored != nil && len(fresh) > 0 {
				s.o.Stored(fresh)
			}
			for _, b := range batches {
				b.done <- err
			}
		case <-prune.C:
			s.prune()
		}
	}
}

// write stores records in one transaction and returns those it stored for
// the first time.
func (s *Store) write(records []*switchboardv1.ActivityRecord) (fresh []*switchboardv1.ActivityRecord, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		fresh = fresh[:0]
		recs, ids, byTime := tx.Bucket(bucketRecords), tx.Bucket(bucketIDs), tx.Bucket(bucketByTime)
		// bbolt copies the keys it is given but keeps the values until the
		// transaction ends: the values (each record and its records key)
		// are cut from one buffer that only grows, so earlier ones stay
		// valid, and the other keys are built in buffers reused for each
		// record.
		vals := make([]byte, 0, 512*len(records))
		var ik, tk []byte
		for _, r := range records {
			tenant, id := r.GetTenantId(), r.GetId()
			if id == "" || tenant == "" || strings.IndexByte(tenant, 0) >= 0 {
				// Unattributable (an edge bug, not a tenant's call), or a
				// tenant that would read as the prefix of another.
				continue
			}
			ik = appendIDKey(ik[:0], tenant, id)
			if ids.Get(ik) != nil {
				// Stored once by id: a resend (delivery is at least once)
				// is a no-op, never a replace, so a second batch with the
				// same id cannot rewrite a bill already stored.
				continue
			}
			// Fields no version of the API defines are not the record's:
			// kept, they would fill the log and come back to the tenant.
			dropUnknown(r.ProtoReflect())
			n := len(vals)
			b, err := proto.MarshalOptions{}.MarshalAppend(vals, r)
			if err != nil {
				return err
			}
			vals = b
			val := vals[n:len(vals):len(vals)]
			at := r.GetCreateTime().AsTime()
			n = len(vals)
			vals = appendRecordKey(vals, tenant, at, id)
			key := vals[n:len(vals):len(vals)]
			fresh = append(fresh, r)
			if err := recs.Put(key, val); err != nil {
				return err
			}
			if err := ids.Put(ik, key); err != nil {
				return err
			}
			tk = appendTimeKey(tk[:0], at, tenant, id)
			if err := byTime.Put(tk, key); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// prune deletes records older than the retention.
func (s *Store) prune() {
	cutoff := s.o.Now().Add(-s.o.Retention)
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		recs, ids, byTime := tx.Bucket(bucketRecords), tx.Bucket(bucketIDs), tx.Bucket(bucketByTime)
		c := byTime.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if int64(binary.BigEndian.Uint64(k[:8])) >= cutoff.UnixNano() {
				break
			}
			if err := recs.Delete(v); err != nil {
				return err
			}
			// Only the mapping to this very record: the id may since have
			// been resent with a newer time.
			if ik := k[8:]; bytes.Equal(ids.Get(ik), v) {
				if err := ids.Delete(ik); err != nil {
					return err
				}
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		s.o.Logger.Error("pruning activity log", "err", err)
	} else if n > 0 {
		s.o.Logger.Info("activity log pruned", "records", n, "older_than", cutoff)
	}
}

// Query filters a listing.
type Query struct {
	Tenant     string
	Start, End time.Time // zero: unbounded
	Model      string
	Limit      int
	Cursor     string
}

// PageLimit is the size of a listing's page asked for n records: 50 for
// none, at most 500.
func PageLimit(n int) int {
	if n <= 0 {
		return 50
	}
	return min(n, 500)
}

// List returns the tenant's records, newest first, and the cursor of the next page.
func (s *Store) List(_ context.Context, q Query) ([]*switchboardv1.ActivityRecord, string, error) {
	q.Limit = PageLimit(q.Limit)
	prefix := append([]byte(q.Tenant), 0)
	seek := prefix
	if !q.End.IsZero() {
		seek = recordKey(q.Tenant, q.End.Add(-time.Nanosecond), "")
	}
	if q.Cursor != "" {
		p, err := ParseCursor(q.Tenant, q.Cursor)
		if err != nil {
			return nil, "", err
		}
		seek = p.seek()
	}
	var out []*switchboardv1.ActivityRecord
	next := ""
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if !q.Start.IsZero() && keyTime(k, len(prefix)).Before(q.Start) {
				break
			}
			if len(out) == q.Limit {
				// More: the next page goes on after the last record of
				// this one (see Position), on any replica.
				next = PositionOf(out[len(out)-1]).Cursor()
				break
			}
			r := &switchboardv1.ActivityRecord{}
			if err := proto.Unmarshal(v, r); err != nil {
				return err
			}
			if q.Model != "" && r.GetModel() != q.Model {
				continue
			}
			out = append(out, r)
		}
		return nil
	})
	return out, next, err
}

// Get returns one of the tenant's records.
func (s *Store) Get(_ context.Context, tenant, id string) (*switchboardv1.ActivityRecord, error) {
	var r *switchboardv1.ActivityRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		key := tx.Bucket(bucketIDs).Get(idKey(tenant, id))
		if key == nil || !bytes.HasPrefix(key, append([]byte(tenant), 0)) {
			return ErrNotFound
		}
		v := tx.Bucket(bucketRecords).Get(key)
		if v == nil {
			return ErrNotFound
		}
		r = &switchboardv1.ActivityRecord{}
		return proto.Unmarshal(v, r)
	})
	return r, err
}

// Close writes what is queued and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.in)
	s.wg.Wait()
	return s.db.Close()
}

// recordKey orders a tenant's records newest first.
func recordKey(tenant string, t time.Time, id string) []byte {
	return appendRecordKey(make([]byte, 0, len(tenant)+1+8+len(id)), tenant, t, id)
}

// appendRecordKey appends the records key of tenant's record id at t to dst.
func appendRecordKey(dst []byte, tenant string, t time.Time, id string) []byte {
	dst = append(dst, tenant...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, math.MaxUint64-uint64(t.UnixNano()))
	return append(dst, id...)
}

func keyTime(k []byte, prefixLen int) time.Time {
	if len(k) < prefixLen+8 {
		return time.Time{}
	}
	return time.Unix(0, int64(math.MaxUint64-binary.BigEndian.Uint64(k[prefixLen:prefixLen+8])))
}

// idKey is a record's key in the id index: the same id may be used by two
// tenants.
func idKey(tenant, id string) []byte {
	return appendIDKey(make([]byte, 0, len(tenant)+1+len(id)), tenant, id)
}

// appendIDKey appends the ids key of tenant's record id to dst.
func appendIDKey(dst []byte, tenant, id string) []byte {
	dst = append(dst, tenant...)
	dst = append(dst, 0)
	return append(dst, id...)
}

// appendTimeKey appends the retention key of tenant's record id at t to
// dst: oldest first, then its id key, so sweeping finds the id index entry
// without reading the record.
func appendTimeKey(dst []byte, t time.Time, tenant, id string) []byte {
	return appendIDKey(binary.BigEndian.AppendUint64(dst, uint64(t.UnixNano())), tenant, id)
}

// dropUnknown clears the unknown fields of m and of every message it holds.
func dropUnknown(m protoreflect.Message) {
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				dropUnknown(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				dropUnknown(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			dropUnknown(v.Message())
		}
		return true
	})
}
