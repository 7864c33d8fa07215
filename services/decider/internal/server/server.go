// Package server is the decider's gRPC boundary (RouterService,
// EdgeService, OperatorService and ReplicaService): it turns requests into
// calls on routing, admission (whose Policy owns every admission rule) and
// report, and their errors into gRPC statuses.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// Server implements every service of the decider:
// switchboardv1.RouterServiceServer, switchboardv1.EdgeServiceServer,
// switchboardv1.OperatorServiceServer and switchboardv1.ReplicaServiceServer.
// It is built once every part it answers with is (Deps), and only then
// registered and served: there is no "not ready yet" state to answer from.
type Server struct {
	switchboardv1.UnimplementedRouterServiceServer
	switchboardv1.UnimplementedEdgeServiceServer
	switchboardv1.UnimplementedOperatorServiceServer
	switchboardv1.UnimplementedReplicaServiceServer
	router *routing.Router
	// catalog is the catalog applied; each call reads it once (views).
	catalog *gate.Current
	hub     *report.Hub
	authn   *auth.Authenticator
	// policy owns every admission rule (Reserve, Reconcile, the hedge budget).
	policy   admission.Policy
	activity *activity.Store
	// experiments answers the switchback experiment calls (experiment.go).
	experiments *experiment.Manager
	// peers reaches the other replicas (peers.go).
	peers Peers
	trust
}

// Deps are the parts a Server answers with, each built before it.
type Deps struct {
	// Router answers Decide from the routing index of the call's catalog. (Required)
	Router *routing.Router
	// Catalog is the catalog applied, whose views a call reads once, where
	// the authentication interceptor pinned them (gate.Current.Pin), and
	// works on throughout: its identity, route and admission contracts
	// come from one catalog. (Required)
	Catalog *gate.Current
	// Auth resolves and checks the identities requests carry. (Required)
	Auth *auth.Authenticator
	// Hub serves the edges' Report streams. (Required)
	Hub *report.Hub
	// Policy owns the admission rules: Reserve, Reconcile, KeepReservations,
	// Decide's reserve option and the hedge budget. (Required)
	Policy admission.Policy
	// Activity is the activity log ListActivity and GetActivity read. (Required)
	Activity *activity.Store
	// Experiments answers the switchback experiment calls. (Required)
	Experiments *experiment.Manager
	// Peers reaches the other replicas: their shared observations, their
	// activity logs. (Optional) Without it this replica reads its own log
	// only and takes no observations.
	Peers Peers
	// Grants makes Decide issue a grant with each decision, which the edge
	// copies into the request's activity record so the record can be
	// checked against the decision. (Optional) Without it Decide issues none.
	Grants *grant.Signer
}

var (
	_ switchboardv1.RouterServiceServer   = (*Server)(nil)
	_ switchboardv1.EdgeServiceServer     = (*Server)(nil)
	_ switchboardv1.OperatorServiceServer = (*Server)(nil)
)

// New returns a server of d.
func New(d Deps) *Server {
	return &Server{router: d.Router, catalog: d.Catalog, hub: d.Hub, authn: d.Auth, policy: d.Policy, activity: d.Activity,
		experiments: d.Experiments, peers: d.Peers, trust: trust{grants: d.Grants}}
}

// views returns the catalog views the call of ctx works on: those the
// authentication interceptor pinned, else (a call no interceptor saw) the
// ones applied now.
func (s *Server) views(ctx context.Context) *gate.Views {
	_, v := s.catalog.Pin(ctx)
	return v
}

// admission is the admission policy of one call: the workload classes'
// contracts of the catalog it resolved its identity by.
func (s *Server) admission(v *gate.Views) admission.Policy {
	p := s.policy
	p.Contracts = v.Auth
	return p
}

