package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/switchboard-ai/switchboard/pkg/flagenv"
)

// Environment fallbacks of Run's flags.
const (
	EnvConfig   = "SWITCHBOARD_PROVSIM_CONFIG"
	EnvSeed     = "SWITCHBOARD_PROVSIM_SEED"
	EnvLogLevel = "SWITCHBOARD_PROVSIM_LOG_LEVEL"
)

// Run is the simulator's main: it parses args, loads the config, serves every
// provider until ctx is done, then closes them. Logs go to stderr. A clean
// shutdown returns nil; -h prints usage and returns nil.
//
// Flags (each with an environment fallback):
//
//	--config     YAML config path (Required; SWITCHBOARD_PROVSIM_CONFIG)
//	--seed       overrides the config's seed (Optional; SWITCHBOARD_PROVSIM_SEED)
//	--log-level  debug, info, warn or error (Optional; SWITCHBOARD_PROVSIM_LOG_LEVEL). Defaults to info.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("provsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "path of the YAML config (required; env "+EnvConfig+")")
	seedText := fs.String("seed", "", "seed for jitter and fault draws, overriding the config's (env "+EnvSeed+")")
	levelText := fs.String("log-level", "info", "log level: debug, info, warn, error (env "+EnvLogLevel+")")
	parseErr := flagenv.Parse(fs, "SWITCHBOARD_PROVSIM", args, os.Getenv)
	if errors.Is(parseErr, flag.ErrHelp) {
		return nil
	}

	errs := []error{parseErr}
	if *configPath == "" {
		errs = append(errs, errors.New("--config: required (or set "+EnvConfig+")"))
	}
	var seed int64
	if *seedText != "" {
		v, err := strconv.ParseInt(*seedText, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("--seed: %w", err))
		}
		seed = v
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*levelText)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := LoadConfig(*configPath)
	if err != nil {
		return err
	}
	if *seedText != "" {
		cfg.Seed = seed
	}
	sim, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down", "component", "provsim")
	return sim.Close()
}
