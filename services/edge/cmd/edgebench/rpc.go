package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// rpcKind is one kind of call made straight to the decider, to show what
// the one Decide per request costs by itself.
type rpcKind struct {
	name string
	call func(ctx context.Context, conn *grpc.ClientConn, s *system) error
}

var rpcKinds = []rpcKind{
	{
		// The floor of any call: gRPC's health check, answered from memory.
		name: "empty call (grpc.health.v1.Health/Check)",
		call: func(ctx context.Context, conn *grpc.ClientConn, _ *system) error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
	},
	{
		// What the edge asks for each request, but without reserving:
		// a reservation is reconciled by the edge's report, which this
		// client does not send.
		name: "Decide, as the edge asks it, without reserving",
		call: func(ctx context.Context, conn *grpc.ClientConn, s *system) error {
			_, err := switchboardv1.NewRouterServiceClient(conn).Decide(ctx, &switchboardv1.DecideRequest{
				RequestId: "gen-" + randomHex(14),
				Identity:  &switchboardv1.Identity{ApiKeySha256: sha256Hex(s.key)},
				Model:     benchModel,
				Tokens:    &switchboardv1.TokenEstimate{InputTokens: 12, MaxOutputTokens: 4096},
				Stream:    true,
				Region:    "local",
			})
			return err
		},
	},
}

// rpcKey names the runs of one kind of call at one concurrency.
type rpcKey struct {
	kind string
	conc int
}

// rpcPhase calls the decider directly, as the edge would, closed-loop at
// each of the loads' concurrencies: the latency of one call, and the CPU
// per call of the decider and of this client (the load generator's own
// process, otherwise idle in this phase).
func rpcPhase(ctx context.Context, cfg config, s *system, w io.Writer, res *results) error {
	conn, err := grpc.NewClient(s.decider.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer.Token(s.edgeToken)))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	self := os.Getpid()
	fmt.Fprintln(w, "Calls straight to the decider, as the edge makes them (one connection; median [min–max] over the rounds):")
	fmt.Fprintf(w, "%-48s %-6s %-18s %-18s %-18s %-24s %s\n", "call", "conc", "calls/s", "p50 ms", "p99 ms", "CPU µs/call decider", "CPU µs/call client")
	for _, c := range cfg.concurrency {
		for _, k := range rpcKinds {
			var ss []sample
			for range cfg.rounds {
				// Half the loads' time: one call is simpler to measure.
				r, err := driveRPC(ctx, conn, s, k, c, self, cfg.warmup, cfg.duration/2)
				if err != nil {
					return err
				}
				ss = append(ss, r)
			}
			res.rpc[rpcKey{k.name, c}] = ss
			fig := func(f func(sample) float64) spread { return spreadOf(figure(ss, f)) }
			errs := 0
			for _, r := range ss {
				errs += r.errs
			}
			fmt.Fprintf(w, "%-48s %-6d %-18s %-18s %-18s %-24s %s", k.name, c,
				fig(rps).format("%.0f"), fig(p50).format("%.3f"), fig(p99).format("%.3f"),
				fig(func(r sample) float64 { return r.cpuPerReq("decider") }).format("%.0f"),
				fig(func(r sample) float64 { return r.cpuPerReq("client") }).format("%.0f"))
			if errs > 0 {
				fmt.Fprintf(w, "   (%d errors)", errs)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	return nil
}

// driveRPC makes k's call closed-loop from conc clients for warmup, then
// measures for dur, with the CPU of the decider and of this process.
func driveRPC(ctx context.Context, conn *grpc.ClientConn, s *system, k rpcKind, conc, self int, warmup, dur time.Duration) (sample, error) {
	pids := map[string]int{"client": self, "decider": s.decider.Pid()}
	return closedLoop(ctx, conc, warmup, dur, pids, nil, func(ctx context.Context, _ []byte) (time.Duration, time.Duration, error) {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := k.call(cctx, conn, s)
		d := time.Since(start)
		return d, d, err
	})
}
