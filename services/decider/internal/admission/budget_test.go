package admission

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// An owner that finds the hedge budget's key overwritten with something it
// cannot read (the empty string a NaN spend once left there) refuses hedges
// for the rest of the day and saves that, rather than starting the day
// again with the whole budget.
func TestUnreadableBudgetRefusesHedges(t *testing.T) {
	c := newCluster(t)
	cli := c.client(t, nil)
	_, err := cli.Put(t.Context(), BudgetKey, "")
	require.NoError(t, err)

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	budget := hedge.New(5, func() time.Time { return now })
	adm, err := Start(t.Context(), Options{
		Broker: newBroker(t), Budget: budget, Client: cli, Addr: "127.0.0.1:1", Every: 20 * time.Millisecond, LeaseTTL: 5,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	require.Eventually(t, adm.Owner, 10*time.Second, 10*time.Millisecond)

	ok, left, _ := budget.Acquire("r1", 0.01)
	require.False(t, ok, "the day started again at $5")
	require.Zero(t, left)

	// What is saved over the bad key is the spent day, which the next owner
	// restores.
	require.Eventually(t, func() bool {
		get, err := cli.Get(t.Context(), BudgetKey)
		require.NoError(t, err)
		var s statev1.HedgeBudgetState
		return len(get.Kvs) == 1 && proto.Unmarshal(get.Kvs[0].Value, &s) == nil && s.GetDay() == "2026-11-30" && s.GetSpentUsd() == 5
	}, 10*time.Second, 10*time.Millisecond, "the spent day is saved")
}
