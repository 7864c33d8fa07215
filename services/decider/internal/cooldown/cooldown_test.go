package cooldown

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
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
		{name: "default: one refusal benches nothing", refusals: []time.Duration{0}, at: time.Second, cooling: false},
		{name: "default: three within a minute bench for 2m", refusals: []time.Duration{0, 20 * time.Second, 40 * time.Second},
			at: 40*time.Second + 119*time.Second, cooling: true},
		{name: "default: usable again after 2m", refusals: []time.Duration{0, 20 * time.Second, 40 * time.Second},
			at: 40*time.Second + 2*time.Minute, cooling: false},
		{name: "first-refusal: one refusal benches for 15m", opts: FirstRefusal, refusals: []time.Duration{0}, at: 14 * time.Minute, cooling: true},
		{name: "first-refusal: usable again after 15m", opts: FirstRefusal, refusals: []time.Duration{0}, at: 15 * time.Minute, cooling: false},
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
	tr := New(FirstRefusal)
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
	u, started := tr.RefusedFor("a/m", t0, 5*time.Minute)
	require.True(t, started)
	require.Equal(t, t0.Add(5*time.Minute), u, "Retry-After is a lower bound")
	u, _ = tr.RefusedFor("a/m", t0.Add(time.Minute), 12*time.Minute)
	require.Equal(t, t0.Add(13*time.Minute), u, "a longer Retry-After extends a running cool-down")
	_, cooling := tr.Until("a/m", t0.Add(12*time.Minute))
	require.True(t, cooling)
}

// TestRetryAfterPausesForThatLong: a provider that says when to come back
// is paused for exactly that long, not benched for the full cool-down; if
// it refuses again within the window, it is benched as any endpoint that
// keeps refusing.
func TestRetryAfterPausesForThatLong(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name        string
		opts        Options
		refusals    []time.Duration // offsets from t0, each with a 2s Retry-After
		wantUntil   time.Duration   // offset from t0 of the last refusal's end
		wantBenched int64
		wantPaused  int64
	}{
		{name: "one 429 with Retry-After pauses for it", refusals: []time.Duration{0},
			wantUntil: 2 * time.Second, wantPaused: 1},
		{name: "first-refusal: a repeated refusal after the pause benches for 15m", opts: FirstRefusal, refusals: []time.Duration{0, 3 * time.Second},
			wantUntil: 3*time.Second + 15*time.Minute, wantBenched: 1, wantPaused: 1},
		{name: "refusals further apart than the window are not repeated", refusals: []time.Duration{0, 2 * time.Minute},
			wantUntil: 2*time.Minute + 2*time.Second, wantPaused: 2},
		{name: "the default breaker: the third refusal benches",
			refusals: []time.Duration{0, 10 * time.Second, 20 * time.Second}, wantUntil: 20*time.Second + 2*time.Minute, wantBenched: 1, wantPaused: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(tt.opts)
			var u time.Time
			for _, r := range tt.refusals {
				var started bool
				u, started = tr.RefusedFor("a/m", t0.Add(r), 2*time.Second)
				require.True(t, started, "each refusal after the last pause ended starts a pause or a cool-down")
			}
			require.Equal(t, t0.Add(tt.wantUntil), u)
			last := t0.Add(tt.refusals[len(tt.refusals)-1])
			_, cooling := tr.Until("a/m", last.Add(time.Second))
			require.True(t, cooling)
			_, cooling = tr.Until("a/m", t0.Add(tt.wantUntil))
			require.False(t, cooling, "usable again when the pause ends")
			require.Equal(t, tt.wantBenched, tr.Benched())
			require.Equal(t, tt.wantPaused, tr.Paused())
		})
	}

	// A refusal without Retry-After keeps the rule: first-refusal's 15 minutes.
	tr := New(FirstRefusal)
	u, started := tr.RefusedFor("a/m", t0, 0)
	require.True(t, started)
	require.Equal(t, t0.Add(15*time.Minute), u)
}

// A Retry-After is believed up to provheaders.MaxRetryAfter: three reports
// of 87,600 hours (ten years) pause, bench and extend an endpoint for 15
// minutes at most.
func TestRetryAfterIsCapped(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const tenYears = 87_600 * time.Hour
	tr := New(Options{})
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		u, _ := tr.RefusedFor("a/m", at, tenYears)
		require.LessOrEqual(t, u.Sub(at), provheaders.MaxRetryAfter, "refusal %d", i)
	}
	_, cooling := tr.Until("a/m", t0.Add(2*time.Second+provheaders.MaxRetryAfter))
	require.False(t, cooling, "usable again 15 minutes after the last report")
	_, cooling = tr.Until("a/m", t0.Add(provheaders.MaxRetryAfter-time.Second))
	require.True(t, cooling)
}
