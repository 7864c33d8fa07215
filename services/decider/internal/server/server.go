// Package server is the DeciderService gRPC boundary: it turns requests into
// calls on routing and report, and their errors into gRPC statuses.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// Server implements switchboardv1.DeciderServiceServer.
type Server struct {
	switchboardv1.UnimplementedDeciderServiceServer
	router   atomic.Pointer[routing.Router]
	hub      *report.Hub
	budget   *hedge.Budget
	activity atomic.Pointer[activity.Store]
	adm      atomic.Pointer[admission.Admission]
	authn    *auth.Authenticator
	// experiments answers the switchback experiment calls (experiment.go).
	experiments atomic.Pointer[experiment.Manager]
	// metrics records admission decisions (metrics.go); nil records none.
	metrics atomic.Pointer[metrics.Admission]
	trust
}

// SetAdmission enables Reserve, Reconcile and Decide's reserve option.
func (s *Server) SetAdmission(a *admission.Admission) { s.adm.Store(a) }

func (s *Server) admission() (*admission.Admission, error) {
	a := s.adm.Load()
	if a == nil {
		return nil, status.Error(codes.Unavailable, "the rate-limit broker is starting")
	}
	return a, nil
}

var _ switchboardv1.DeciderServiceServer = (*Server)(nil)

// New returns a server that answers UNAVAILABLE until SetRouter is called.
// authn resolves and checks the identities requests carry.
func New(hub *report.Hub, budget *hedge.Budget, authn *auth.Authenticator) *Server {
	return &Server{hub: hub, budget: budget, authn: authn}
}

// SetActivity makes the activity log queryable.
func (s *Server) SetActivity(a *activity.Store) { s.activity.Store(a) }

// SetRouter makes the server ready.
func (s *Server) SetRouter(r *routing.Router) { s.router.Store(r) }

func (s *Server) ready() (*routing.Router, error) {
	r := s.router.Load()
	if r == nil {
		return nil, status.Error(codes.Unavailable, "decider is starting: catalog not loaded yet")
	}
	return r, nil
}

