package server

import (
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
)

// SetMetrics makes the server record admission metrics; nil (the default)
// records none.
func (s *Server) SetMetrics(m *metrics.Admission) { s.metrics.Store(m) }
