package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
)

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	status := "ok"
	if s.draining.Load() {
		status = "shutting_down"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"status": status, "decider": s.opts.DeciderState()})
}

// readyz is readiness: 200 only when the edge can serve requests now (the
// decider reachable and serving), 503 otherwise and from the moment
// shutdown starts. Liveness (/healthz) does not depend on the decider, so a
// decider outage takes edges out of rotation without restarting them.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	body := map[string]string{"status": "ready"}
	code := http.StatusOK
	if s.draining.Load() {
		body["status"], code = "shutting_down", http.StatusServiceUnavailable
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
		err := s.opts.Ready(ctx)
		cancel()
		if err != nil {
			body["status"], body["reason"], code = "not_ready", err.Error(), http.StatusServiceUnavailable
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
