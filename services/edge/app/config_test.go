package app

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr []string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c Config) {
				require.Equal(t, DefaultListen, c.Listen)
				require.Equal(t, DefaultDecider, c.Decider)
				require.Equal(t, DefaultRegion, c.Region)
				require.NotEmpty(t, c.EdgeID)
				require.EqualValues(t, 32<<20, c.MaxBodyBytes)
				require.Equal(t, 60*time.Second, c.FirstTokenTimeout)
				require.Equal(t, 60*time.Second, c.IdleTimeout)
				require.Equal(t, 4, c.MaxAttempts)
				require.Equal(t, 10*time.Second, c.RetryWait)
				require.Equal(t, 200*time.Millisecond, c.ReportFlushInterval)
				require.Equal(t, 200*time.Millisecond, c.HedgeAcquireTimeout)
				require.Equal(t, 2*time.Minute, c.ReservationTTL)
				require.Equal(t, 40*time.Second, c.ReservationHeartbeat, "a third of the TTL")
				require.Equal(t, 300*time.Millisecond, c.ReserveTimeout)
				require.Equal(t, slog.LevelInfo, c.LogLevel)
				require.Equal(t, 100*time.Millisecond, c.LogFlushInterval)
				require.Equal(t, 5*time.Minute, c.ShutdownGrace)
				require.Equal(t, 30*time.Second, c.BodyReadTimeout)
				require.Equal(t, 64, c.MaxUnverifiedBodies)
				require.Equal(t, 30*time.Second, c.WriteTimeout)
				require.Equal(t, 30*time.Minute, c.MaxQueueWait)
				require.Equal(t, 10*time.Second, c.DeciderKeepalive)
				require.NotNil(t, c.Getenv)
			},
		},
		{
			name: "flags",
			args: []string{"--listen", "0.0.0.0:9000", "--decider", "decider:9090", "--region", "eu", "--edge-id", "e1",
				"--max-body-bytes", "1024", "--first-token-timeout", "5s", "--stream-idle-timeout", "7s",
				"--max-attempts", "2", "--retry-wait", "3s", "--report-flush-interval", "1s", "--drain-delay", "2s", "--log-level", "debug",
				"--hedge-acquire-timeout", "50ms", "--reservation-ttl", "10m", "--reserve-timeout", "150ms",
				"--shutdown-grace", "20m", "--body-read-timeout", "5s", "--max-unverified-bodies", "8", "--write-timeout", "9s",
				"--max-queue-wait", "3m", "--decider-keepalive", "6s", "--decider-plaintext", "--log-flush-interval", "0"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, Config{
					Listen: "0.0.0.0:9000", Decider: "decider:9090", Region: "eu", EdgeID: "e1", MaxBodyBytes: 1024,
					FirstTokenTimeout: 5 * time.Second, IdleTimeout: 7 * time.Second, MaxAttempts: 2, RetryWait: 3 * time.Second,
					ReportFlushInterval: time.Second, DrainDelay: 2 * time.Second, LogLevel: slog.LevelDebug,
					HedgeAcquireTimeout: 50 * time.Millisecond, ReservationTTL: 10 * time.Minute, ReservationHeartbeat: 10 * time.Minute / 3, ReserveTimeout: 150 * time.Millisecond,
					ShutdownGrace: 20 * time.Minute, BodyReadTimeout: 5 * time.Second, MaxUnverifiedBodies: 8, WriteTimeout: 9 * time.Second,
					MaxQueueWait: 3 * time.Minute, DeciderKeepalive: 6 * time.Second, ProviderKeyPrefix: "SWITCHBOARD_PROVIDER_KEY_", ProviderKeyReload: 10 * time.Second, DeciderPlaintext: true,
				}, withoutGetenv(c))
			},
		},
		{
			name: "environment fallback",
			env: map[string]string{
				"SWITCHBOARD_EDGE_LISTEN": "127.0.0.1:1234", "SWITCHBOARD_EDGE_REGION": "us",
				"SWITCHBOARD_EDGE_FIRST_TOKEN_TIMEOUT": "3s", "SWITCHBOARD_EDGE_MAX_ATTEMPTS": "3",
				"SWITCHBOARD_EDGE_EDGE_ID": "pod-7", "SWITCHBOARD_EDGE_LOG_LEVEL": "warn",
				"SWITCHBOARD_EDGE_RESERVATION_TTL": "5m", "SWITCHBOARD_EDGE_SHUTDOWN_GRACE": "10m",
			},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "127.0.0.1:1234", c.Listen)
				require.Equal(t, "us", c.Region)
				require.Equal(t, 3*time.Second, c.FirstTokenTimeout)
				require.Equal(t, 3, c.MaxAttempts)
				require.Equal(t, "pod-7", c.EdgeID)
				require.Equal(t, slog.LevelWarn, c.LogLevel)
				require.Equal(t, 5*time.Minute, c.ReservationTTL)
				require.Equal(t, 10*time.Minute, c.ShutdownGrace)
				require.Equal(t, "us", c.Getenv("SWITCHBOARD_EDGE_REGION"), "getenv is kept for credentials")
			},
		},
		{
			name: "flag wins over environment",
			args: []string{"--region", "flag"},
			env:  map[string]string{"SWITCHBOARD_EDGE_REGION": "env"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "flag", c.Region)
			},
		},
		{
			name: "every error at once",
			args: []string{"--listen", "nope", "--max-attempts", "0", "--first-token-timeout", "-1s", "--max-body-bytes", "0",
				"--reservation-ttl", "-1m", "--reserve-timeout", "-1s", "--shutdown-grace", "-1s", "--body-read-timeout", "-1s",
				"--max-unverified-bodies", "-1", "--write-timeout", "-1s", "--decider-keepalive", "1s"},
			env: map[string]string{"SWITCHBOARD_EDGE_STREAM_IDLE_TIMEOUT": "soon"},
			wantErr: []string{"--listen", "--max-attempts", "--first-token-timeout", "--max-body-bytes",
				"SWITCHBOARD_EDGE_STREAM_IDLE_TIMEOUT", "--reservation-ttl", "--reserve-timeout", "--shutdown-grace",
				"--body-read-timeout", "--max-unverified-bodies", "--write-timeout", "--decider-keepalive 1s: at least 5s"},
		},
		{
			name:    "a heartbeat that does not beat the TTL",
			args:    []string{"--reservation-ttl", "30s", "--reservation-heartbeat", "30s"},
			wantErr: []string{"--reservation-heartbeat"},
		},
		{
			name: "provider credentials",
			args: []string{"--provider-key-dir", "/run/secrets/providers", "--provider-key-reload", "5s",
				"--provider-key-hosts", "SWITCHBOARD_PROVIDER_KEY_ALPHA=api.alpha.example,alpha.example:8443"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "SWITCHBOARD_PROVIDER_KEY_", c.ProviderKeyPrefix)
				require.Equal(t, "/run/secrets/providers", c.ProviderKeyDir)
				require.Equal(t, 5*time.Second, c.ProviderKeyReload)
				require.Equal(t, "SWITCHBOARD_PROVIDER_KEY_ALPHA=api.alpha.example,alpha.example:8443", c.ProviderKeyHosts)
			},
		},
		{
			name:    "bad provider credential settings",
			args:    []string{"--provider-key-prefix", "aws", "--provider-key-hosts", "NOEQUALS;X=https://x/", "--provider-key-reload", "0s"},
			wantErr: []string{"--provider-key-prefix", "--provider-key-hosts", "NOEQUALS", "a host, not a URL", "--provider-key-reload"},
		},
		{
			name: "decider over mutual TLS",
			args: []string{"--decider", "dns:///decider:9090", "--decider-ca-file", "ca.crt", "--decider-cert-file", "edge.crt",
				"--decider-key-file", "edge.key", "--decider-server-name", "decider.switchboard.svc"},
			check: func(t *testing.T, c Config) {
				require.Equal(t, "ca.crt", c.DeciderCAFile)
				require.Equal(t, "edge.crt", c.DeciderCertFile)
				require.Equal(t, "edge.key", c.DeciderKeyFile)
				require.Equal(t, "decider.switchboard.svc", c.DeciderServerName)
				require.True(t, c.deciderTLS())
			},
		},
		{
			name:    "TLS flags that disagree",
			args:    []string{"--decider-cert-file", "edge.crt", "--decider-plaintext"},
			wantErr: []string{"--decider-key-file", "--decider-plaintext"},
		},
		{
			name:    "unknown flag",
			args:    []string{"--bogus"},
			wantErr: []string{"bogus"},
		},
		{
			name:    "positional argument",
			args:    []string{"extra"},
			wantErr: []string{"unexpected arguments"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseFlags(tt.args, func(k string) string { return tt.env[k] })
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				for _, w := range tt.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func withoutGetenv(c Config) Config {
	c.Getenv = nil
	return c
}

func TestParseFlagsHelp(t *testing.T) {
	_, err := ParseFlags([]string{"-help"}, func(string) string { return "" })
	require.ErrorIs(t, err, flag.ErrHelp)
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		wantOut string
	}{
		{name: "clean shutdown", args: []string{"--listen", "127.0.0.1:0", "--decider", "127.0.0.1:1"}},
		{name: "help", args: []string{"-help"}, wantOut: "first-token-timeout"},
		{name: "bad flags", args: []string{"--max-attempts", "x"}, wantErr: true},
		{name: "listen fails", args: []string{"--listen", "256.0.0.1:0"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			var out bytes.Buffer
			err := Run(ctx, tt.args, &out)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Contains(t, out.String(), tt.wantOut)
		})
	}
}

// A plaintext connection to a decider on another machine must be chosen:
// the edge refuses to start without TLS or --decider-plaintext.
func TestPlaintextDeciderOffLoopbackIsRefused(t *testing.T) {
	for _, decider := range []string{"decider.switchboard.svc:9090", "dns:///decider.switchboard.svc:9090", "10.0.0.7:9090"} {
		_, err := Start(t.Context(), Config{Listen: "127.0.0.1:0", Decider: decider}, nil)
		require.ErrorContains(t, err, "--decider-ca-file", decider)
		require.ErrorContains(t, err, "--decider-plaintext", decider)
	}
	e, err := Start(t.Context(), Config{Listen: "127.0.0.1:0", Decider: "10.0.0.7:9090", DeciderPlaintext: true}, nil)
	require.NoError(t, err)
	require.NoError(t, e.Close())
}
