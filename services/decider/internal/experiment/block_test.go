package experiment

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBlockRoundTrip: a block kept in etcd reads back as it was, and bytes
// that are no ExperimentBlock are refused.
func TestBlockRoundTrip(t *testing.T) {
	b := &block{requests: 7, burnIn: 2, costUSD: 1.25, tokens: 900, rateLimited: 1, retried: 3, failedMS: 12.5}
	for _, v := range []float64{5, 50, 500, 5000} {
		b.ttft.add(v)
		b.callerTTFT.add(v * 2)
		b.throughput.add(v / 10)
		b.e2e.add(v * 3)
	}
	data, err := encodeBlock(b)
	require.NoError(t, err)
	got, err := decodeBlock(data)
	require.NoError(t, err)
	require.Equal(t, b, got)

	for _, bad := range []string{"{", `{"requests":1}`, "\xff\xff\xff"} {
		_, err := decodeBlock([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}
