package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// getBroker reads the broker's state from its owner.
func getBroker(ctx context.Context, r *run, maxBuckets int) (*switchboardv1.GetBrokerResponse, error) {
	return once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.GetBrokerResponse, error) {
		return c.GetBroker(ctx, &switchboardv1.GetBrokerRequest{MaxBuckets: int32(maxBuckets)}) //nolint:gosec // bounded by the flag's check
	})
}

func brokerCommand() *command {
	return &command{name: "broker", summary: "the rate-limit broker: buckets, open reservations, paused routes, queues", dial: true,
		about: "Shows the rate-limit broker's state as its owner holds it (another replica forwards the call there):\n" +
			"every bucket's limit and what it can still admit, the fullest first; the open reservations and what they hold;\n" +
			"the routes a provider paused; the admission queues with requests waiting.",
		setup: func(fs *flag.FlagSet) func(context.Context, *run) error {
			maxBuckets := fs.Int("max", 50, "show at most this many buckets, the fullest first (at most 5000)")
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				if *maxBuckets < 1 || *maxBuckets > 5000 {
					return usagef("--max %d: between 1 and 5000", *maxBuckets)
				}
				resp, err := getBroker(ctx, r, *maxBuckets)
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				printBroker(r, resp)
				return nil
			}
		}}
}

func printBroker(r *run, resp *switchboardv1.GetBrokerResponse) {
	w := r.env.Stdout
	fmt.Fprintf(w, "rate-limit broker owned by %s, read at %s\n", resp.GetOwner(), resp.GetReadTime().AsTime().Local().Format(time.TimeOnly))
	d := resp.GetOpenDemand()
	fmt.Fprintf(w, "open reservations: %s (holding %s input and %s output tokens, %s)\n", numfmt.Int(resp.GetOpenReservations()),
		numfmt.Int(d.GetInputTokens()), numfmt.Int(d.GetOutputTokens()), usd(d.GetUsd()))
	fmt.Fprintf(w, "queued since it started: %s (admitted %s, ran out of their wait %s)\n\n",
		numfmt.Int(resp.GetQueuedTotal()), numfmt.Int(resp.GetAdmittedFromQueue()), numfmt.Int(resp.GetTimedOutInQueue()))
	tw := table(w)
	row(tw, "SCOPE", "KEY", "UNIT", "PER", "RULE", "LIMIT", "AVAILABLE", "USED", "SOURCE")
	for _, b := range resp.GetBuckets() {
		per, used, source := b.GetWindow(), "-", "catalog"
		if per == "" {
			per = "-"
		}
		if b.GetLimit() > 0 {
			used = percent(1 - b.GetAvailable()/b.GetLimit())
		}
		if b.GetLearned() {
			source = "learned"
		}
		row(tw, b.GetScope(), b.GetKey(), b.GetUnit(), per, b.GetRule(), trimFloat(b.GetLimit(), 2), trimFloat(b.GetAvailable(), 2), used, source)
	}
	_ = tw.Flush()
	if n := int64(len(resp.GetBuckets())); n < resp.GetTotalBuckets() {
		fmt.Fprintf(w, "(%s of %s buckets, the fullest; --max shows more)\n", numfmt.Int(n), numfmt.Int(resp.GetTotalBuckets()))
	}
	now := resp.GetReadTime().AsTime()
	if len(resp.GetPauses()) == 0 {
		fmt.Fprintln(w, "\npaused routes: none")
	} else {
		fmt.Fprintln(w, "\npaused routes:")
		tw = table(w)
		row(tw, "ENDPOINT", "TENANT", "UNTIL", "REASON")
		for _, p := range resp.GetPauses() {
			tenant := p.GetTenantId()
			if tenant == "" {
				tenant = "every tenant"
			}
			row(tw, p.GetEndpointId(), tenant, clock(p.GetUntil(), now), name(p.GetReason()))
		}
		_ = tw.Flush()
	}
	if len(resp.GetQueues()) == 0 {
		fmt.Fprintln(w, "\nqueues: no request waiting")
		return
	}
	fmt.Fprintln(w, "\nqueues:")
	tw = table(w)
	row(tw, "CLASS", "TENANT", "WAITING")
	for _, q := range resp.GetQueues() {
		row(tw, name(q.GetWorkloadClass()), q.GetTenantId(), numfmt.Int(q.GetDepth()))
	}
	_ = tw.Flush()
}

func hedgeCommand() *command {
	return &command{name: "hedge", summary: "the day's hedge budget: spent, left, when it refills", dial: true,
		about: "Shows the day's hedge budget, which pays for the second endpoint of hedged requests, as the broker's owner holds it.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				resp, err := getBroker(ctx, r, 1)
				if err != nil {
					return err
				}
				h := resp.GetHedgeBudget()
				if r.json() {
					return writeJSON(r.env.Stdout, h)
				}
				now := resp.GetReadTime().AsTime()
				fmt.Fprintf(r.env.Stdout, "hedge budget today: %s spent of %s, %s left; refills at %s\n", usd(h.GetSpentUsd()), usd(h.GetDailyUsd()),
					usd(h.GetRemainingUsd()), clock(h.GetResetTime(), now))
				_, err = fmt.Fprintf(r.env.Stdout, "hedges granted %s, refused %s (since the broker's owner %s started)\n",
					numfmt.Int(h.GetGranted()), numfmt.Int(h.GetRefused()), resp.GetOwner())
				return err
			}
		}}
}
