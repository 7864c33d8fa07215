package activity

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func open(t *testing.T, path string, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(Options{Path: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now, Retention: 24 * time.Hour})
	require.NoError(t, err)
	return s
}

func rec(tenant, id, model string, at time.Time) *switchboardv1.ActivityRecord {
	return &switchboardv1.ActivityRecord{Id: id, TenantId: tenant, Model: model, CreateTime: timestamppb.New(at), CostUsd: 0.001}
}

// flush closes and reopens, so the writer has written everything.
func flush(t *testing.T, s *Store, path string, now func() time.Time) *Store {
	t.Helper()
	require.NoError(t, s.Close())
	return open(t, path, now)
}

func TestListAndGet(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(time.Hour) }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	for i := range 10 {
		require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", fmt.Sprintf("a%d", i), []string{"m1", "m2"}[i%2], t0.Add(time.Duration(i)*time.Minute))}))
	}
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("other", "o1", "m1", t0), {Id: "no-tenant"}}))
	// A resent record (an edge that did not see the ack) is stored once.
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "a3", "m2", t0.Add(3*time.Minute))}))
	s = flush(t, s, path, now)
	defer s.Close()
	ctx := t.Context()

	all, next, err := s.List(ctx, Query{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, all, 10)
	require.Empty(t, next)
	require.Equal(t, "a9", all[0].Id, "newest first")

	tests := []struct {
		name string
		q    Query
		want []string
	}{
		{"model", Query{Tenant: "acme", Model: "m1", Limit: 3}, []string{"a8", "a6", "a4"}},
		{"time range", Query{Tenant: "acme", Start: t0.Add(2 * time.Minute), End: t0.Add(5 * time.Minute)}, []string{"a4", "a3", "a2"}},
		{"other tenant sees only its own", Query{Tenant: "other"}, []string{"o1"}},
		{"unknown tenant", Query{Tenant: "nobody"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := s.List(ctx, tt.q)
			require.NoError(t, err)
			var ids []string
			for _, r := range got {
				ids = append(ids, r.Id)
			}
			require.Equal(t, tt.want, ids)
		})
	}

	// Paging.
	page1, cur, err := s.List(ctx, Query{Tenant: "acme", Limit: 4})
	require.NoError(t, err)
	require.Len(t, page1, 4)
	page2, _, err := s.List(ctx, Query{Tenant: "acme", Limit: 4, Cursor: cur})
	require.NoError(t, err)
	require.Equal(t, "a5", page2[0].Id)
	_, _, err = s.List(ctx, Query{Tenant: "other", Cursor: cur})
	require.ErrorIs(t, err, ErrBadCursor, "a cursor of another tenant's listing is refused")

	got, err := s.Get(ctx, "acme", "a3")
	require.NoError(t, err)
	require.Equal(t, "m2", got.Model)
	_, err = s.Get(ctx, "other", "a3")
	require.ErrorIs(t, err, ErrNotFound, "another tenant's id looks missing")
	_, err = s.Get(ctx, "acme", "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := t0
	now := func() time.Time { return clock }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "old", "m", t0.Add(-25*time.Hour)), rec("acme", "new", "m", t0)}))
	s = flush(t, s, path, now) // pruning runs when the writer starts
	defer s.Close()
	got, _, err := s.List(t.Context(), Query{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "new", got[0].Id)
	_, err = s.Get(t.Context(), "acme", "old")
	require.ErrorIs(t, err, ErrNotFound)
}

// TestSameIDOtherTenant: ids are chosen by edges, so two tenants can send the
// same one; neither record may replace, hide or delete the other.
func TestSameIDOtherTenant(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(time.Hour) }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "same", "m-acme", t0)}))
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("globex", "same", "m-globex", t0.Add(time.Minute))}))
	// And both at the very same instant, in one batch.
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "twin", "m-acme", t0), rec("globex", "twin", "m-globex", t0)}))
	s = flush(t, s, path, now)
	defer s.Close()
	ctx := t.Context()

	for _, id := range []string{"same", "twin"} {
		for _, tenant := range []string{"acme", "globex"} {
			got, err := s.Get(ctx, tenant, id)
			require.NoError(t, err, "%s/%s", tenant, id)
			require.Equal(t, "m-"+tenant, got.GetModel())
		}
	}
	for _, tenant := range []string{"acme", "globex"} {
		got, _, err := s.List(ctx, Query{Tenant: tenant})
		require.NoError(t, err)
		require.Len(t, got, 2, tenant)
	}
}

// TestSameIDOtherTenantRetention: pruning one tenant's old record leaves the
// other tenant's newer record of the same id reachable.
func TestSameIDOtherTenantRetention(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0 }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("globex", "same", "m", t0.Add(-time.Hour))}))
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "same", "m", t0.Add(-25*time.Hour))}))
	s = flush(t, s, path, now) // pruning runs when the writer starts
	defer s.Close()

	_, err := s.Get(t.Context(), "acme", "same")
	require.ErrorIs(t, err, ErrNotFound, "past retention")
	got, err := s.Get(t.Context(), "globex", "same")
	require.NoError(t, err, "within retention")
	require.Equal(t, "globex", got.GetTenantId())
}

