package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	Created       int64    `json:"created"`
	OwnedBy       string   `json:"owned_by"`
	ContextLength int64    `json:"context_length"`
	Providers     []string `json:"providers"`
	// AliasOf is the catalog id of the model an alias names, for an alias.
	AliasOf string `json:"alias_of,omitempty"`
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	ms, ok := s.listModels(w, r)
	if !ok {
		return
	}
	out := modelList{Object: "list", Data: make([]modelInfo, 0, len(ms))}
	for _, m := range ms {
		out.Data = append(out.Data, modelInfoOf(m, m.GetId()))
	}
	// An exact alias is listed as a model of its own, for clients that
	// check the name they are set to use is listed; a pattern names no
	// model a client could pick, so it is not.
	for _, m := range ms {
		for _, a := range m.GetAliases() {
			if !strings.HasSuffix(a, catalog.AliasWildcard) {
				out.Data = append(out.Data, modelInfoOf(m, a))
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// model serves GET /v1/models/{id}: OpenAI's model object for a model the
// caller may use, by id or alias (a pattern's name too), else 404
// model_not_found.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	ms, ok := s.listModels(w, r)
	if !ok {
		return
	}
	asked := r.PathValue("id")
	names := make([]catalog.Model, len(ms))
	for i, m := range ms {
		names[i] = catalog.Model{ID: m.GetId(), Aliases: m.GetAliases()}
	}
	if id, ok := catalog.NewResolver(names).Resolve(asked); ok {
		for _, m := range ms {
			if m.GetId() == id {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(modelInfoOf(m, asked))
				return
			}
		}
	}
	writeError(w, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
		message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", headerValue(asked))})
}

// listModels checks the method and the API key and asks the decider for
// the models the caller may use; when it returns false it has answered.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) ([]*switchboardv1.Model, bool) {
	if !allowMethods(w, r, http.MethodGet) {
		return nil, false
	}
	keyHash, aerr := s.clientKey(r)
	if aerr != nil {
		writeError(w, *aerr)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.DeciderTimeout)
	defer cancel()
	resp, err := s.opts.Decider.ListModels(ctx, &switchboardv1.ListModelsRequest{
		Identity: &switchboardv1.Identity{ApiKeySha256: keyHash},
	})
	if err != nil {
		if r.Context().Err() == nil {
			writeError(w, deciderError(err))
		}
		return nil, false
	}
	return resp.GetModels(), true
}

// modelInfoOf is OpenAI's model object for m under the name id: its own,
// or one of its aliases.
func modelInfoOf(m *switchboardv1.Model, id string) modelInfo {
	providers := m.GetProviders()
	if providers == nil {
		providers = []string{}
	}
	info := modelInfo{
		ID: id, Object: "model", OwnedBy: "switchboard",
		ContextLength: m.GetContextLength(), Providers: providers,
	}
	if t := m.GetCreateTime(); t != nil {
		// When the decider first served the model: OpenAI's "created", unix
		// seconds.
		info.Created = t.GetSeconds()
	}
	if id != m.GetId() {
		info.AliasOf = m.GetId()
	}
	return info
}
