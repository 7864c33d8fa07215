package httpapi

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/standby"
)

// unreachable reports whether err says no decider could answer (not that
// one refused): what serving from a remembered answer stands in for.
func unreachable(err error) bool {
	if bearer.CallerRefused(err) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// standbyKey is the key of the answers for model to c: everything of the
// request the decider's choice depends on that the edge knows, except what
// only steers it towards a warm prompt cache (the prompt's prefixes, the
// session) — serving without those costs cache hits, never a constraint.
// Each field is written after its length, so no two lists of fields make
// the same key.
func standbyKey(c *chatRequest, model string) string {
	req, id := c.req, c.identity
	params := slices.Clone(req.Parameters)
	slices.Sort(params)
	provider, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req.Provider)
	var b strings.Builder
	for _, f := range []string{
		id.GetApiKeySha256(), id.GetApp(), id.GetEnvironment(), id.GetWorkloadClass().String(), model,
		strconv.Itoa(int(tokens.BucketOf(req.InputTokens))), strconv.FormatInt(req.MaxOutputTokens, 10),
		strconv.FormatBool(req.Stream), c.api.String(), strings.Join(params, ","), string(provider),
		strconv.FormatBool(c.cacheWrite > 0), strconv.FormatBool(c.cacheWrite1h > 0),
	} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.String()
}

// serveOffline answers a Decide no decider could answer (err) from the
// last answer for the same kind of request, when the standby has one
// young enough and the local share admits it; otherwise it returns err
// unchanged (fail closed, as without a standby), or a RESOURCE_EXHAUSTED
// status when the share is spent.
func (s *Server) serveOffline(c *chatRequest, model, reqID string, err error) (*switchboardv1.DecideResponse, error) {
	if !s.opts.Standby.On() {
		return nil, err
	}
	served, serr := s.opts.Standby.Serve(standbyKey(c, model), reqID)
	var le *standby.LimitError
	switch {
	case serr == nil:
		c.grantRequestID = served.GrantRequestID
		s.log.Warn("no decider reachable; served as the decider last answered", "request_id", reqID, "model", model,
			"answer_age", served.Age, "endpoint", served.Resp.GetEndpoint().GetId(), "error", err)
		return served.Resp, nil
	case errors.As(serr, &le):
		st, derr := status.New(codes.ResourceExhausted, le.Error()).
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(le.RetryAfter, deciderRetryIn))})
		if derr != nil {
			return nil, status.Error(codes.ResourceExhausted, le.Error())
		}
		return nil, st.Err()
	}
	return nil, err
}
