package tlsfiles_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090":                      true,
		"127.0.0.1:0":                         true,
		"localhost:9090":                      true,
		"[::1]:9090":                          true,
		"passthrough:///127.0.0.1:9090":       true,
		"dns:///localhost:9090":               true,
		"unix:///run/decider.sock":            true,
		"0.0.0.0:9090":                        false,
		":9090":                               false,
		"[::]:9090":                           false,
		"10.0.0.7:9090":                       false,
		"decider.switchboard.svc:9090":        false,
		"dns:///decider.switchboard.svc:9090": false,
		"dns://8.8.8.8/127.0.0.1.evil:9090":   false,
		"":                                    false,
	} {
		require.Equal(t, want, tlsfiles.Loopback(addr), addr)
	}
}
