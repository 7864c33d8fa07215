// Package simulate is the public entry of the routing simulation, whose
// engine is internal to the decider: the sim command and the check of the
// model against the real edge, decider and provider simulator (in the tests
// module) run it. docs/simulation.md describes the program.
package simulate

import (
	"io"

	"github.com/switchboard-ai/switchboard/services/decider/internal/sim"
)

// Main runs the simulator with command-line args (those of the sim command),
// writing its table to out and its diagnostics to errOut.
func Main(args []string, out, errOut io.Writer) error {
	return sim.Main(args, out, errOut)
}
