// Package fakedecider is a real gRPC decider (the RouterService and the
// EdgeService an edge calls) on loopback whose answers
// a test sets, recording every Decide, AcquireHedge, Reserve and Reconcile
// call and everything an edge sends on the Report stream. It exists for the
// edge's tests only.
//
// Where the edge depends on the decider's rules rather than on a test's
// answers, the fake keeps them as the real decider does, and contract_test.go
// runs one table of scenarios against both to hold it to that: Reserve
// admits every request (unless told to refuse an endpoint), a reservation
// (granted by Reserve or carried by a Decide answer) is reconciled once, on
// the Reconcile call or in an acknowledged reconcile batch; the Report stream
// opens with a hello, is sent the key set first (SetKeySet) and the broker
// owner's term next (SetOwnerTerm), and acknowledges batches as the real
// one does, naming that term; and its
// activity log keeps, once by id, the reported records whose grant and caps
// are the ones a Decide answer carried for their request, tenant and key, and serves
// them to the caller's tenant only.
package fakedecider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/readiness"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

var (
	_ switchboardv1.RouterServiceServer = (*Decider)(nil)
	_ switchboardv1.EdgeServiceServer   = (*Decider)(nil)
)

// Decider implements switchboardv1.RouterServiceServer and
// switchboardv1.EdgeServiceServer with programmable answers.
type Decider struct {
	switchboardv1.UnimplementedRouterServiceServer
	switchboardv1.UnimplementedEdgeServiceServer

	mu         sync.Mutex
	decide     func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error)
	listModels func(*switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error)
	hedge      func(context.Context, *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error)
	identify   func(*switchboardv1.Identity) (string, error)
	reserve    func(context.Context, *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error)
	refusals   map[string]*switchboardv1.Refusal
	reserveReq []*switchboardv1.ReserveRequest
	reconciles []*switchboardv1.ReconcileRequest
	decideReqs []*switchboardv1.DecideRequest
	hedgeReqs  []*switchboardv1.AcquireHedgeRequest
	listReqs   []*switchboardv1.ListActivityRequest
	getReqs    []*switchboardv1.GetActivityRequest
	// withholdAcks stops activity acks (see WithholdActivityAcks).
	withholdAcks bool
	// withholdReconcileAcks stops reconcile acks (see WithholdReconcileAcks).
	withholdReconcileAcks bool
	// term is the broker owner's term, announced on every stream and named
	// in reconcile acks; termChanged is closed and replaced when it changes.
	term        int64
	termChanged chan struct{}
	// ackTerm, when set, is the term reconcile acks name instead of term.
	ackTerm int64
	// keys is the set of valid API keys, sent first on every stream and
	// again on the open ones when it changes (keysChanged is closed and
	// replaced then); nil sends none.
	keys        *switchboardv1.KeySet
	keysChanged chan struct{}
	received    []*switchboardv1.ReportRequest
	streams     int
	commands    chan *switchboardv1.ReportResponse
	// decisions are the grants Decide answered with, by request id.
	decisions map[string]decision
	// reservations are the reservations granted, open (true) or
	// reconciled (false).
	reservations map[string]bool
}

// decision is what an activity record must carry to be kept: the grant and
// caps of its request's decision and the identity it was issued for.
type decision struct {
	grant            []byte
	tenant, apiKeyID string
	caps             *switchboardv1.DecisionCaps
}

// Server runs a Decider on 127.0.0.1.
type Server struct {
	*Decider
	t    testing.TB
	addr string

	mu  sync.Mutex
	srv *grpc.Server
	// health is grpc.health.v1, reporting the decider's services SERVING
	// unless SetServing(false); it outlives Restart.
	health *health.Server
}

