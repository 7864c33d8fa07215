package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
)

// experimentStatus turns the experiment package's errors into statuses.
func experimentStatus(err error) error {
	switch {
	case errors.Is(err, experiment.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, experiment.ErrRunning):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, experiment.ErrNone):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, "the experiment store is not reachable")
}

// StartExperiment implements [switchboardv1.OperatorServiceServer.StartExperiment].
func (s *Server) StartExperiment(ctx context.Context, req *switchboardv1.StartExperimentRequest) (*switchboardv1.StartExperimentResponse, error) {
	m, r := s.experiments, s.router
	// A model the catalog does not have would be measured as nothing; one
	// named by an alias is measured by its id, which records name.
	models := req.GetExperiment().GetModels()
	for i, model := range models {
		id, ok := r.Resolve(model)
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "model %q is not in the catalog", model)
		}
		models[i] = id
	}
	def, err := m.Start(ctx, req)
	if err != nil {
		return nil, experimentStatus(err)
	}
	return &switchboardv1.StartExperimentResponse{Experiment: def}, nil
}

// StopExperiment implements [switchboardv1.OperatorServiceServer.StopExperiment].
func (s *Server) StopExperiment(ctx context.Context, _ *switchboardv1.StopExperimentRequest) (*switchboardv1.StopExperimentResponse, error) {
	def, err := s.experiments.Stop(ctx)
	if err != nil {
		return nil, experimentStatus(err)
	}
	return &switchboardv1.StopExperimentResponse{Experiment: def}, nil
}

// GetExperiment implements [switchboardv1.OperatorServiceServer.GetExperiment].
func (s *Server) GetExperiment(ctx context.Context, _ *switchboardv1.GetExperimentRequest) (*switchboardv1.GetExperimentResponse, error) {
	resp, err := s.experiments.Get(ctx)
	if err != nil {
		return nil, experimentStatus(err)
	}
	return resp, nil
}
