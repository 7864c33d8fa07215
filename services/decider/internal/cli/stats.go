package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func statsCommand() *command {
	return &command{name: "stats", args: "[MODEL]", summary: "each endpoint's speed per prompt size, price, traffic, cool-down; the choice per size", dial: true,
		about: "Shows what the decider's routing knows of each endpoint of MODEL (an id or alias; every model without one):\n" +
			"the typical time to first token per prompt-size bucket with its sample count, output speed, cache-hit rate,\n" +
			"price per million tokens, the requests per minute this replica routes there and their share, a cool-down's end;\n" +
			"then the endpoint it would choose for a prompt of each size, and why.",
		setup: func(fs *flag.FlagSet) func(context.Context, *run) error {
			tenant := fs.String("tenant", "", "choose as for this tenant's requests (its routing defaults)")
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 1); err != nil {
					return err
				}
				req := &switchboardv1.GetEndpointStatsRequest{TenantId: *tenant}
				if len(r.args) == 1 {
					req.Model = r.args[0]
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.GetEndpointStatsResponse, error) {
					return c.GetEndpointStats(ctx, req)
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				printStats(r, resp, *tenant)
				return nil
			}
		}}
}

func printStats(r *run, resp *switchboardv1.GetEndpointStatsResponse, tenant string) {
	w := r.env.Stdout
	now := resp.GetReadTime().AsTime()
	if resp.GetReadTime() == nil {
		now = time.Now()
	}
	fmt.Fprintf(w, "as measured by the decider at %s; TTFT = typical time to first token (samples); prices in USD per million tokens\n", resp.GetReplica())
	for i, m := range resp.GetModels() {
		if i > 0 {
			fmt.Fprintln(w)
		}
		answer := "typical answer unknown"
		if m.TypicalOutputTokens != nil {
			answer = fmt.Sprintf("typical answer %s tokens (%s samples)", numfmt.Int(m.GetTypicalOutputTokens()), numfmt.Int(m.GetOutputSamples()))
		}
		fmt.Fprintf(w, "\n%s — %s\n", m.GetModel(), answer)
		tw := table(w)
		head := []string{"PROVIDER"}
		if len(m.GetEndpoints()) > 0 {
			for _, b := range m.GetEndpoints()[0].GetTtft() {
				head = append(head, "TTFT "+bucketLabel(b.GetBucket()))
			}
		}
		row(tw, append(head, "TOKENS/S", "CACHE HIT", "PRICE IN / OUT / CACHED", "REQ/MIN", "SHARE", "429s", "COOL-DOWN UNTIL")...)
		for _, e := range m.GetEndpoints() {
			cells := []string{e.GetProvider()}
			for _, b := range e.GetTtft() {
				cell := "-"
				if b.GetTypical() != nil {
					cell = dur(b.GetTypical()) + " (" + numfmt.Int(b.GetSamples()) + ")"
				}
				cells = append(cells, cell)
			}
			p := e.GetPrice()
			cells = append(cells,
				optional(e.ThroughputTokensPerSecond, func(v float64) string { return trimFloat(v, 1) }),
				optional(e.CacheHitRate, percent),
				numfmt.Number(p.GetInput())+" / "+numfmt.Number(p.GetOutput())+" / "+numfmt.Number(p.GetCachedInput()),
				trimFloat(e.GetRequestsPerMinute(), 1),
				percent(e.GetTrafficShare()),
				percent(e.GetRateLimitedRate()),
				clock(e.GetCooldownUntil(), now))
			row(tw, cells...)
		}
		_ = tw.Flush()
		who := "by the deployment's and the model's defaults"
		if tenant != "" {
			who = "for tenant " + tenant
		}
		fmt.Fprintf(w, "\nchoice per prompt size (%s):\n", who)
		providers := map[string]string{}
		for _, e := range m.GetEndpoints() {
			providers[e.GetEndpointId()] = e.GetProvider()
		}
		tw = table(w)
		for _, c := range m.GetChoices() {
			size := "  " + bucketLabel(c.GetBucket()) + " (" + numfmt.Int(c.GetPromptTokens()) + " tokens)"
			if c.GetEndpointId() == "" {
				row(tw, size, "none", c.GetUnavailable())
				continue
			}
			row(tw, size, providers[c.GetEndpointId()], name(c.GetReason()))
		}
		_ = tw.Flush()
	}
}
