package cooldown

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTable(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		until   time.Duration // relative to base; 0 means never set
		advance time.Duration
		want    bool
	}{
		{name: "never set", want: false},
		{name: "active", until: time.Minute, advance: 30 * time.Second, want: true},
		{name: "expired", until: time.Minute, advance: time.Minute, want: false},
		{name: "set in the past", until: -time.Second, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := base
			tbl := New(func() time.Time { return now })
			if tt.until != 0 {
				tbl.Set("p/m", base.Add(tt.until))
			}
			now = now.Add(tt.advance)
			require.Equal(t, tt.want, tbl.Active("p/m"))
			require.False(t, tbl.Active("other/m"))
		})
	}
}

func TestTableLift(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tbl := New(func() time.Time { return now })
	tbl.Set("p/m", now.Add(time.Hour))
	require.True(t, tbl.Active("p/m"))
	tbl.Set("p/m", now.Add(-time.Second))
	require.False(t, tbl.Active("p/m"))
}
