package grpcserver

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// shuttingDown is the message of the status that ends a health Watch when
// its server shuts down.
const shuttingDown = "server shutting down"

// healthService is the grpc.health.v1 service of a Server: health.Server's
// Check and List, and its Watch, except that a Watch ends when the server
// shuts down. health.Server's Watch returns only when its watcher leaves;
// a load balancer or a client's health checking never does, and
// GracefulStop waits for every stream, so one watcher would hold Shutdown
// for its whole timeout and turn it into a hard stop.
type healthService struct {
	*health.Server
	// ending is cancelled when the server shuts down: every Watch ends.
	ending context.Context
	end    context.CancelFunc
}

func newHealthService(h *health.Server) *healthService {
	ending, end := context.WithCancel(context.Background())
	return &healthService{Server: h, ending: ending, end: end}
}

// Watch implements [healthpb.HealthServer.Watch]: health.Server's, until
// the server shuts down; then the watcher's last status is NOT_SERVING,
// never SERVING, and the stream ends with Unavailable.
func (h *healthService) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	last := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ending.Err() == nil {
		ctx, cancel := context.WithCancel(stream.Context())
		defer cancel()
		stop := context.AfterFunc(h.ending, cancel)
		defer stop()
		w := &watchStream{Health_WatchServer: stream, ctx: ctx, last: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}
		err := h.Server.Watch(in, w)
		if h.ending.Err() == nil || stream.Context().Err() != nil {
			return err // the watcher left (or its stream broke)
		}
		last = w.last
	} else if err := stream.Send(&healthpb.HealthCheckResponse{Status: last}); err != nil {
		return err
	}
	// health.Server's Watch may have seen the end before its last update.
	if last == healthpb.HealthCheckResponse_SERVING {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, shuttingDown)
}

// watchStream is a Watch stream whose context ends when the server shuts
// down, and which remembers the last status it sent.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	last healthpb.HealthCheckResponse_ServingStatus
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(m *healthpb.HealthCheckResponse) error {
	if err := w.Health_WatchServer.Send(m); err != nil {
		return err
	}
	w.last = m.GetStatus()
	return nil
}
