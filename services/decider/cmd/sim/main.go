// Command sim replays a simulated day of traffic through the decider's
// routing code in virtual time and prints, per routing policy, the time to
// first token and cost it yields. See docs/simulation.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/switchboard-ai/switchboard/services/decider/internal/sim"
)

func main() {
	if err := sim.Main(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sim:", err)
		}
		os.Exit(1)
	}
}