// Start serves a new Decider on a free loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	d := &Decider{
		commands:     make(chan *switchboardv1.ReportResponse, 16),
		term:         1,
		termChanged:  make(chan struct{}),
		keys:         DefaultKeySet(),
		keysChanged:  make(chan struct{}),
		decisions:    map[string]decision{},
		reservations: map[string]bool{},
	}
	s := &Server{Decider: d, t: t, addr: "127.0.0.1:0", health: health.NewServer()}
	s.SetServing(true)
	s.serve()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve() {
	s.t.Helper()
	var lis net.Listener
	var err error
	// The port of a just-stopped server can take a moment to be free again.
	for range 50 {
		if lis, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("fake decider listen: %v", err)
	}
	s.addr = lis.Addr().String()
	srv := grpc.NewServer()
	switchboardv1.RegisterRouterServiceServer(srv, s.Decider)
	switchboardv1.RegisterEdgeServiceServer(srv, s.Decider)
	healthpb.RegisterHealthServer(srv, s.health)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
}

// Addr is the server's host:port, stable across Restart.
func (s *Server) Addr() string { return s.addr }

// Stop stops the server, cutting open streams.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// SetServing sets the health the fake reports, as the real decider reports
// NOT_SERVING until its catalog is loaded.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(switchboardv1.RouterService_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(switchboardv1.EdgeService_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(readiness.AdmissionService, st)
}

// SetAdmitting sets the admission health alone, as the real decider reports
// it NOT_SERVING while it cannot admit (etcd lost, no broker owner, its
// snapshots failing) though it is up.
func (s *Server) SetAdmitting(admitting bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if admitting {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(readiness.AdmissionService, st)
}

// Restart stops the server and serves again on the same address, as a
// decider restart would look to an edge.
func (s *Server) Restart() {
	s.Stop()
	s.serve()
}

// SetDecide sets the Decide answer.
func (d *Decider) SetDecide(f func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.decide = f
}

// SetListModels sets the ListModels answer.
func (d *Decider) SetListModels(f func(*switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.listModels = f
}

// SetHedgeGrant makes AcquireHedge grant (or refuse) every hedge.
func (d *Decider) SetHedgeGrant(granted bool) {
	d.SetAcquireHedge(func(context.Context, *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
		return &switchboardv1.AcquireHedgeResponse{Granted: granted}, nil
	})
}

// SetAcquireHedge sets the AcquireHedge answer. Without one, every hedge is
// refused.
func (d *Decider) SetAcquireHedge(f func(context.Context, *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hedge = f
}

// SetIdentify sets how ListActivity and GetActivity authenticate their
// caller: f returns the caller's tenant or an error. Without one, every key
// is tenant "acme".
func (d *Decider) SetIdentify(f func(*switchboardv1.Identity) (string, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.identify = f
}

// SetReserve sets the Reserve answer, replacing the default (admit, unless
// RefuseReserve names the endpoint).
func (d *Decider) SetReserve(f func(context.Context, *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserve = f
}

// RefuseReserve makes the default Reserve refuse every reservation on an
// endpoint with ref; a nil ref admits it again.
func (d *Decider) RefuseReserve(endpointID string, ref *switchboardv1.Refusal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refusals == nil {
		d.refusals = map[string]*switchboardv1.Refusal{}
	}
	if ref == nil {
		delete(d.refusals, endpointID)
		return
	}
	d.refusals[endpointID] = ref
}

// ReservationID is the id the default Reserve grants for an idempotency
// key, so a test knows what a call report should carry.
func ReservationID(idempotencyKey string) string { return "rsv-" + idempotencyKey }

// ReserveRequests returns the Reserve requests received so far.
func (d *Decider) ReserveRequests() []*switchboardv1.ReserveRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.ReserveRequest(nil), d.reserveReq...)
}

// ReconcileRequests returns the Reconcile requests received so far.
func (d *Decider) ReconcileRequests() []*switchboardv1.ReconcileRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.ReconcileRequest(nil), d.reconciles...)
}

// HedgeRequests returns the AcquireHedge requests received so far.
func (d *Decider) HedgeRequests() []*switchboardv1.AcquireHedgeRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.AcquireHedgeRequest(nil), d.hedgeReqs...)
}

// ListActivityRequests returns the ListActivity requests received so far.
func (d *Decider) ListActivityRequests() []*switchboardv1.ListActivityRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.ListActivityRequest(nil), d.listReqs...)
}

// GetActivityRequests returns the GetActivity requests received so far.
func (d *Decider) GetActivityRequests() []*switchboardv1.GetActivityRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.GetActivityRequest(nil), d.getReqs...)
}