// Decide implements [switchboardv1.DeciderServiceServer.Decide].
func (s *Server) Decide(ctx context.Context, req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	if err := invalid(validate.Decide(req)); err != nil {
		return nil, err
	}
	id, err := s.authn.Identity(ctx, switchboardv1.DeciderService_Decide_FullMethodName, req.GetIdentity(), req.GetDryRun())
	if err != nil {
		return nil, err
	}
	if req.GetRequestId() == "" {
		req.RequestId = newID()
	}
	resp, err := r.Decide(req, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetReserve() && !req.GetDryRun() {
		if err := s.reserve(ctx, req, resp); err != nil {
			return nil, err
		}
	}
	s.grant(r, req, resp)
	return resp, nil
}

// reserve walks the decided order and reserves on the first endpoint whose
// limits can take the request now: an endpoint whose own provider limits
// are full is skipped — the request goes to the next one, not back to the
// client. When none can take it now, the request waits in its workload
// class's queue, within the call's deadline, for the endpoint that refused
// it by the caller's own limit (API key, app, tenant, partner), or else for
// the one whose capacity comes back first; only what that wait ends with
// refuses the client.
func (s *Server) reserve(ctx context.Context, req *switchboardv1.DecideRequest, resp *switchboardv1.DecideResponse) error {
	a, err := s.admission()
	if err != nil {
		return err
	}
	out := req.GetTokens().GetMaxOutputTokens()
	if out <= 0 {
		out = routing.DefaultOutputTokens
	}
	// The decided order: the endpoint, then its fallbacks.
	first, fallbacks := resp.GetEndpoint(), resp.GetFallbacks()
	n := 1 + len(fallbacks)
	endpoint := func(i int) *switchboardv1.Endpoint {
		if i == 0 {
			return first
		}
		return fallbacks[i-1]
	}
	ask := func(ep *switchboardv1.Endpoint, wait *durationpb.Duration) (*switchboardv1.ReserveResponse, *switchboardv1.Demand, error) {
		d := &switchboardv1.Demand{InputTokens: req.GetTokens().GetInputTokens(), OutputTokens: out, Usd: ep.GetEstimatedCostUsd(), Requests: 1}
		key := ""
		if k := req.GetIdempotencyKey(); k != "" {
			key = k + "|" + ep.GetId()
		}
		rr, err := s.reserveLocal(ctx, a, &switchboardv1.ReserveRequest{
			RequestId: resp.GetRequestId(), IdempotencyKey: key, Identity: withKeyHash(resp.GetIdentity(), req.GetIdentity()),
			Model: resp.GetModel(), EndpointId: ep.GetId(), Demand: d, Ttl: req.GetReservationTtl(), MaxWait: wait,
		})
		return rr, d, err
	}
	admit := func(i int, rr *switchboardv1.ReserveResponse, d *switchboardv1.Demand) {
		ep := endpoint(i)
		resp.Endpoint, resp.Fallbacks = ep, fallbacks[i:]
		resp.Reservation, resp.Demand, resp.Queue = rr.GetReservation(), d, rr.GetQueue()
		if h := resp.GetHedge(); h.GetEndpoint().GetId() == ep.GetId() {
			resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
		}
	}
	var refusal *switchboardv1.Refusal
	at := -1 // the endpoint to wait for
	for i := range n {
		rr, d, err := ask(endpoint(i), admission.NoWait)
		if err != nil {
			return err
		}
		if rr.GetAdmitted() {
			admit(i, rr, d)
			return nil
		}
		ref := rr.GetRefusal()
		if callerScope(ref.GetScope()) {
			refusal, at = ref, i
			break
		}
		if refusal == nil || earlier(ref, refusal) {
			refusal, at = ref, i
		}
	}
	var queue *switchboardv1.QueueDecision
	if at >= 0 && retryable(refusal) {
		rr, d, err := ask(endpoint(at), nil)
		if err != nil {
			return err
		}
		if rr.GetAdmitted() {
			admit(at, rr, d)
			return nil
		}
		refusal, queue = rr.GetRefusal(), rr.GetQueue()
	}
	s.degrade(ctx, refusal, resp.GetModel(), resp.GetIdentity())
	resp.Endpoint, resp.Fallbacks, resp.Refusal, resp.Queue = nil, nil, refusal, queue
	resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	return nil
}

// retryable reports whether capacity may come back for a refused request
// while it waits: a bucket that refills, or a provider's pause that ends.
func retryable(ref *switchboardv1.Refusal) bool {
	switch ref.GetReason() {
	case switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD:
		return true
	}
	return false
}

// degrade names the fallback model of the class's contract on a refusal
// the broker's rule lets degrade (broker.Degrades: capacity on the
// provider's side), when the class's overload action is fallback: the
// caller serves the request with that model instead. A refusal that
// already names a model is kept as it is. A fallback named here is counted
// in the admission metrics.
func (s *Server) degrade(ctx context.Context, ref *switchboardv1.Refusal, model string, id *switchboardv1.Identity) {
	if ref == nil || ref.GetFallbackModel() != "" || !broker.Degrades(broker.RefusalReason(ref.GetReason()), broker.Scope(ref.GetScope())) {
		return
	}
	k, ok := s.authn.Contract(id.GetWorkloadClass())
	if !ok || k.Overload != catalog.OverloadFallback || k.FallbackModel == "" || k.FallbackModel == model {
		return
	}
	ref.FallbackModel = k.FallbackModel
	s.metrics.Load().Degraded(ctx, id, k.FallbackModel)
}

// callerScope reports whether a bucket belongs to the caller (its own
// limits) rather than to a provider.
func callerScope(sc switchboardv1.LimitScope) bool {
	switch sc {
	case switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY, switchboardv1.LimitScope_LIMIT_SCOPE_APP, switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, switchboardv1.LimitScope_LIMIT_SCOPE_PARTNER:
		return true
	}
	return false
}

// earlier prefers the refusal whose capacity comes back first.
func earlier(a, b *switchboardv1.Refusal) bool {
	if a.GetRetryAfter() == nil {
		return false
	}
	return b.GetRetryAfter() == nil || a.GetRetryAfter().AsDuration() < b.GetRetryAfter().AsDuration()
}

// ListModels implements [switchboardv1.DeciderServiceServer.ListModels].
func (s *Server) ListModels(ctx context.Context, req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	if _, err := s.authn.Identity(ctx, switchboardv1.DeciderService_ListModels_FullMethodName, req.GetIdentity(), false); err != nil {
		return nil, err
	}
	return &switchboardv1.ListModelsResponse{Models: r.ListModels()}, nil
}

// AcquireHedge implements [switchboardv1.DeciderServiceServer.AcquireHedge].
// The budget is held by the replica that owns the rate-limit broker, so the
// decision is atomic across every edge and replica; others forward.
func (s *Server) AcquireHedge(ctx context.Context, req *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	if err := invalid(validate.AcquireHedge(req)); err != nil {
		return nil, err
	}
	if a := s.adm.Load(); a != nil {
		var resp *switchboardv1.AcquireHedgeResponse
		local, err := a.OnOwner(ctx, func(ctx context.Context, c switchboardv1.DeciderServiceClient) (err error) {
			resp, err = c.AcquireHedge(ctx, req)
			return err
		})
		if !local {
			return resp, err
		}
	}
	ok, left, reset := s.budget.Acquire(req.GetRequestId(), req.GetEstimatedCostUsd())
	return &switchboardv1.AcquireHedgeResponse{Granted: ok, RemainingUsd: left, ResetTime: timestamppb.New(reset)}, nil
}

// SettleHedge implements [switchboardv1.DeciderServiceServer.SettleHedge]: settled
// where the budget is held, like AcquireHedge.
func (s *Server) SettleHedge(ctx context.Context, req *switchboardv1.SettleHedgeRequest) (*switchboardv1.SettleHedgeResponse, error) {
	if err := invalid(validate.SettleHedge(req)); err != nil {
		return nil, err
	}
	if a := s.adm.Load(); a != nil {
		var resp *switchboardv1.SettleHedgeResponse
		local, err := a.OnOwner(ctx, func(ctx context.Context, c switchboardv1.DeciderServiceClient) (err error) {
			resp, err = c.SettleHedge(ctx, req)
			return err
		})
		if !local {
			return resp, err
		}
	}
	for _, st := range req.GetSettlements() {
		s.budget.Settle(st.GetRequestId(), st.GetLoserCostUsd())
	}
	return &switchboardv1.SettleHedgeResponse{}, nil
}

// ListActivity implements [switchboardv1.DeciderServiceServer.ListActivity].
func (s *Server) ListActivity(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	tenant, store, err := s.activityFor(ctx, switchboardv1.DeciderService_ListActivity_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if err := invalid(validate.Model("model", req.GetModel())); err != nil {
		return nil, err
	}
	q := activity.Query{Tenant: tenant, Model: req.GetModel(), Limit: int(req.GetLimit()), Cursor: req.GetCursor()}
	// Records name the catalog id: a filter by an alias finds its model's.
	// A name the catalog no longer has may still be a past record's.
	if r := s.router.Load(); r != nil {
		if id, ok := r.Resolve(q.Model); ok {
			q.Model = id
		}
	}
	if req.GetLimit() < 0 || req.GetLimit() > 500 {
		return nil, status.Error(codes.InvalidArgument, "limit must be between 1 and 500")
	}
	if t := req.GetStartTime(); t != nil {
		q.Start = t.AsTime()
	}
	if t := req.GetEndTime(); t != nil {
		q.End = t.AsTime()
	}
	recs, next, err := store.List(ctx, q)
	if errors.Is(err, activity.ErrBadCursor) {
		return nil, status.Error(codes.InvalidArgument, "invalid cursor")
	}
	if err != nil {
		return nil, status.Error(codes.Internal, "reading the activity log failed")
	}
	return &switchboardv1.ListActivityResponse{Records: recs, NextCursor: next}, nil
}

// GetActivity implements [switchboardv1.DeciderServiceServer.GetActivity].
func (s *Server) GetActivity(ctx context.Context, req *switchboardv1.GetActivityRequest) (*switchboardv1.GetActivityResponse, error) {
	tenant, store, err := s.activityFor(ctx, switchboardv1.DeciderService_GetActivity_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	if err := invalid(validate.ID("id", req.GetId())); err != nil {
		return nil, err
	}
	rec, err := store.Get(ctx, tenant, req.GetId())
	if errors.Is(err, activity.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no generation %q", req.GetId())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, "reading the activity log failed")
	}
	return &switchboardv1.GetActivityResponse{Record: rec}, nil
}

// activityFor resolves whose records are read: only the identity's tenant's,
// and only a tenant the caller may act for.
func (s *Server) activityFor(ctx context.Context, method string, id *switchboardv1.Identity) (string, *activity.Store, error) {
	if _, err := s.ready(); err != nil {
		return "", nil, err
	}
	who, err := s.authn.Identity(ctx, method, id, false)
	if err != nil {
		return "", nil, err
	}
	store := s.activity.Load()
	if store == nil {
		return "", nil, status.Error(codes.Unavailable, "the activity log is not open yet")
	}
	return who.GetTenantId(), store, nil
}

// Reserve implements [switchboardv1.DeciderServiceServer.Reserve]. A caller that sends
// api_key_sha256 is authenticated and its identity resolved; a trusted
// caller's tenant_id must name a tenant.
func (s *Server) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if req.GetEndpointId() == "" {
		return nil, status.Error(codes.InvalidArgument, "endpoint_id is required")
	}
	if err := invalid(validate.Reserve(req)); err != nil {
		return nil, err
	}
	// An endpoint the catalog does not have would open buckets nobody
	// configured, in the broker's snapshot, for nothing that can be called.
	model, _, ok := r.Endpoint(req.GetEndpointId())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "endpoint_id: no endpoint %q in the catalog", req.GetEndpointId())
	}
	// The model names the tenant's per-model buckets: one that is not the
	// endpoint's would charge another model's limits, or none.
	switch asked, _ := r.Resolve(req.GetModel()); {
	case req.GetModel() == "", asked == model:
		req.Model = model
	default:
		return nil, status.Errorf(codes.InvalidArgument, "model: the endpoint %q serves %q", req.GetEndpointId(), model)
	}
	id, err := s.authn.Identity(ctx, switchboardv1.DeciderService_Reserve_FullMethodName, req.GetIdentity(), false)
	if err != nil {
		return nil, err
	}
	req.Identity = withKeyHash(id, req.GetIdentity())
	resp, err := s.reserveLocal(ctx, a, req)
	if err != nil {
		return nil, err
	}
	s.degrade(ctx, resp.GetRefusal(), req.GetModel(), id)
	return resp, nil
}

