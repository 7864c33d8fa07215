package routing

import (
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// BenchmarkDecide measures one Decide on a catalog of 1000 models with 20
// endpoints each, for a prompt in each size bucket.
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
	r := New(c)
	id := &pb.Identity{TenantId: "acme"}
	for _, in := range []int64{1000, 20000, 60000, 150000} {
		req := &pb.DecideRequest{Model: "vendor/model-500", Tokens: &pb.TokenEstimate{InputTokens: in, CachedInputTokens: in / 2, MaxOutputTokens: 500}}
		b.Run(fmt.Sprintf("prompt=%d", in), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Decide(req, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