// Decide implements [switchboardv1.RouterServiceServer.Decide].
func (s *Server) Decide(ctx context.Context, req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
	r := s.router
	if err := invalid(validate.Decide(req)); err != nil {
		return nil, err
	}
	if req.GetDryRun() {
		return nil, fieldStatus("dry_run is not served: an operator explains a decision with OperatorService.Explain", "dry_run", "UNSUPPORTED")
	}
	v := s.views(ctx)
	id, err := v.Auth.Identity(ctx, switchboardv1.RouterService_Decide_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if req.GetRequestId() == "" {
		req.RequestId = newID()
	}
	resp, err := r.DecideIn(v.Routing, req, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetReserve() {
		if err := s.admission(v).Decide(ctx, req, resp); err != nil {
			return nil, err
		}
	}
	s.grant(v.Routing, req, resp)
	return resp, nil
}

// ListModels implements [switchboardv1.RouterServiceServer.ListModels].
func (s *Server) ListModels(ctx context.Context, req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
	v := s.views(ctx)
	if _, err := v.Auth.Identity(ctx, switchboardv1.RouterService_ListModels_FullMethodName, req.GetIdentity()); err != nil {
		return nil, err
	}
	return &switchboardv1.ListModelsResponse{Models: v.Routing.ListModels()}, nil
}

// AcquireHedge implements [switchboardv1.EdgeServiceServer.AcquireHedge]
// (see admission.Policy.AcquireHedge).
func (s *Server) AcquireHedge(ctx context.Context, req *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	if err := invalid(validate.AcquireHedge(req)); err != nil {
		return nil, err
	}
	return s.policy.AcquireHedge(ctx, req)
}

// SettleHedge implements [switchboardv1.EdgeServiceServer.SettleHedge]
// (see admission.Policy.SettleHedge).
func (s *Server) SettleHedge(ctx context.Context, req *switchboardv1.SettleHedgeRequest) (*switchboardv1.SettleHedgeResponse, error) {
	if err := invalid(validate.SettleHedge(req)); err != nil {
		return nil, err
	}
	return s.policy.SettleHedge(ctx, req)
}

// ListActivity implements [switchboardv1.RouterServiceServer.ListActivity]:
// the caller's records in every replica's log, merged (peers.go).
func (s *Server) ListActivity(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	own, err := s.listOwn(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.listPeers(ctx, req, own), nil
}

// listOwn is ListActivity of this replica's own log.
func (s *Server) listOwn(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	v := s.views(ctx)
	tenant, store, err := s.activityFor(ctx, v, switchboardv1.RouterService_ListActivity_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if err := invalid(validate.Model("model", req.GetModel())); err != nil {
		return nil, err
	}
	q := activity.Query{Tenant: tenant, Model: req.GetModel(), Limit: int(req.GetLimit()), Cursor: req.GetCursor()}
	// Records name the catalog id: a filter by an alias finds its model's.
	// A name the catalog no longer has may still be a past record's.
	if id, ok := v.Routing.Resolve(q.Model); ok {
		q.Model = id
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

// GetActivity implements [switchboardv1.RouterServiceServer.GetActivity]:
// the record from whichever replica's log holds it (peers.go).
func (s *Server) GetActivity(ctx context.Context, req *switchboardv1.GetActivityRequest) (*switchboardv1.GetActivityResponse, error) {
	resp, err := s.getOwn(ctx, req)
	if status.Code(err) == codes.NotFound {
		return s.getPeers(ctx, req)
	}
	return resp, err
}

// getOwn is GetActivity of this replica's own log.
func (s *Server) getOwn(ctx context.Context, req *switchboardv1.GetActivityRequest) (*switchboardv1.GetActivityResponse, error) {
	tenant, store, err := s.activityFor(ctx, s.views(ctx), switchboardv1.RouterService_GetActivity_FullMethodName, req.GetIdentity())
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
func (s *Server) activityFor(ctx context.Context, v *gate.Views, method string, id *switchboardv1.Identity) (string, *activity.Store, error) {
	who, err := v.Auth.Identity(ctx, method, id)
	if err != nil {
		return "", nil, err
	}
	return who.GetTenantId(), s.activity, nil
}

// Reserve implements [switchboardv1.RouterServiceServer.Reserve]. A caller that sends
// api_key_sha256 is authenticated and its identity resolved; a trusted
// caller's tenant_id must name a tenant.
func (s *Server) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	v := s.views(ctx)
	r := v.Routing
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
	id, err := v.Auth.Identity(ctx, switchboardv1.RouterService_Reserve_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	return s.admission(v).Reserve(ctx, req, id)
}

// Reconcile implements [switchboardv1.RouterServiceServer.Reconcile].
func (s *Server) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (*switchboardv1.ReconcileResponse, error) {
	if req.GetReservationId() == "" {
		return nil, status.Error(codes.InvalidArgument, "reservation_id is required")
	}
	if err := invalid(validate.Reconcile(req)); err != nil {
		return nil, err
	}
	return s.policy.Reconcile(ctx, req, s.allow(ctx))
}

// maxKeep bounds the ids of one KeepReservations call.
const maxKeep = 100_000

// KeepReservations implements [switchboardv1.RouterServiceServer.KeepReservations].
func (s *Server) KeepReservations(ctx context.Context, req *switchboardv1.KeepReservationsRequest) (*switchboardv1.KeepReservationsResponse, error) {
	if len(req.GetReservationIds()) > maxKeep {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d reservation ids per call", maxKeep)
	}
	if err := invalid(validate.ReservationIDs(req.GetReservationIds())); err != nil {
		return nil, err
	}
	n, err := s.policy.Keep(ctx, req.GetReservationIds(), s.allow(ctx))
	if err != nil {
		return nil, err
	}
	return &switchboardv1.KeepReservationsResponse{Kept: n}, nil
}

// Reservations is what the report hub applies the edges' reconciliations
// and heartbeats with: the broker's owner, through p, on behalf of the
// edge whose stream carried them.
func Reservations(p admission.Policy) report.Reservations { return reservations{p} }

type reservations struct{ p admission.Policy }

func (r reservations) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (term int64, err error) {
	return r.p.ReconcileOnce(ctx, req, auth.Reservations(ctx))
}

func (r reservations) Keep(ctx context.Context, ids []string) error {
	_, err := r.p.Keep(ctx, ids, auth.Reservations(ctx))
	if status.Code(err) == codes.Unimplemented {
		return nil // an owner of an older version: nothing to keep them with
	}
	return err
}

// Report implements [switchboardv1.EdgeServiceServer.Report]. Only
// edges reach it (the auth interceptor refuses every other role).
func (s *Server) Report(stream switchboardv1.EdgeService_ReportServer) error {
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
