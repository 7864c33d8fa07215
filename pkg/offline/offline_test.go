package offline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/offline"
)

// id is a request id of the edge's format made at t.
func id(t time.Time) string { return fmt.Sprintf("gen-%012xabcdefghijklmnop", t.UnixMilli()) }

func TestWithin(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		grant, record string
		want          bool
	}{
		{name: "a second later", grant: id(t0), record: id(t0.Add(time.Second)), want: true},
		{name: "at the window's end", grant: id(t0), record: id(t0.Add(offline.MaxGrace)), want: true},
		{name: "past the window", grant: id(t0), record: id(t0.Add(offline.MaxGrace + time.Millisecond)), want: false},
		{name: "before the decision", grant: id(t0), record: id(t0.Add(-time.Millisecond)), want: false},
		{name: "the decision's own id", grant: id(t0), record: id(t0), want: false},
		{name: "a grant id of another format", grant: "req-1", record: id(t0), want: false},
		{name: "a record id of another format", grant: id(t0), record: "gen-zz", want: false},
		{name: "empty", grant: "", record: id(t0), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, offline.Within(tt.grant, tt.record))
		})
	}
}

func TestIDTime(t *testing.T) {
	t0 := time.UnixMilli(time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC).UnixMilli())
	got, ok := offline.IDTime(id(t0))
	require.True(t, ok)
	require.True(t, got.Equal(t0))
	_, ok = offline.IDTime("gen-")
	require.False(t, ok)
}
