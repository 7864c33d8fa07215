package app

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDefaultConfigIsTheFlags: the flags' defaults are DefaultConfig, the
// one place the decider's defaults live.
func TestDefaultConfigIsTheFlags(t *testing.T) {
	t.Parallel()
	cfg, err := ParseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	def := DefaultConfig()
	if def.ID == "" {
		def.ID = "decider" // no host name: validation names the replica
	}
	require.Equal(t, def, cfg)
}

// TestStartDefaultsAreTheBinary: Start fills every field left zero from
// DefaultConfig, so Start(Config{}) runs what the binary runs, and a flag's
// 0 that turns a feature off reaches Start as its switch.
func TestStartDefaultsAreTheBinary(t *testing.T) {
	t.Parallel()
	bin, err := ParseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	zero := Config{}.withDefaults()
	zero.ID = bin.ID // validation names a replica without a host name
	require.Equal(t, bin, zero)

	off, err := ParseFlags([]string{"--drain-delay=0", "--probe-interval=0", "--hedge-budget-usd=0"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	off = off.withDefaults()
	require.Zero(t, off.DrainDelay)
	require.Zero(t, off.ProbeInterval)
	require.Zero(t, off.HedgeBudgetUSD)
	require.Equal(t, Config{NoDrainDelay: true, NoProbes: true, NoHedging: true}.withDefaults(), func() Config {
		off.ID = DefaultConfig().ID
		return off
	}())
}

func TestLeaseTermFlagsChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--broker-lease-term=100ms"},
		{"--broker-lease-term=20s"},
		{"--broker-lease-term=3s", "--broker-max-lease-term=2s"},
	} {
		_, err := ParseFlags(args, func(string) string { return "" }, io.Discard)
		require.ErrorContains(t, err, "--broker-lease-term", "%v", args)
	}
	c, err := ParseFlags([]string{"--broker-leases", "--broker-lease-term=4s", "--broker-max-lease-term=30s"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.True(t, c.BrokerLeases)
	require.Equal(t, 4*time.Second, c.BrokerLeaseTerm)
	require.Equal(t, 30*time.Second, c.BrokerMaxLeaseTerm)
}