// Reconcile implements [switchboardv1.DeciderServiceServer.Reconcile].
func (s *Server) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (*switchboardv1.ReconcileResponse, error) {
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if req.GetReservationId() == "" {
		return nil, status.Error(codes.InvalidArgument, "reservation_id is required")
	}
	if err := invalid(validate.Reconcile(req)); err != nil {
		return nil, err
	}
	var resp *switchboardv1.ReconcileResponse
	err = s.reconcileLocal(ctx, a, req, func() (err error) {
		resp, err = a.Reconcile(ctx, req, s.allow(ctx))
		return err
	})
	return resp, err
}

// maxKeep bounds the ids of one KeepReservations call.
const maxKeep = 100_000

// KeepReservations implements [switchboardv1.DeciderServiceServer.KeepReservations].
func (s *Server) KeepReservations(ctx context.Context, req *switchboardv1.KeepReservationsRequest) (*switchboardv1.KeepReservationsResponse, error) {
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if len(req.GetReservationIds()) > maxKeep {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d reservation ids per call", maxKeep)
	}
	if err := invalid(validate.ReservationIDs(req.GetReservationIds())); err != nil {
		return nil, err
	}
	n, err := a.Keep(ctx, req.GetReservationIds(), s.allow(ctx))
	if err != nil {
		return nil, err
	}
	return &switchboardv1.KeepReservationsResponse{Kept: n}, nil
}