// DecideRequests returns the Decide requests received so far.
func (d *Decider) DecideRequests() []*switchboardv1.DecideRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.DecideRequest(nil), d.decideReqs...)
}

// Received returns every Report message received so far, across streams.
func (d *Decider) Received() []*switchboardv1.ReportRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.ReportRequest(nil), d.received...)
}

// Streams returns how many Report streams were opened so far.
func (d *Decider) Streams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streams
}

// CallReports returns every CallReport received so far, in order.
func (d *Decider) CallReports() []*switchboardv1.CallReport {
	var out []*switchboardv1.CallReport
	for _, m := range d.Received() {
		out = append(out, m.GetBatch().GetReports()...)
	}
	return out
}

// ActivityRecords returns every activity record received so far, in order.
func (d *Decider) ActivityRecords() []*switchboardv1.ActivityRecord {
	var out []*switchboardv1.ActivityRecord
	for _, m := range d.Received() {
		out = append(out, m.GetActivity().GetRecords()...)
	}
	return out
}

// Send queues a command for the next open Report stream.
func (d *Decider) Send(cmd *switchboardv1.ReportResponse) {
	d.commands <- cmd
}

// Decide implements [switchboardv1.RouterServiceServer.Decide].
func (d *Decider) Decide(_ context.Context, req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
	d.mu.Lock()
	d.decideReqs = append(d.decideReqs, proto.Clone(req).(*switchboardv1.DecideRequest))
	f := d.decide
	d.mu.Unlock()
	if f == nil {
		return nil, status.Error(codes.FailedPrecondition, "no endpoint configured")
	}
	resp, err := f(req)
	if err != nil || resp == nil {
		return resp, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g := resp.GetGrant(); len(g) > 0 {
		d.decisions[resp.GetRequestId()] = decision{grant: g, tenant: resp.GetIdentity().GetTenantId(), apiKeyID: resp.GetIdentity().GetApiKeyId(), caps: resp.GetCaps()}
	}
	d.open(resp.GetReservation().GetReservationId())
	return resp, nil
}

// open records a reservation granted; one already reconciled stays so. The
// lock is held.
func (d *Decider) open(id string) {
	if _, seen := d.reservations[id]; id != "" && !seen {
		d.reservations[id] = true
	}
}

// ListModels implements [switchboardv1.RouterServiceServer.ListModels].
func (d *Decider) ListModels(_ context.Context, req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
	d.mu.Lock()
	f := d.listModels
	d.mu.Unlock()
	if f == nil {
		return &switchboardv1.ListModelsResponse{}, nil
	}
	return f(req)
}

// AcquireHedge implements [switchboardv1.EdgeServiceServer.AcquireHedge].
func (d *Decider) AcquireHedge(ctx context.Context, req *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	d.mu.Lock()
	d.hedgeReqs = append(d.hedgeReqs, proto.Clone(req).(*switchboardv1.AcquireHedgeRequest))
	f := d.hedge
	d.mu.Unlock()
	if f == nil {
		return &switchboardv1.AcquireHedgeResponse{}, nil
	}
	return f(ctx, req)
}

// Reserve implements [switchboardv1.RouterServiceServer.Reserve]: by
// default it admits with id ReservationID(idempotency_key), or answers the
// refusal RefuseReserve set for the endpoint. Like the real decider, it
// refuses a request without an endpoint as invalid.
func (d *Decider) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	d.mu.Lock()
	d.reserveReq = append(d.reserveReq, proto.Clone(req).(*switchboardv1.ReserveRequest))
	f := d.reserve
	ref := d.refusals[req.GetEndpointId()]
	d.mu.Unlock()
	if req.GetEndpointId() == "" {
		return nil, status.Error(codes.InvalidArgument, "endpoint_id is required")
	}
	resp, err := d.answerReserve(ctx, f, ref, req)
	if err == nil && resp.GetAdmitted() {
		d.mu.Lock()
		d.open(resp.GetReservation().GetReservationId())
		d.mu.Unlock()
	}
	return resp, err
}

