package cooldown

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name     string
		opts     Options
		refusals []time.Duration // offsets from t0
		at       time.Duration
		cooling  bool
	}{
		{name: "no refusal", at: 0, cooling: false},
		{name: "one refusal benches for 15m", refusals: []time.Duration{0}, at: 14 * time.Minute, cooling: true},
		{name: "usable again after 15m", refusals: []time.Duration{0}, at: 15 * time.Minute, cooling: false},
		{name: "breaker: 2 of 3 is not enough", opts: Options{Errors: 3, Window: time.Minute, Duration: 2 * time.Minute},
			refusals: []time.Duration{0, 10 * time.Second}, at: 20 * time.Second, cooling: false},
		{name: "breaker: 3 within the window", opts: Options{Errors: 3, Window: time.Minute, Duration: 2 * time.Minute},
			refusals: []time.Duration{0, 10 * time.Second, 20 * time.Second}, at: 30 * time.Second, cooling: true},
		{name: "breaker: spread out refusals do not trip", opts: Options{Errors: 3, Window: time.Minute, Duration: 2 * time.Minute},
			refusals: []time.Duration{0, 50 * time.Second, 100 * time.Second}, at: 110 * time.Second, cooling: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(tt.opts)
			for _, r := range tt.refusals {
				tr.Refused("a/m", t0.Add(r))
			}
			_, cooling := tr.Until("a/m", t0.Add(tt.at))
			require.Equal(t, tt.cooling, cooling)
			_, other := tr.Until("b/m", t0.Add(tt.at))
			require.False(t, other)
		})
	}
}

func TestRefusedDuringCooldownDoesNotExtend(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := New(Options{})
	u, started := tr.Refused("a/m", t0)
	require.True(t, started)
	u2, started := tr.Refused("a/m", t0.Add(time.Minute))
	require.False(t, started)
	require.Equal(t, u, u2)
	require.Equal(t, int64(1), tr.Benched())
	tr.Expire(t0.Add(16 * time.Minute))
	_, cooling := tr.Until("a/m", t0.Add(16*time.Minute))
	require.False(t, cooling)
	require.Zero(t, tr.active.Load())
}

func TestRetryAfterLengthensCooldown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := New(Options{Duration: time.Minute})
	u, started := tr.RefusedFor("a/m", t0, 10*time.Minute)
	require.True(t, started)
	require.Equal(t, t0.Add(10*time.Minute), u, "Retry-After is a lower bound")
	u, _ = tr.RefusedFor("a/m", t0.Add(time.Minute), 20*time.Minute)
	require.Equal(t, t0.Add(21*time.Minute), u, "a longer Retry-After extends a running cool-down")
	_, cooling := tr.Until("a/m", t0.Add(20*time.Minute))
	require.True(t, cooling)
}
