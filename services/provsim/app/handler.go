package app

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
)

// maxBodyBytes bounds a request body: 64 MiB is far above a 1M-token prompt
// (about 4 MiB by the token rule) and still keeps a bad client from filling
// memory.
const maxBodyBytes = 64 << 20

func (p *Provider) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { p.serveAPI(w, r, chatAPI{}) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { p.serveAPI(w, r, messagesAPI{}) })
	mux.HandleFunc("GET /v1/models", p.handleModels)
	mux.HandleFunc("GET /healthz", p.handleHealth)
	mux.HandleFunc("GET /admin/stats", p.handleStats)
	mux.HandleFunc("GET /admin/models/{id}", p.handleGetModel)
	mux.HandleFunc("PUT /admin/models/{id}", p.handleSetModel)
	return p.track(mux)
}

// track counts handlers in flight so Close can wait for every one of them,
// including those net/http stops tracking after Server.Close.
func (p *Provider) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.lifeMu.Lock()
		if p.closed {
			p.lifeMu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "the provider is shutting down", "server_error", "service_unavailable")
			return
		}
		p.inflight.Add(1)
		p.lifeMu.Unlock()
		defer p.inflight.Done()
		next.ServeHTTP(w, r)
	})
}

// keyMatches checks a presented key in constant time. Admin endpoints do not
// ask: they are for the tests that own the simulator, on loopback.
func (p *Provider) keyMatches(got string) bool {
	if p.apiKey == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(p.apiKey)) == 1
}

// bearer returns the key of an "Authorization: Bearer KEY" header.
func bearer(r *http.Request) (string, bool) {
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// serveAPI serves one call of a client API: the same checks, counters and
// simulation whichever API it is; only the wire format differs.
func (p *Provider) serveAPI(w http.ResponseWriter, r *http.Request, api clientAPI) {
	p.stats.update(func(s *Stats) {
		s.Requests++
		api.count(s)
	})
	if !api.authorized(p, r) {
		p.stats.update(func(s *Stats) { s.Unauthorized++ })
		api.writeUnauthorized(w)
		return
	}
	if err := api.checkHeaders(r); err != nil {
		p.stats.update(func(s *Stats) { s.BadRequest++ })
		api.writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		p.stats.update(func(s *Stats) { s.BadRequest++ })
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			api.writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit), "invalid_request_error", "request_too_large")
			return
		}
		api.writeError(w, http.StatusBadRequest, "could not read request body: "+err.Error(), "invalid_request_error", "")
		return
	}
	req, wire, err := api.parse(body)
	if err != nil {
		p.stats.update(func(s *Stats) { s.BadRequest++ })
		api.writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
		return
	}
	ms := p.model(req.Model)
	if ms == nil {
		p.stats.update(func(s *Stats) { s.UnknownModel++ })
		api.writeUnknownModel(w, req.Model)
		return
	}
	p.stats.update(func(s *Stats) { s.Started++ })
	c := newCall(p, ms, req, wire, w, r)
	// Recorded in a defer because drop and hang end the handler by aborting
	// the connection, which unwinds through here.
	defer c.finish()
	c.serve()
}

func (p *Provider) handleModels(w http.ResponseWriter, r *http.Request) {
	if !(chatAPI{}).authorized(p, r) {
		chatAPI{}.writeUnauthorized(w)
		return
	}
	p.mu.RLock()
	list := chatapi.ModelList{Object: "list", Data: make([]chatapi.ModelInfo, 0, len(p.order))}
	for _, id := range p.order {
		list.Data = append(list.Data, chatapi.ModelInfo{ID: id, Object: "model", Created: p.born.Unix(), OwnedBy: p.name})
	}
	p.mu.RUnlock()
	writeJSON(w, http.StatusOK, list)
}

func (p *Provider) handleHealth(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-p.closing:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "closing"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func (p *Provider) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.Stats())
}

// handleGetModel returns a model's configuration as applied, so a black-box
// test can change one field with a read-modify-write PUT.
func (p *Provider) handleGetModel(w http.ResponseWriter, r *http.Request) {
	ms := p.model(r.PathValue("id"))
	if ms == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", r.PathValue("id")), "invalid_request_error", "model_not_found")
		return
	}
	cfg, _ := ms.snapshot()
	writeJSON(w, http.StatusOK, cfg)
}

// handleSetModel is SetModel over HTTP for black-box tests. The body is a
// ModelConfig in JSON (durations as strings); its id may be omitted and then
// comes from the path. It answers with the configuration as applied, defaults
// filled in.
func (p *Provider) handleSetModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	var mc ModelConfig
	if err := dec.Decode(&mc); err != nil {
		writeError(w, http.StatusBadRequest, "body is not a valid model config: "+err.Error(), "invalid_request_error", "")
		return
	}
	if mc.ID == "" {
		mc.ID = id
	}
	if mc.ID != id {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("id %q in the body does not match %q in the path", mc.ID, id), "invalid_request_error", "")
		return
	}
	applied, err := p.setModel(mc)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
		return
	}
	p.logger.Info("model updated", "model", id)
	writeJSON(w, http.StatusOK, applied)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own types reach here; a failure is a bug worth a 500.
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers in OpenAI's error format, the one shape every
// OpenAI-compatible client classifies.
func writeError(w http.ResponseWriter, status int, message, typ, code string) {
	writeJSON(w, status, chatapi.NewError(message, typ, code))
}