func (d *Decider) answerReserve(ctx context.Context, f func(context.Context, *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error),
	ref *switchboardv1.Refusal, req *switchboardv1.ReserveRequest,
) (*switchboardv1.ReserveResponse, error) {
	if f != nil {
		return f(ctx, req)
	}
	if ref != nil {
		return &switchboardv1.ReserveResponse{Refusal: proto.Clone(ref).(*switchboardv1.Refusal)}, nil
	}
	return &switchboardv1.ReserveResponse{Admitted: true, Reservation: &switchboardv1.Reservation{
		ReservationId: ReservationID(req.GetIdempotencyKey()), RequestId: req.GetRequestId(),
		IdempotencyKey: req.GetIdempotencyKey(), Demand: req.GetDemand(),
	}}, nil
}

// Reconcile implements [switchboardv1.RouterServiceServer.Reconcile]: it
// records the request and closes the reservation, as the real decider does:
// NOT_FOUND for a reservation never granted, an error for one reconciled
// already.
func (d *Decider) Reconcile(_ context.Context, req *switchboardv1.ReconcileRequest) (*switchboardv1.ReconcileResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reconciles = append(d.reconciles, proto.Clone(req).(*switchboardv1.ReconcileRequest))
	id := req.GetReservationId()
	open, known := d.reservations[id]
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "reservation_id is required")
	case !known:
		return nil, status.Errorf(codes.NotFound, "reconcile %q: no such reservation", id)
	case !open:
		return nil, status.Errorf(codes.NotFound, "reconcile %s: reservation already reconciled", id)
	}
	d.reservations[id] = false
	return &switchboardv1.ReconcileResponse{OwnerTerm: d.term}, nil
}

func (d *Decider) tenantOf(id *switchboardv1.Identity) (string, error) {
	d.mu.Lock()
	f := d.identify
	d.mu.Unlock()
	if f == nil {
		return "acme", nil
	}
	return f(id)
}

