package routing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

// BenchmarkDecide measures one Decide on a catalog of 1000 models with 20
// endpoints each, with speed data in all 4 size buckets, for a prompt in each
// bucket: the whole answer, response message included.
func BenchmarkDecide(b *testing.B) {
	var y strings.Builder
	y.WriteString("models:\n")
	for m := range 1000 {
		fmt.Fprintf(&y, "  - id: vendor/model-%d\n    endpoints:\n", m)
		for e := range 20 {
			fmt.Fprintf(&y, "      - {provider: p%02d, base_url: http://127.0.0.1:%d/v1, price: {input: %g, cached_input: %g, output: %g}, context_length: 200000}\n",
				e, 9000+e, 0.1+float64((e*7)%20)/100, 0.01+float64(e%5)/100, 0.5+float64((e*3)%20)/50)
		}
	}
	y.WriteString("tenants:\n  - {id: acme, api_keys_sha256: [" + catalog.HashKey("k") + "]}\n")
	c, err := catalog.Parse([]byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	st := stats.New(stats.Config{})
	now := time.Now()
	// Every endpoint of the benchmarked model has speed data in every bucket,
	// so the full smart policy runs (qualification, price guard), not the
	// no-data shortcut.
	for e := range 20 {
		id := fmt.Sprintf("p%02d/vendor/model-500", e)
		for b := range tokens.NumBuckets {
			for s := range 12 {
				st.ObserveTTFT(id, tokens.Bucket(b), time.Duration(300+e*150+s)*time.Millisecond*time.Duration(b+1), now)
			}
		}
		st.ObserveThroughput(id, float64(20+e), now)
		st.ObserveCache(id, 1000, int64(e*40), now)
	}
	oc := outcomes.New(outcomes.Config{})
	for e := range 20 {
		id := fmt.Sprintf("p%02d/vendor/model-500", e)
		for range 20 {
			oc.Observe(id, outcomes.Call{Kind: outcomes.KindOK, Reported: true, Duration: time.Duration(2+e) * time.Second,
				Usage: pricing.Usage{Input: 10000, CachedInput: int64(e * 400), Output: 300}}, pricing.Price{Input: 0.2, CachedInput: 0.02, Output: 1})
		}
		oc.Observe(id, outcomes.Call{Kind: outcomes.KindRateLimited}, pricing.Price{})
	}
	id := &switchboardv1.Identity{TenantId: "acme"}
	for _, policy := range []Policy{PolicySmart, PolicyRoutingCost} {
		r := New(c, Options{Stats: st, Outcomes: oc, Exploration: 0.05, Seed: 1, Policy: policy})
		for _, in := range []int64{1000, 20000, 60000, 150000} {
			req := &switchboardv1.DecideRequest{Model: "vendor/model-500", Tokens: &switchboardv1.TokenEstimate{InputTokens: in, MaxOutputTokens: 500,
				Prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: in / 4}, {Hash: 2, Tokens: in / 2}}}}
			name := fmt.Sprintf("prompt=%d", in)
			if policy != PolicySmart {
				name = string(policy) + "/" + name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := r.Decide(req, id); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