// TestResendWithOtherTime: an edge may resend a record whose time it
// corrected; the store keeps one copy, and the retention sweep of the old
// time must not remove the live copy's index.
// A record is stored once by id: a resend, with another time or another
// bill, is a no-op, not a replace.
func TestResendIsANoOp(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := t0
	now := func() time.Time { return clock }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "r1", "m", t0.Add(-2*time.Hour))}))
	forged := rec("acme", "r1", "m", t0.Add(-time.Hour))
	forged.CostUsd, forged.Usage = 999, &switchboardv1.Usage{OutputTokens: 1e9, CostUsd: 999}
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{forged}))
	// Twice in one write, too.
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "r2", "m", t0), forged, rec("acme", "r2", "other", t0)}))
	s = flush(t, s, path, now)
	got, _, err := s.List(t.Context(), Query{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, got, 2, "each id stored once")
	r, err := s.Get(t.Context(), "acme", "r1")
	require.NoError(t, err)
	require.Equal(t, t0.Add(-2*time.Hour), r.GetCreateTime().AsTime(), "the first record stays")
	require.InDelta(t, 0.001, r.GetCostUsd(), 1e-12, "its bill is not rewritten")
	r, err = s.Get(t.Context(), "acme", "r2")
	require.NoError(t, err)
	require.Equal(t, "m", r.GetModel())

	// The stored time falls out of retention, with its index: a later
	// resend does not keep it alive.
	clock = t0.Add(24*time.Hour - 90*time.Minute)
	s = flush(t, s, path, now)
	defer s.Close()
	_, err = s.Get(t.Context(), "acme", "r1")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Get(t.Context(), "acme", "r2")
	require.NoError(t, err)
}

// TestOpenRefusesAnotherSchema: a log of another layout (one without the
// schema, as version 1 was, or of a schema this version does not know) is
// refused at Open with an error naming the schema, not read with the wrong
// indexes; a new log is stamped and reopens.
func TestOpenRefusesAnotherSchema(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	write := func(name string, meta func(*bolt.Bucket) error) string {
		path := filepath.Join(dir, name)
		db, err := bolt.Open(path, 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			recs, err := tx.CreateBucket(bucketRecords)
			require.NoError(t, err)
			v, err := proto.Marshal(rec("acme", "a1", "m", t0))
			require.NoError(t, err)
			require.NoError(t, recs.Put(recordKey("acme", t0, "a1"), v))
			m, err := tx.CreateBucket(bucketMeta)
			require.NoError(t, err)
			return meta(m)
		}))
		require.NoError(t, db.Close())
		return path
	}
	noSchema := write("none.db", func(*bolt.Bucket) error { return nil })
	other := write("other.db", func(m *bolt.Bucket) error {
		return m.Put(keySchema, binary.BigEndian.AppendUint64(nil, schema+1))
	})
	for path, want := range map[string]string{noSchema: "no schema", other: fmt.Sprintf("schema %d", schema+1)} {
		_, err := Open(Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
		require.ErrorContains(t, err, want, path)
	}

	fresh := filepath.Join(dir, "new.db")
	s := open(t, fresh, func() time.Time { return t0 })
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "a1", "m", t0)}))
	s.Close()
	s = open(t, fresh, func() time.Time { return t0 })
	defer s.Close()
	_, err := s.Get(t.Context(), "acme", "a1")
	require.NoError(t, err)
}

// TestStoredPassesEachRecordOnce checks the Stored hook sees a record the
// first time it is stored only: not again when an edge resends it (the
// same time, or another), nor after a reopen; records without a tenant or
// id are not stored, so not passed.
func TestStoredPassesEachRecordOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "a.db")
	var seen []string
	o := Options{Path: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return t0 },
		Stored: func(rs []*switchboardv1.ActivityRecord) {
			for _, r := range rs {
				seen = append(seen, r.GetTenantId()+"/"+r.GetId())
			}
		}}
	s, err := Open(o)
	require.NoError(t, err)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "a1", "m", t0), rec("acme", "a2", "m", t0), {Id: "no-tenant"}}))
	require.Equal(t, []string{"acme/a1", "acme/a2"}, seen, "passed before Add returns")
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "a1", "m", t0), rec("acme", "a2", "m", t0.Add(time.Second)), rec("other", "a1", "m", t0)}))
	require.Equal(t, []string{"acme/a1", "acme/a2", "other/a1"}, seen, "resent records are not passed again; another tenant's id is its own")
	require.NoError(t, s.Close())
	s, err = Open(o)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{rec("acme", "a1", "m", t0)}))
	require.Len(t, seen, 3, "nor after a reopen")
}

// TestUnknownFieldsAreNotStored: a record carrying fields no version of the
// API defines (a megabyte of them, from a caller with a valid credential)
// is stored without them, so they neither fill the log nor come back to
// the tenant that lists it.
func TestUnknownFieldsAreNotStored(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0 }
	path := filepath.Join(t.TempDir(), "a.db")
	s := open(t, path, now)
	r := rec("acme", "r1", "m", t0.Add(-time.Minute))
	r.Usage = &switchboardv1.Usage{InputTokens: 10}
	junk := protowire.AppendBytes(protowire.AppendTag(nil, 9999, protowire.BytesType), make([]byte, 1<<20))
	r.ProtoReflect().SetUnknown(junk)
	r.GetUsage().ProtoReflect().SetUnknown(junk)
	require.NoError(t, s.Add([]*switchboardv1.ActivityRecord{r}))
	s = flush(t, s, path, now)
	defer s.Close()
	got, err := s.Get(t.Context(), "acme", "r1")
	require.NoError(t, err)
	require.Zero(t, len(got.ProtoReflect().GetUnknown()), "unknown fields of the record")
	require.Zero(t, len(got.GetUsage().ProtoReflect().GetUnknown()), "unknown fields of its usage")
	require.Less(t, proto.Size(got), 1024)
	require.EqualValues(t, 10, got.GetUsage().GetInputTokens())
}