// ListActivity implements [switchboardv1.RouterServiceServer.ListActivity]:
// the caller's tenant's records, newest first, filtered, paged by an offset
// cursor.
func (d *Decider) ListActivity(_ context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	d.mu.Lock()
	d.listReqs = append(d.listReqs, proto.Clone(req).(*switchboardv1.ListActivityRequest))
	d.mu.Unlock()
	tenant, err := d.tenantOf(req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 || req.GetLimit() > 500 {
		return nil, status.Error(codes.InvalidArgument, "limit must be between 1 and 500")
	}
	var recs []*switchboardv1.ActivityRecord
	for _, r := range d.stored() {
		t := r.GetCreateTime().AsTime()
		switch {
		case r.GetTenantId() != tenant,
			req.GetModel() != "" && r.GetModel() != req.GetModel(),
			req.GetStartTime() != nil && t.Before(req.GetStartTime().AsTime()),
			req.GetEndTime() != nil && !t.Before(req.GetEndTime().AsTime()):
			continue
		}
		recs = append(recs, r)
	}
	slices.Reverse(recs)
	offset := 0
	if c := req.GetCursor(); c != "" {
		if offset, err = strconv.Atoi(c); err != nil || offset < 0 {
			return nil, status.Error(codes.InvalidArgument, "invalid cursor")
		}
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 50
	}
	resp := &switchboardv1.ListActivityResponse{}
	if offset < len(recs) {
		end := min(offset+limit, len(recs))
		resp.Records = recs[offset:end]
		if end < len(recs) {
			resp.NextCursor = strconv.Itoa(end)
		}
	}
	return resp, nil
}

// stored is the activity log: the records received whose grant is their
// decision's, each id once (the first received), in the order received.
func (d *Decider) stored() []*switchboardv1.ActivityRecord {
	recs := d.ActivityRecords()
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	var out []*switchboardv1.ActivityRecord
	for _, r := range recs {
		dec, ok := d.decisions[r.GetId()]
		if !ok || seen[r.GetId()] || !bytes.Equal(dec.grant, r.GetGrant()) ||
			dec.tenant != r.GetTenantId() || dec.apiKeyID != r.GetApiKeyId() || !proto.Equal(dec.caps, r.GetCaps()) {
			continue
		}
		seen[r.GetId()] = true
		out = append(out, r)
	}
	return out
}

// GetActivity implements [switchboardv1.RouterServiceServer.GetActivity]:
// NOT_FOUND for an unknown id and for another tenant's.
func (d *Decider) GetActivity(_ context.Context, req *switchboardv1.GetActivityRequest) (*switchboardv1.GetActivityResponse, error) {
	d.mu.Lock()
	d.getReqs = append(d.getReqs, proto.Clone(req).(*switchboardv1.GetActivityRequest))
	d.mu.Unlock()
	tenant, err := d.tenantOf(req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	for _, r := range d.stored() {
		if r.GetId() == req.GetId() && r.GetTenantId() == tenant {
			return &switchboardv1.GetActivityResponse{Record: r}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no activity %q", req.GetId())
}

// Report implements [switchboardv1.EdgeServiceServer.Report]: it records
// what the edge sends and forwards queued commands. As on the real decider,
// the first message must be a hello with an edge id.
func (d *Decider) Report(stream grpc.BidiStreamingServer[switchboardv1.ReportRequest, switchboardv1.ReportResponse]) error {
	d.mu.Lock()
	d.streams++
	d.mu.Unlock()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.received = append(d.received, first)
	d.mu.Unlock()
	if first.GetHello().GetEdgeId() == "" {
		return status.Error(codes.InvalidArgument, "the first Report message must be a hello with an edge_id")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	acks := make(chan *switchboardv1.ReportResponse, 1024)
	wg.Go(func() {
		// Like the real decider: the key set when the stream opens, then
		// the owner's term, then each new one of either, a new key set
		// before anything else waiting.
		ks, keysChanged := d.keySet()
		if ks != nil {
			if err := stream.Send(keySetCommand(ks)); err != nil {
				return
			}
		}
		term, changed := d.ownerTerm()
		if err := stream.Send(ownerTermCommand(term)); err != nil {
			return
		}
		for {
			var cmd *switchboardv1.ReportResponse
			select {
			case <-keysChanged:
			default:
				select {
				case <-ctx.Done():
					return
				case cmd = <-d.commands:
				case cmd = <-acks:
				case <-changed:
					term, changed = d.ownerTerm()
					cmd = ownerTermCommand(term)
				case <-keysChanged:
				}
			}
			if cmd == nil { // the key set changed
				if ks, keysChanged = d.keySet(); ks == nil {
					continue // withdrawn: none to send
				}
				cmd = keySetCommand(ks)
			}
			if err := stream.Send(cmd); err != nil {
				return
			}
		}
	})
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		d.mu.Lock()
		d.received = append(d.received, msg)
		withhold := d.withholdAcks
		d.mu.Unlock()
		if b := msg.GetBatch(); b != nil {
			// Like the real decider: call reports are acknowledged by
			// count, best effort.
			select {
			case acks <- &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
				Accepted: int64(len(b.GetReports()))}}}:
			default:
			}
		}
		if rb := msg.GetReconcile(); rb != nil {
			d.mu.Lock()
			withholdR, term := d.withholdReconcileAcks, d.term
			if d.ackTerm != 0 {
				term = d.ackTerm
			}
			if !withholdR {
				// Applied once, like the real broker: a reservation
				// reconciled here is closed.
				for _, r := range rb.GetReconciles() {
					if d.reservations[r.GetReservationId()] {
						d.reservations[r.GetReservationId()] = false
					}
				}
			}
			d.mu.Unlock()
			// A replay (sequence 0) is applied but never acknowledged.
			if !withholdR && rb.GetSequence() != 0 {
				select {
				case acks <- &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
					Accepted: int64(len(rb.GetReconciles())), ReconcileSequence: rb.GetSequence(), OwnerTerm: term}}}:
				default:
				}
			}
		}
		if a := msg.GetActivity(); a != nil && !withhold {
			// Like the real decider: acknowledge an activity batch by its
			// sequence once it is "stored".
			select {
			case acks <- &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
				Accepted: int64(len(a.GetRecords())), ActivitySequence: a.GetSequence()}}}:
			default:
			}
		}
	}
}

// SetOwnerTerm makes term the broker owner's term, announced at once on the
// open Report streams (as the real decider does when a new owner is
// elected) and named in later reconcile acks. It starts at 1.
func (d *Decider) SetOwnerTerm(term int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.term = term
	close(d.termChanged)
	d.termChanged = make(chan struct{})
}

