package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cli"
)

// ExperimentCommand is the `decider experiment start|stop|show` command: it
// starts, stops and reads a switchback experiment on a running decider
// (an operator's call).
func ExperimentCommand(ctx context.Context, args []string, stdout io.Writer) error {
	const usage = "usage: decider experiment start|stop|show [flags] (each with -help)"
	if len(args) == 0 {
		return errors.New(usage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	}
	fs := flag.NewFlagSet("decider experiment "+sub, flag.ContinueOnError)
	fs.SetOutput(stdout)
	dial := addDialFlags(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	var build func() (*switchboardv1.StartExperimentRequest, error)
	switch sub {
	case "start":
		build = cli.StartFlags(fs)
	case "stop", "show":
	default:
		return fmt.Errorf("unknown experiment command %q: use start, stop or show", sub)
	}
	if err := flagenv.Parse(fs, "SWITCHBOARD_EXPERIMENT", args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var req *switchboardv1.StartExperimentRequest
	if build != nil {
		var err error
		if req, err = build(); err != nil {
			return err
		}
	}
	//nolint:contextcheck // credentials outlive any one call; each handshake has its own context
	conn, closeConn, err := dial.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	client := switchboardv1.NewOperatorServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var resp proto.Message
	switch sub {
	case "start":
		resp, err = client.StartExperiment(ctx, req)
	case "stop":
		resp, err = client.StopExperiment(ctx, &switchboardv1.StopExperimentRequest{})
	default:
		resp, err = client.GetExperiment(ctx, &switchboardv1.GetExperimentRequest{})
	}
	if err != nil {
		return err
	}
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(out))
		return err
	}
	switch r := resp.(type) {
	case *switchboardv1.StartExperimentResponse:
		fmt.Fprint(stdout, "started ")
		cli.PrintDefinition(stdout, r.GetExperiment())
	case *switchboardv1.StopExperimentResponse:
		fmt.Fprint(stdout, "stopped ")
		cli.PrintDefinition(stdout, r.GetExperiment())
	case *switchboardv1.GetExperimentResponse:
		PrintExperiment(stdout, r)
	}
	return nil
}

// PrintExperiment writes an experiment's figures (cli.PrintExperiment).
func PrintExperiment(w io.Writer, r *switchboardv1.GetExperimentResponse) { cli.PrintExperiment(w, r) }
