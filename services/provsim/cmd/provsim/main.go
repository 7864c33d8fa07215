// Command provsim runs the provider simulator: OpenAI-compatible upstreams with
// configurable latency, caching, quotas and faults, for the demo and tests.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-ai/switchboard/services/provsim/app"
)

// version is the build version, set with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println("provsim", version)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := app.Run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "provsim:", err)
		os.Exit(1)
	}
}
