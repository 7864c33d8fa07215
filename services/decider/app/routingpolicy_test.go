package app

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
)

func TestParseFlagsRoutingPolicy(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "smart", cfg.RoutingPolicy, "smart stays the default")
	require.InDelta(t, 0.10, cfg.RoutingCostMargin, 0)
	require.InDelta(t, 0.02, cfg.RoutingCostFloor, 0)

	env := map[string]string{"SWITCHBOARD_DECIDER_ROUTING_POLICY": "routing-cost"}
	cfg, err = ParseFlags([]string{"--catalog=c.yaml"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "routing-cost", cfg.RoutingPolicy)

	_, err = ParseFlags([]string{"--catalog=c.yaml", "--routing-policy=fastest", "--routing-cost-floor=0.6"}, none, io.Discard)
	require.ErrorContains(t, err, `--routing-policy: unknown routing policy "fastest"`)
	require.ErrorContains(t, err, "--routing-cost-floor 0.6 below 0.5")
}

func TestParseFlagsCooldownRule(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "breaker", cfg.CooldownRule, "the breaker is the default")
	require.Equal(t, cooldown.Breaker, cfg.cooldownOptions())

	cfg, err = ParseFlags([]string{"--catalog=c.yaml", "--cooldown-rule=first-refusal", "--cooldown=5m"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, cooldown.Options{Duration: 5 * time.Minute, Errors: 1, Window: time.Minute}, cfg.cooldownOptions(),
		"a flag overrides its part of the named rule")

	_, err = ParseFlags([]string{"--catalog=c.yaml", "--cooldown-rule=forever"}, none, io.Discard)
	require.ErrorContains(t, err, `--cooldown-rule: unknown rule "forever"`)
}
