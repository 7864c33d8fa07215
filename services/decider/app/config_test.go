package app

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultConfigIsTheFlags: the flags' defaults are DefaultConfig, the
// one place the decider's defaults live.
func TestDefaultConfigIsTheFlags(t *testing.T) {
	cfg, err := ParseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	def := DefaultConfig()
	if def.ID == "" {
		def.ID = "decider" // no host name: validation names the replica
	}
	require.Equal(t, def, cfg)
}
