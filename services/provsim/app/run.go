package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"

	"github.com/switchboard-ai/switchboard/pkg/flagenv"
)

// Environment fallbacks of Run's flags.
const (
	EnvConfig    = "SWITCHBOARD_PROVSIM_CONFIG"
	EnvSeed      = "SWITCHBOARD_PROVSIM_SEED"
	EnvLogLevel  = "SWITCHBOARD_PROVSIM_LOG_LEVEL"
	EnvTimeScale = "SWITCHBOARD_PROVSIM_TIME_SCALE"
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
//	--time-scale overrides the config's time_scale: every delay is multiplied by it (Optional; SWITCHBOARD_PROVSIM_TIME_SCALE)
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("provsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "path of the YAML config (required; env "+EnvConfig+")")
	seedText := fs.String("seed", "", "seed for jitter and fault draws, overriding the config's (env "+EnvSeed+")")
	scaleText := fs.String("time-scale", "", "multiply every delay (first token, token gaps, Retry-After) by this, overriding the config's time_scale (env "+EnvTimeScale+")")
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
	var scale float64
	if *scaleText != "" {
		v, err := strconv.ParseFloat(*scaleText, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("--time-scale: want a finite number above 0, got %q", *scaleText))
		}
		scale = v
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
	if *scaleText != "" {
		cfg.TimeScale = scale
	}
	sim, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down", "component", "provsim")
	return sim.Close()
}
