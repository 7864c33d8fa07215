package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	ms, ok := s.listModels(w, r)
	if !ok {
		return
	}
	out := modelList{Object: "list", Data: make([]modelInfo, 0, len(ms))}
	for _, m := range ms {
		out.Data = append(out.Data, modelInfoOf(m))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// model serves GET /v1/models/{id}: OpenAI's model object for a model the
// caller may use, else 404 model_not_found.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	ms, ok := s.listModels(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	for _, m := range ms {
		if m.GetId() == id {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(modelInfoOf(m))
			return
		}
	}
	writeError(w, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
		message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", headerValue(id))})
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

func modelInfoOf(m *switchboardv1.Model) modelInfo {
	providers := m.GetProviders()
	if providers == nil {
		providers = []string{}
	}
	return modelInfo{
		ID: m.GetId(), Object: "model", OwnedBy: "switchboard",
		ContextLength: m.GetContextLength(), Providers: providers,
	}
}