// TestKeys are API keys the edge's tests send, which DefaultKeySet holds:
// the client keys of the edge's test harnesses, including those its tests
// expect the decider (not the key set) to refuse. TestKey draws more.
var TestKeys = []string{
	"sk-client-key-do-not-log-0001", "sk-other-tenant", "sk-revoked", "other",
	"sk-unknown-1", "sk-unknown-2", "sk-unknown-3",
}

// testKeyCount is how many keys TestKey draws from.
const testKeyCount = 4096

// TestKey is the n-th (from 1) of the fresh keys DefaultKeySet holds
// besides TestKeys, for a test that needs a key no request has used yet.
func TestKey(n int) string { return fmt.Sprintf("sk-unknown-probe-%d", n) }

// DefaultKeySet is the key set a fake sends unless told otherwise: version
// 1, holding TestKeys and the first 4096 TestKey keys, so that an edge under
// test has a key set, as every edge of the real decider has, that refuses on
// the headers only keys the edge's tests never send.
func DefaultKeySet() *switchboardv1.KeySet {
	keys := append([]string(nil), TestKeys...)
	for n := 1; n <= testKeyCount; n++ {
		keys = append(keys, TestKey(n))
	}
	return KeySetOf(1, keys...)
}

// KeySetOf is the key set of version holding keys, as the real decider
// derives it from its catalog's keys.
func KeySetOf(version uint64, keys ...string) *switchboardv1.KeySet {
	ks := &switchboardv1.KeySet{Version: version}
	for _, k := range keys {
		p, err := catalog.KeyPrefix(catalog.HashKey(k))
		if err != nil {
			panic(err) // a SHA-256 in hex is always long enough
		}
		ks.KeyPrefixes = append(ks.KeyPrefixes, p)
	}
	return ks
}

// SetKeySet makes ks the set of valid API keys, sent first on every Report
// stream and at once on the open ones (as the real decider does when its
// catalog changes). nil sends none from then on, which the real decider
// never does. It starts as DefaultKeySet.
func (d *Decider) SetKeySet(ks *switchboardv1.KeySet) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keys = ks
	close(d.keysChanged)
	d.keysChanged = make(chan struct{})
}

func (d *Decider) keySet() (*switchboardv1.KeySet, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.keys, d.keysChanged
}

func keySetCommand(ks *switchboardv1.KeySet) *switchboardv1.ReportResponse {
	return &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_KeySet{KeySet: ks}}
}

// AckUnderTerm makes reconcile acks name term instead of the owner's (0:
// the owner's again), as acks of batches an older owner applied that arrive
// after a newer owner's term was announced do.
func (d *Decider) AckUnderTerm(term int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ackTerm = term
}

func (d *Decider) ownerTerm() (int64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.term, d.termChanged
}

func ownerTermCommand(term int64) *switchboardv1.ReportResponse {
	return &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_OwnerTerm{OwnerTerm: &switchboardv1.OwnerTerm{Term: term}}}
}

// WithholdReconcileAcks makes the fake stop (or resume) acknowledging
// reconcile batches, as a decider whose broker has no owner yet would.
func (d *Decider) WithholdReconcileAcks(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.withholdReconcileAcks = on
}

// ReconcileBatches returns the reconcile batches received on Report streams,
// resends included.
func (d *Decider) ReconcileBatches() []*switchboardv1.ReconcileBatch {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*switchboardv1.ReconcileBatch
	for _, m := range d.received {
		if b := m.GetReconcile(); b != nil {
			out = append(out, b)
		}
	}
	return out
}

// Heartbeats returns the reservation heartbeats received on Report streams.
func (d *Decider) Heartbeats() []*switchboardv1.ReservationHeartbeat {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*switchboardv1.ReservationHeartbeat
	for _, m := range d.received {
		if h := m.GetHeartbeat(); h != nil {
			out = append(out, h)
		}
	}
	return out
}

// WithholdActivityAcks makes the fake stop (or resume) acknowledging
// activity batches, as a decider that crashed before storing them would.
func (d *Decider) WithholdActivityAcks(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.withholdAcks = on
}