// Reservations is what the report hub applies the edges' reconciliations
// and heartbeats with: the broker's owner, through this replica's
// admission once it is set (until then, every attempt fails and is retried).
func (s *Server) Reservations() report.Reservations { return reservations{s} }

type reservations struct{ s *Server }

func (r reservations) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (term int64, err error) {
	a, err := r.s.admission()
	if err != nil {
		return 0, err
	}
	if req.GetReservationId() == "" {
		term, _ = a.OwnerTerm()
		return term, nil // nothing to apply, ever
	}
	err = r.s.reconcileLocal(ctx, a, req, func() (err error) {
		term, err = a.ReconcileOnce(ctx, req, r.s.allow(ctx))
		return err
	})
	return term, err
}

func (r reservations) Keep(ctx context.Context, ids []string) error {
	a, err := r.s.admission()
	if err != nil {
		return err
	}
	_, err = a.Keep(ctx, ids, r.s.allow(ctx))
	if status.Code(err) == codes.Unimplemented {
		return nil // an owner of an older version: nothing to keep them with
	}
	return err
}

// Report implements [switchboardv1.DeciderServiceServer.Report]. Only
// edges reach it (the auth interceptor refuses every other role).
func (s *Server) Report(stream switchboardv1.DeciderService_ReportServer) error {
	return s.hub.Serve(stream)
}

