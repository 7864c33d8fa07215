package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestExperimentCalls(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	_, err := f.client.GetExperiment(ctx, &switchboardv1.GetExperimentRequest{})
	requireCode(t, codes.NotFound, err, "no experiment yet")
	_, err = f.client.StopExperiment(ctx, &switchboardv1.StopExperimentRequest{})
	requireCode(t, codes.NotFound, err, "nothing to stop")
	_, err = f.client.StartExperiment(ctx, &switchboardv1.StartExperimentRequest{Experiment: &switchboardv1.Experiment{
		Arms: []string{"smart", "fastest"}, Block: durationpb.New(time.Hour),
	}})
	requireCode(t, codes.InvalidArgument, err, "an unknown policy")
	_, err = f.client.StartExperiment(ctx, &switchboardv1.StartExperimentRequest{Experiment: &switchboardv1.Experiment{
		Arms: []string{"smart", "routing-cost"}, Block: durationpb.New(time.Hour), Models: []string{model, "vendor/nope"},
	}})
	requireCode(t, codes.InvalidArgument, err, "a model not in the catalog")

	exp := &switchboardv1.Experiment{Arms: []string{"smart", "routing-cost"}, Block: durationpb.New(time.Hour), BurnIn: durationpb.New(time.Minute), Models: []string{"model-alias"}}
	started, err := f.client.StartExperiment(ctx, &switchboardv1.StartExperimentRequest{Experiment: exp})
	require.NoError(t, err)
	require.NotEmpty(t, started.GetExperiment().GetId())
	require.Equal(t, []string{model}, started.GetExperiment().GetModels(), "a model named by alias is measured by its id")
	_, err = f.client.StartExperiment(ctx, &switchboardv1.StartExperimentRequest{Experiment: exp})
	requireCode(t, codes.FailedPrecondition, err, "one is running")
	got, err := f.client.GetExperiment(ctx, &switchboardv1.GetExperimentRequest{})
	require.NoError(t, err)
	require.Equal(t, started.GetExperiment().GetId(), got.GetExperiment().GetId())
	require.Len(t, got.GetArms(), 2)
	stopped, err := f.client.StopExperiment(ctx, &switchboardv1.StopExperimentRequest{})
	require.NoError(t, err)
	require.NotNil(t, stopped.GetExperiment().GetStopTime())
	_, err = f.client.StartExperiment(ctx, &switchboardv1.StartExperimentRequest{Experiment: exp})
	require.NoError(t, err, "a stopped experiment makes way for a new one")
}
