// Package flagenv lets every flag of a command fall back to an environment
// variable, so the same binary is configured by flags on a laptop and by env
// in a Kubernetes manifest.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Name returns the environment variable for a flag: prefix + "_" + the flag
// name upper-cased with '-' as '_', e.g. SWITCHBOARD_DECIDER_DATA_DIR.
func Name(prefix, flagName string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse applies environment values to fs's flags, then parses args, so an
// explicit flag wins over the environment, which wins over the default. Bad
// environment values and bad arguments are reported together, so a user
// sees every mistake at once; flag.ErrHelp comes back alone.
func Parse(fs *flag.FlagSet, prefix string, args []string, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := Name(prefix, f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		errs = append(errs, err)
	} else if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	return errors.Join(errs...)
}
