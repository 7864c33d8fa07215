package activity

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestCursorRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 7, time.UTC)
	for _, tt := range []struct {
		name string
		p    Position
	}{
		{name: "plain", p: Position{Tenant: "acme", T: t0, ID: "req-1"}},
		{name: "empty id", p: Position{Tenant: "acme", T: t0}},
		{name: "before 1970", p: Position{Tenant: "acme", T: time.Unix(-5, 3), ID: "x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCursor("acme", tt.p.Cursor())
			require.NoError(t, err)
			require.True(t, tt.p.T.Equal(got.T))
			require.Equal(t, tt.p.ID, got.ID)
			_, err = ParseCursor("other", tt.p.Cursor())
			require.ErrorIs(t, err, ErrBadCursor, "another tenant's cursor")
		})
	}
	for _, bad := range []string{"zz", "", "AQ", "!!!!", Position{Tenant: "acme", ID: "a\x00b"}.Cursor()} {
		_, err := ParseCursor("acme", bad)
		require.ErrorIs(t, err, ErrBadCursor, "%q", bad)
	}
}

// FuzzParseCursor: a cursor comes back from callers. Whatever it holds,
// parsing answers a position of the caller's tenant or ErrBadCursor, never
// panics, and a position it answers encodes back to a cursor that parses
// to the same position.
func FuzzParseCursor(f *testing.F) {
	f.Add("acme", Position{Tenant: "acme", T: time.Unix(1, 2), ID: "req"}.Cursor())
	f.Add("acme", "zz")
	f.Add("", "AQA")
	f.Fuzz(func(t *testing.T, tenant, s string) {
		p, err := ParseCursor(tenant, s)
		if err != nil {
			require.ErrorIs(t, err, ErrBadCursor)
			return
		}
		require.Equal(t, tenant, p.Tenant)
		again, err := ParseCursor(tenant, p.Cursor())
		require.NoError(t, err)
		require.Equal(t, p.ID, again.ID)
		require.True(t, p.T.Equal(again.T))
	})
}

func TestMerge(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := func(id string, sec int) *switchboardv1.ActivityRecord {
		return rec("acme", id, "m", t0.Add(time.Duration(sec)*time.Second))
	}
	ids := func(rs []*switchboardv1.ActivityRecord) (out []string) {
		for _, x := range rs {
			out = append(out, x.GetId())
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		pages    []Page
		limit    int
		want     []string
		wantNext bool
	}{
		{name: "interleaved, newest first", limit: 10,
			pages: []Page{{Records: []*switchboardv1.ActivityRecord{r("a", 5), r("b", 3)}}, {Records: []*switchboardv1.ActivityRecord{r("c", 4), r("d", 1)}}},
			want:  []string{"a", "c", "b", "d"}},
		{name: "same time: by id", limit: 10,
			pages: []Page{{Records: []*switchboardv1.ActivityRecord{r("y", 5)}}, {Records: []*switchboardv1.ActivityRecord{r("x", 5)}}},
			want:  []string{"x", "y"}},
		{name: "a record two logs hold, once", limit: 10,
			pages: []Page{{Records: []*switchboardv1.ActivityRecord{r("a", 5), r("b", 3)}}, {Records: []*switchboardv1.ActivityRecord{r("b", 3)}}},
			want:  []string{"a", "b"}},
		{name: "cut at the limit", limit: 2,
			pages: []Page{{Records: []*switchboardv1.ActivityRecord{r("a", 5), r("b", 3)}}, {Records: []*switchboardv1.ActivityRecord{r("c", 4)}}},
			want:  []string{"a", "c"}, wantNext: true},
		{name: "a log with more", limit: 2,
			pages: []Page{{Records: []*switchboardv1.ActivityRecord{r("a", 5), r("b", 3)}, More: true}, {}},
			want:  []string{"a", "b"}, wantNext: true},
		{name: "nothing", limit: 2, pages: []Page{{}, {}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, next := Merge(tt.pages, tt.limit)
			require.Equal(t, tt.want, ids(got))
			require.Equal(t, tt.wantNext, next != "")
			if tt.wantNext {
				p, err := ParseCursor("acme", next)
				require.NoError(t, err)
				require.Equal(t, got[len(got)-1].GetId(), p.ID)
			}
		})
	}
}

// TestMergedPagesListEveryRecordOnce pages through three logs that hold
// records at the same times (and one record twice), merging their pages
// as a replica answering ListActivity does, and lists each record once.
func TestMergedPagesListEveryRecordOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	var logs []*Store
	want := map[string]bool{}
	for i := range 3 {
		path := filepath.Join(dir, fmt.Sprintf("log%d.db", i))
		s := open(t, path, func() time.Time { return t0 })
		var recs []*switchboardv1.ActivityRecord
		for j := range 7 {
			id := fmt.Sprintf("r%d-%d", i, j)
			recs = append(recs, rec("acme", id, "m", t0.Add(time.Duration(j/2)*time.Second)))
			want[id] = true
		}
		if i == 2 {
			recs = append(recs, rec("acme", "r0-3", "m", t0.Add(time.Second))) // held by logs 0 and 2
		}
		require.NoError(t, s.Add(recs))
		s = flush(t, s, path, func() time.Time { return t0 })
		t.Cleanup(func() { _ = s.Close() })
		logs = append(logs, s)
	}
	seen := map[string]int{}
	for cursor, pages := "", 0; ; pages++ {
		require.Less(t, pages, 20)
		var parts []Page
		for _, s := range logs {
			recs, next, err := s.List(t.Context(), Query{Tenant: "acme", Limit: 4, Cursor: cursor})
			require.NoError(t, err)
			parts = append(parts, Page{Records: recs, More: next != ""})
		}
		recs, next := Merge(parts, 4)
		require.LessOrEqual(t, len(recs), 4)
		for _, r := range recs {
			seen[r.GetId()]++
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	require.Len(t, seen, len(want))
	for id := range want {
		require.Equal(t, 1, seen[id], id)
	}
}
