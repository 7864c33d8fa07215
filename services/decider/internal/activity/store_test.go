package activity

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func open(t *testing.T, path string, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(Options{Path: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now, Retention: 24 * time.Hour})
	require.NoError(t, err)
	return s
}

func rec(tenant, id, model string, at time.Time) *pb.ActivityRecord {
	return &pb.ActivityRecord{Id: id, TenantId: tenant, Model: model, CreateTime: timestamppb.New(at), CostUsd: 0.001}
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
		require.NoError(t, s.Add([]*pb.ActivityRecord{rec("acme", fmt.Sprintf("a%d", i), []string{"m1", "m2"}[i%2], t0.Add(time.Duration(i)*time.Minute))}))
	}
	require.NoError(t, s.Add([]*pb.ActivityRecord{rec("other", "o1", "m1", t0), {Id: "no-tenant"}}))
	// A resent record (an edge that did not see the ack) is stored once.
	require.NoError(t, s.Add([]*pb.ActivityRecord{rec("acme", "a3", "m2", t0.Add(3*time.Minute))}))
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
	require.NoError(t, s.Add([]*pb.ActivityRecord{rec("acme", "old", "m", t0.Add(-25*time.Hour)), rec("acme", "new", "m", t0)}))
	s = flush(t, s, path, now) // pruning runs when the writer starts
	defer s.Close()
	got, _, err := s.List(t.Context(), Query{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "new", got[0].Id)
	_, err = s.Get(t.Context(), "acme", "old")
	require.ErrorIs(t, err, ErrNotFound)
}
