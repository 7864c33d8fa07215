// Package cli is the switchboard command: an operator's view of a running
// decider (its catalog, endpoint statistics, rate-limit broker, hedge
// budget, experiments and activity) and the offline catalog check, as
// tables for people and JSON for scripts. Every read calls the decider's
// OperatorService (RouterService.ListActivity for the activity) with an
// operator's credential.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Version is the build version, set with -ldflags.
var Version = "dev"

// Env is what a run of the command reads and writes besides its arguments.
type Env struct {
	// Stdout receives the output, Stderr the errors.
	Stdout, Stderr io.Writer
	// Getenv reads the environment.
	Getenv func(string) string
	// Dir is the directory the default credential file is looked for in
	// (DefaultTokenFile below it): the working directory.
	Dir string
	// Every is how often `activity tail` polls. (Optional) Defaults to 2s.
	Every time.Duration
}

// command is one subcommand.
type command struct {
	name    string // as typed: "catalog validate"
	args    string // positional arguments, e.g. "FILE"
	summary string // one line, for the command list
	about   string // a paragraph, for its --help
	// dial says the command calls the decider: it takes the connection flags.
	dial bool
	// setup registers the command's own flags and returns what runs it.
	setup func(fs *flag.FlagSet) func(ctx context.Context, r *run) error
}

// run is one invocation of a command: its parsed flags and positional
// arguments, its output and its connection.
type run struct {
	env  Env
	cmd  *command
	args []string
	out  *string // -o
	conn *connFlags
}

// commands are every subcommand, in the order --help lists them.
func commands() []*command {
	return []*command{
		catalogValidateCommand(), catalogShowCommand(), statsCommand(), explainCommand(), brokerCommand(), hedgeCommand(),
		experimentStartCommand(), experimentStopCommand(), experimentShowCommand(), activityTailCommand(), versionCommand(),
	}
}

// Exit codes: 0 done, 1 failed, 2 a usage mistake.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError is a mistake in the command line: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// Main runs the command line args (without the program name) and returns
// the exit code: 0 done (--help included), 1 failed, 2 a usage mistake.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	err := dispatch(ctx, args, env)
	if err == nil {
		return 0
	}
	fmt.Fprintln(env.Stderr, "switchboard:", err)
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitFailed
}

func dispatch(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		printUsage(env.Stderr)
		return usagef("name a command (switchboard --help lists them)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printUsage(env.Stdout)
		return nil
	case "-version", "--version":
		_, err := fmt.Fprintln(env.Stdout, "switchboard", Version)
		return err
	}
	cmds := commands()
	// The longest command name the arguments start with: "catalog show" before "catalog".
	var found *command
	for _, c := range cmds {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) && (found == nil || len(words) > len(strings.Fields(found.name))) {
			found = c
		}
	}
	if found == nil {
		return unknownCommand(cmds, args)
	}
	return found.execute(ctx, args[len(strings.Fields(found.name)):], env)
}

// unknownCommand names what the arguments could have meant.
func unknownCommand(cmds []*command, args []string) error {
	var group []string
	for _, c := range cmds {
		if first, rest, ok := strings.Cut(c.name, " "); ok && first == args[0] {
			group = append(group, rest)
		}
	}
	if len(group) > 0 {
		if len(args) == 1 || strings.HasPrefix(args[1], "-") {
			if len(args) > 1 && isHelp(args[1]) {
				return nil
			}
			return usagef("%s needs a subcommand: %s (each with --help)", args[0], strings.Join(group, ", "))
		}
		return usagef("unknown command %q: %s has %s", args[0]+" "+args[1], args[0], strings.Join(group, ", "))
	}
	return usagef("unknown command %q: switchboard --help lists the commands", args[0])
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// printUsage writes the command list.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, "switchboard %s: an operator's view of a running Switchboard decider.\n\nusage: switchboard COMMAND [ARGS] [FLAGS]\n\ncommands:\n", Version)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, `
Each command takes --help. Commands that call the decider take:
  --decider HOST:PORT   its gRPC address (env SWITCHBOARD_DECIDER; default %s, make run's)
  --token-file FILE     an operator's bearer token (env SWITCHBOARD_TOKEN_FILE; default %s, make run's)
  -o table|json         human tables (default) or JSON for scripts
`, DefaultAddr, DefaultTokenFile)
}

// execute parses the command's flags and positional arguments and runs it.
func (c *command) execute(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("switchboard "+c.name, flag.ContinueOnError)
	fs.SetOutput(env.Stdout)
	r := &run{env: env, cmd: c}
	r.out = fs.String("o", "table", "output: table or json")
	if c.dial {
		r.conn = addConnFlags(fs)
	}
	exec := c.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(env.Stdout, "usage: switchboard %s [flags]\n\n%s\n\nflags:\n", strings.TrimSpace(c.name+" "+c.args), c.about)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return usageError{err.Error()}
	}
	if *r.out != "table" && *r.out != "json" {
		return usagef("-o %q: use -o table or -o json", *r.out)
	}
	if c.dial {
		if err := r.conn.fromEnv(fs, env.Getenv); err != nil {
			return err
		}
	}
	r.args = pos
	return exec(ctx, r)
}

// parseInterleaved parses flags anywhere among the positional arguments
// ("stats vendor/model -o json"), which flag.Parse alone stops at, and
// returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		rest := fs.Args()
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// positional checks the count of positional arguments: between lo and hi.
func (r *run) positional(lo, hi int) error {
	switch n := len(r.args); {
	case n < lo:
		return usagef("switchboard %s needs %s (--help says more)", r.cmd.name, r.cmd.args)
	case n > hi:
		return usagef("switchboard %s: unexpected arguments %q", r.cmd.name, r.args[hi:])
	}
	return nil
}

// json reports whether -o json was asked for.
func (r *run) json() bool { return *r.out == "json" }

// table is a tab-aligned table on w.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

// row writes cells as one row of tw.
func row(tw io.Writer, cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }

// versionCommand is `switchboard version`.
func versionCommand() *command {
	return &command{name: "version", summary: "print this command's version", about: "Prints the version of this switchboard command.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(_ context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				if r.json() {
					return writeJSONValue(r.env.Stdout, map[string]string{"version": Version})
				}
				_, err := fmt.Fprintln(r.env.Stdout, "switchboard", Version)
				return err
			}
		}}
}
