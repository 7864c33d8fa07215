package probe

import (
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

func prober(sizes []int64, eps ...*switchboardv1.Endpoint) *Prober {
	return New(Options{
		Interval: 1, Sizes: sizes,
		Models: func() []routing.ModelEndpoints { return []routing.ModelEndpoints{{Model: "m", Endpoints: eps}} },
		Send:   func(*switchboardv1.ReportResponse) bool { return true },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// TestDefaultSizesCoverEveryBucket: without a probe in a bucket, an
// endpoint's speed there is known only from the traffic routing already
// sent it, so the defaults probe each bucket, short prompts included.
func TestDefaultSizesCoverEveryBucket(t *testing.T) {
	plan := prober(nil, &switchboardv1.Endpoint{Id: "a/m"}).Plan()
	seen := map[tokens.Bucket]int{}
	for _, cmd := range plan {
		require.Equal(t, "a/m", cmd.GetEndpoint().GetId())
		require.EqualValues(t, 8, cmd.GetMaxOutputTokens())
		seen[tokens.BucketOf(cmd.GetPromptTokens())]++
	}
	for b := range tokens.Bucket(tokens.NumBuckets) {
		require.Equal(t, 1, seen[b], "one probe in %s", b)
	}
}

// TestPlanSkipsSizesOverTheContext: an endpoint is not probed with a
// prompt it cannot take; its other sizes are.
func TestPlanSkipsSizesOverTheContext(t *testing.T) {
	plan := prober(nil, &switchboardv1.Endpoint{Id: "small/m", ContextLength: 32 * 1024}, &switchboardv1.Endpoint{Id: "big/m"}).Plan()
	got := map[string][]int64{}
	for _, cmd := range plan {
		got[cmd.GetEndpoint().GetId()] = append(got[cmd.GetEndpoint().GetId()], cmd.GetPromptTokens())
	}
	require.Equal(t, []int64{2 * 1024, 20 * 1024}, got["small/m"])
	require.Equal(t, DefaultSizes, got["big/m"])
}
