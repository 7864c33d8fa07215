package broker

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzParseHeaders feeds provider headers, which are untrusted input, to
// ParseHeaders: it must never panic, and whatever it accepts must be a sane
// limit (finite, non-negative, bounded) and a time between now and the
// horizon.
func FuzzParseHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"x-ratelimit-limit-requests", "60"}, {"x-ratelimit-remaining-tokens", "149984"},
		{"x-ratelimit-reset-requests", "1s"}, {"x-ratelimit-reset-tokens", "6m0s"}, {"x-ratelimit-reset-tokens", "12ms"},
		{"x-ratelimit-reset-requests", "1773144060"}, {"x-ratelimit-reset-requests", "1773144060123"}, {"x-ratelimit-reset-requests", "0.5"},
		{"anthropic-ratelimit-requests-reset", "2026-03-10T12:00:01Z"}, {"anthropic-ratelimit-input-tokens-remaining", "39000"},
		{"retry-after", "20"}, {"retry-after", "Tue, 10 Mar 2026 12:01:30 GMT"}, {"retry-after-ms", "1500"},
		{"retry-after", "-1"}, {"retry-after", "NaN"}, {"x-ratelimit-limit-tokens", "1e400"}, {"x-ratelimit-reset-tokens", "9223372036854775807ns"},
		{"X-RateLimit-Remaining-Requests", " 7 "}, {"anthropic-ratelimit--", "x"}, {"x-ratelimit-", ""},
	} {
		f.Add(s[0], s[1])
	}
	now := t0
	f.Fuzz(func(t *testing.T, name, value string) {
		p, _ := ParseHeaders([]Header{{Name: name, Value: value}}, now)
		for _, li := range []LimitInfo{p.Requests, p.Tokens, p.InputTokens, p.OutputTokens} {
			for _, v := range []float64{li.Limit, li.Remaining} {
				if math.IsNaN(v) || v < 0 || v > maxHeaderValue {
					t.Fatalf("accepted %v from %q: %q", v, name, value)
				}
			}
			checkTime(t, li.Reset, now, name, value)
		}
		checkTime(t, p.RetryAfter, now, name, value)
	})
}

func checkTime(t *testing.T, at, now time.Time, name, value string) {
	if at.IsZero() {
		return
	}
	if at.Before(now) || at.Sub(now) > maxHeaderHorizon {
		t.Fatalf("accepted time %s from %q: %q", at, name, value)
	}
}

// FuzzRestore feeds arbitrary bytes to Restore, as a corrupted etcd value
// would: it must never panic, and a broker that accepted them must still
// work and snapshot. The seeds are snapshots and a small hand-made message.
func FuzzRestore(f *testing.F) {
	b, c := newBroker(f, snapshotSpecs())
	for i := range 3 {
		rq := req(Demand{InputTokens: 10, OutputTokens: 10, USD: 0.01})
		rq.IdempotencyKey = string(rune('a' + i))
		if _, _, err := b.Reserve(f.Context(), rq); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(b.Snapshot())
	f.Add(queuedSnapshot(f))
	f.Add([]byte{0x08, 0x01, 0x22, 0x01, 'x', 0x2a, 0x02, 0x08, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, blob []byte) {
		nb, err := New(Config{Buckets: snapshotSpecs()}, Options{Now: c.Now, QueueReattach: time.Second, ManualPump: true})
		if err != nil {
			t.Fatal(err)
		}
		if nb.Restore(blob, c.Now()) != nil {
			require.Equal(t, 0, nb.Open(), "a refused snapshot restores nothing")
			return
		}
		if _, _, err := nb.Reserve(t.Context(), req(one)); err != nil {
			t.Fatal(err)
		}
		for _, l := range levels(t, nb) {
			if math.IsNaN(l[0]) || math.IsInf(l[0], 0) {
				t.Fatalf("restored a non-finite level")
			}
		}
		nb.Expire(c.Now().Add(time.Hour))
		_ = nb.Snapshot()
	})
}

// queuedSnapshot is a snapshot with two keyed requests queued.
func queuedSnapshot(f *testing.F) []byte {
	b, _ := queueBroker(f, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}},
		[]ClassContract{{Class: ClassBackground, MaxWait: time.Minute, MaxDepth: 10, Overload: OverloadFallback, FallbackModel: "m-small"}},
		[]TenantShare{{Tenant: "a", Weight: 2}})
	rq := tenantReq("a", endpoint)
	rq.Identity.Class = ClassBackground
	if r, _, _ := b.Reserve(f.Context(), rq); r == nil {
		f.Fatal("not reserved")
	}
	ctx, cancel := context.WithCancel(f.Context())
	defer cancel()
	done := make(chan struct{}, 2)
	for _, k := range []string{"k1", "k2"} {
		rq.IdempotencyKey = k
		go func(rq ReserveRequest) {
			_, _, _, _ = b.ReserveWait(ctx, rq)
			done <- struct{}{}
		}(rq)
	}
	for depthOf(b, "a") < 2 {
		runtime.Gosched()
	}
	blob := b.Snapshot()
	cancel()
	<-done
	<-done
	return blob
}