// invalid is a failed field check as the caller sees it: INVALID_ARGUMENT
// naming the field.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	var ve *validate.Error
	if errors.As(err, &ve) {
		return fieldStatus(err.Error(), ve.Field, "INVALID_VALUE")
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

func toStatus(err error) error {
	var re *routing.Error
	if !errors.As(err, &re) {
		return status.Error(codes.Internal, "internal error")
	}
	switch re.Kind {
	case routing.KindNotFound:
		return status.Error(codes.NotFound, re.Msg)
	case routing.KindInvalid:
		if re.Context != nil {
			return contextStatus(re)
		}
		return fieldStatus(re.Msg, re.Field, re.Reason)
	case routing.KindUnavailable:
		return status.Error(codes.FailedPrecondition, re.Msg)
	}
	return status.Error(codes.Internal, re.Msg)
}

// fieldStatus is INVALID_ARGUMENT with msg and, when field is set, a
// google.rpc.BadRequest naming it (its proto path) and the reason it is
// wrong: what lets the edge answer its client with the client's own field.
func fieldStatus(msg, field, reason string) error {
	st := status.New(codes.InvalidArgument, msg)
	if field == "" {
		return st.Err()
	}
	d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: field, Description: msg, Reason: reason},
	}})
	if err != nil {
		return st.Err()
	}
	return d.Err()
}

// contextStatus is the INVALID_ARGUMENT of a request longer than every
// endpoint's context: the field violation, and the figures (see
// contextlength), so that a caller can say it in its own API's words.
func contextStatus(re *routing.Error) error {
	st := status.New(codes.InvalidArgument, re.Msg)
	d, err := st.WithDetails(
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: re.Field, Description: re.Msg, Reason: re.Reason},
		}},
		re.Context.Detail(),
	)
	if err != nil {
		return st.Err()
	}
	return d.Err()
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "gen-" + hex.EncodeToString(b[:])
}
