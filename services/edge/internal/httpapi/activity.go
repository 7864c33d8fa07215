package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Paging of GET /v1/activity.
const (
	DefaultActivityLimit = 50
	MaxActivityLimit     = 500
	// maxCursorBytes bounds the opaque cursor passed back to the decider.
	maxCursorBytes = 1024
	// maxIDBytes bounds a generation id; the edge's are far shorter.
	maxIDBytes = 256
)

// Query parameters of GET /v1/activity and GET /v1/generation: any other
// is refused, so a misspelt filter (?modle=) does not list everything.
var (
	activityParams   = []string{"start", "end", "model", "limit", "cursor"}
	generationParams = []string{"id"}
)

type activityList struct {
	Object     string            `json:"object"`
	Data       []generationStats `json:"data"`
	NextCursor string            `json:"next_cursor"`
	// MissingReplicas names the decider replicas whose activity log the
	// page could not read: their calls are not in it.
	MissingReplicas []string `json:"missing_replicas,omitempty"`
}

// activity serves GET /v1/activity: the caller's own calls, newest first.
// The decider authenticates the key and scopes the listing to its tenant.
func (s *Server) activity(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet) {
		return
	}
	keyHash, aerr := s.clientKey(r)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	q, aerr := queryOf(r, activityParams)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	req, aerr := parseActivityQuery(q)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	req.Identity = &switchboardv1.Identity{ApiKeySha256: keyHash}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.DeciderTimeout)
	defer cancel()
	resp, err := s.opts.Decider.ListActivity(ctx, req)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		writeError(w, activityError(err))
		return
	}
	out := activityList{Object: "list", Data: make([]generationStats, 0, len(resp.GetRecords())), NextCursor: resp.GetNextCursor(),
		MissingReplicas: resp.GetMissingReplicas()}
	for _, rec := range resp.GetRecords() {
		out.Data = append(out.Data, generationOf(rec))
	}
	writeJSON(w, out)
}

// generation serves GET /v1/generation?id=: one of the caller's calls by the
// id its answer carried. Another tenant's id is indistinguishable from an
// unknown one.
func (s *Server) generation(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet) {
		return
	}
	keyHash, aerr := s.clientKey(r)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	q, aerr := queryOf(r, generationParams)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	id := strings.TrimSpace(q.Get("id"))
	switch {
	case id == "":
		writeError(w, invalidRequest("id", "id is required: the id of a chat completion (e.g. gen-...)"))
		return
	case len(id) > maxIDBytes || !printable(id):
		writeError(w, invalidRequest("id", "id is not a valid generation id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.DeciderTimeout)
	defer cancel()
	resp, err := s.opts.Decider.GetActivity(ctx, &switchboardv1.GetActivityRequest{
		Identity: &switchboardv1.Identity{ApiKeySha256: keyHash},
		Id:       id,
	})
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if status.Code(err) == codes.NotFound {
			// Our message, not the decider's: nothing may tell another
			// tenant's id from a missing one.
			writeError(w, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found", param: "id",
				message: fmt.Sprintf("generation %s not found", id)})
			return
		}
		writeError(w, activityError(err))
		return
	}
	writeJSON(w, struct {
		Data generationStats `json:"data"`
	}{Data: generationOf(resp.GetRecord())})
}

// queryOf is the request's query, refused (400, OpenAI's format, param
// naming it) when it has a parameter other than known or one given twice.
func queryOf(r *http.Request, known []string) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		e := invalidRequest("", "the query string is malformed: "+err.Error())
		return nil, &e
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) {
			name := k
			if len(name) > 64 {
				name = name[:64] + "..."
			}
			e := invalidRequest(name, fmt.Sprintf("Unknown parameter: '%s'. %s takes %s.", name, r.URL.Path, strings.Join(known, ", ")))
			e.code = "unknown_parameter"
			return nil, &e
		}
		if len(q[k]) > 1 {
			e := invalidRequest(k, k+" must be given at most once")
			return nil, &e
		}
	}
	return q, nil
}

// activityError maps a ListActivity or GetActivity failure; unlike for
// Decide, NOT_FOUND is not about a model.
func activityError(err error) apiError {
	e := deciderError(err)
	if status.Code(err) == codes.NotFound {
		e.code = "not_found"
	}
	return e
}

// parseActivityQuery validates the query of GET /v1/activity: start and end
// (RFC 3339 or unix seconds; start before end), model, limit (1..500,
// default 50) and the opaque cursor of a previous page.
func parseActivityQuery(q url.Values) (*switchboardv1.ListActivityRequest, *apiError) {
	req := &switchboardv1.ListActivityRequest{Limit: DefaultActivityLimit}
	var start, end time.Time
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"start", &start}, {"end", &end}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := parseTime(v)
		if err != nil {
			e := invalidRequest(p.name, fmt.Sprintf("%s must be an RFC 3339 time (2026-10-28T09:00:00Z) or unix seconds: %q", p.name, v))
			return nil, &e
		}
		*p.dst = t
	}
	if !start.IsZero() {
		req.StartTime = timestamppb.New(start)
	}
	if !end.IsZero() {
		req.EndTime = timestamppb.New(end)
		if !start.IsZero() && !end.After(start) {
			e := invalidRequest("end", "end must be after start")
			return nil, &e
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 || n > MaxActivityLimit {
			e := invalidRequest("limit", fmt.Sprintf("limit must be an integer from 1 to %d", MaxActivityLimit))
			return nil, &e
		}
		req.Limit = int32(n)
	}
	req.Model = strings.TrimSpace(q.Get("model"))
	if len(req.Model) > maxIDBytes || !printableOrEmpty(req.Model) {
		e := invalidRequest("model", "model is not a valid model id")
		return nil, &e
	}
	req.Cursor = q.Get("cursor")
	if len(req.Cursor) > maxCursorBytes || !printableOrEmpty(req.Cursor) {
		e := invalidRequest("cursor", "cursor is not one this API returned")
		return nil, &e
	}
	return req, nil
}

// parseTime reads RFC 3339 (with or without fractional seconds) or unix
// seconds.
func parseTime(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Beyond year 9999 is a typo (milliseconds, most likely), and would
		// not fit a protobuf Timestamp.
		if n < 0 || n > 253402300799 {
			return time.Time{}, fmt.Errorf("unix seconds out of range")
		}
		return time.Unix(n, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, err
	}
	if t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("time out of range")
	}
	return t, nil
}

func printableOrEmpty(s string) bool { return s == "" || printable(s) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
