// Command switchboard is an operator's view of a running Switchboard
// decider: its catalog, endpoint statistics, rate-limit broker, hedge
// budget, experiments and activity, and the offline catalog check.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-ai/switchboard/services/decider/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	dir, err := os.Getwd()
	if err != nil {
		dir = "."
	}
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Dir: dir})
	stop()
	os.Exit(code)
}
