package app

import (
	"context"
	"net/http"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/services/decider/internal/dashboard"
)

// adminMounts are what the admin listener serves besides the profiles:
// the metrics, health as the gRPC health service says it, and the
// dashboard, which answers 503 until startDashboard built it.
func (d *Decider) adminMounts() []debugserver.Mount {
	return []debugserver.Mount{
		{Pattern: "/metrics", Handler: d.metrics.Handler()},
		{Pattern: "GET /healthz", Handler: http.HandlerFunc(d.healthz)},
		{Pattern: "GET /readyz", Handler: http.HandlerFunc(d.readyz)},
		{Pattern: dashboard.Prefix, Handler: http.HandlerFunc(d.serveDashboard)},
		{Pattern: "GET /dashboard", Handler: http.RedirectHandler(dashboard.Prefix, http.StatusMovedPermanently)},
	}
}

// healthz is liveness: 200 while the process serves HTTP, as the gRPC
// health service answers at all (a decider that cannot reach etcd exits).
func (d *Decider) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz is readiness: 200 when the decider's overall gRPC health ("")
// is SERVING (etcd reached, the catalog loaded, not draining), else 503
// with the status, as the kubelet's gRPC probe on --health-listen sees it.
func (d *Decider) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if resp, err := d.health.Check(r.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		st = resp.GetStatus()
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(st.String() + "\n"))
}

func (d *Decider) serveDashboard(w http.ResponseWriter, r *http.Request) {
	h := d.dash.Load()
	if h == nil {
		http.Error(w, "the decider is starting", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

// startDashboard builds the dashboard on the built components and samples
// its history until bg ends.
func (d *Decider) startDashboard(bg context.Context) {
	db := dashboard.New(dashboard.Options{
		Catalog: d.catalog, RPC: d.svc, Secure: d.cfg.TLSCertFile != "",
		Now: d.cfg.Now, Logger: d.logger.With("component", "dashboard"),
	})
	h := db.Handler()
	d.dash.Store(&h)
	d.wg.Go(func() { db.Run(bg) })
}
