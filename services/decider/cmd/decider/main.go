// Command decider is Switchboard's central routing and admission service.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-ai/switchboard/services/decider/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := func() error { return app.Run(ctx, os.Args[1:], os.Stderr) }
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "explain":
			run = func() error { return app.Explain(ctx, os.Args[2:], os.Stdout) }
		case "experiment":
			run = func() error { return app.ExperimentCommand(ctx, os.Args[2:], os.Stdout) }
		case "certs":
			run = func() error { return app.Certs(os.Args[2:], os.Stdout) }
		case "-version", "--version", "version":
			run = func() error { _, err := fmt.Println("decider", app.Version); return err }
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "decider:", err)
		os.Exit(1)
	}
}
