package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkGatewayOverhead measures what the gateway adds to a request: the
// same short non-streamed chat request sent straight to a simulated provider
// (no simulated delay) and through the edge (auth, parsing, Decide with a
// reservation over gRPC, dispatch, rewriting, reporting). The difference of
// the two ns/op is the gateway's cost per request on this machine, client,
// edge, decider and provider all sharing its cores.
func BenchmarkGatewayOverhead(b *testing.B) {
	s := startSystem(b)
	for _, name := range []string{"alpha"} {
		p := s.sim.Provider(name)
		cfg := `{"id":"sim-model","default_output_tokens":8}`
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPut, strings.TrimSuffix(p.URL(), "/v1")+"/admin/models/sim-model", strings.NewReader(cfg))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	send := func(b *testing.B, url, key, model string) {
		body := `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"hello there, how are you"}]}`
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, url+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			send(b, s.sim.Provider("alpha").URL(), alphaCred, simModel)
		}
	})
	b.Run("through-edge", func(b *testing.B) {
		for b.Loop() {
			send(b, s.edge.URL(), testKey, model)
		}
	})
}
