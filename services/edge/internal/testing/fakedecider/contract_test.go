package fakedecider_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
)

// The contract: what the edge relies on the decider for beyond the answers
// a test scripts (reservations, reconciliation, the Report stream's acks,
// the activity log's scoping), run as one table against the fake and
// against the real decider. The real one is the truth: where they differ,
// the fake is wrong.

const (
	contractModel = "vendor/model"
	edgeToken     = "contract-edge-token"
	replicaToken  = "contract-replica-token"
	// The clients' API keys: two tenants, and one whose limit of one
	// request a minute refuses its second reservation.
	acmeKey   = "sk-contract-acme"
	globexKey = "sk-contract-globex"
	tightKey  = "sk-contract-tight"
	// waitFor bounds every wait for an acknowledgement.
	waitFor = 10 * time.Second
)

// backend is one decider the table runs against.
type backend struct {
	client edgeClient
	// decide asks for a decision for requestID as the client with key, as
	// the edge does before it reserves and reports.
	decide func(t *testing.T, requestID, key string) *switchboardv1.DecideResponse
	// refuseTight makes the next reservations of the client with tightKey
	// refused, its own limit being full.
	refuseTight func(t *testing.T, endpointID string)
}

// TestContract runs every scenario against the fake and the real decider.
func TestContract(t *testing.T) {
	backends := map[string]func(t *testing.T) *backend{"fake": startFake, "real": startReal}
	for _, name := range []string{"fake", "real"} {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) { sc.run(t, b) })
			}
		})
	}
}

var scenarios = []struct {
	name string
	run  func(t *testing.T, b *backend)
}{
	// First, on a decider just started, whose broker may have no owner yet:
	// the order holds from a stream's start.
	{"the Report stream is sent the key set first, then the owner's term, then acks", func(t *testing.T, b *backend) {
		r := openReport(t, b)
		r.send(t, reconcileBatch(1, "never-granted-order"))
		for r.ack(t).GetReconcileSequence() != 1 {
		}
		got := r.commands()
		require.GreaterOrEqual(t, len(got), 3, "%v", got)
		require.Equal(t, []string{"key_set", "owner_term"}, got[:2], "the key set before anything else, the owner's term before any ack: %v", got)
		require.Contains(t, got[2:], "ack")
		ks := r.firstKeySet()
		require.Positive(t, ks.GetVersion())
		for _, key := range []string{acmeKey, globexKey, tightKey} {
			p, err := catalog.KeyPrefix(catalog.HashKey(key))
			require.NoError(t, err)
			require.Contains(t, ks.GetKeyPrefixes(), p, "the key set holds the catalog's keys")
		}
		p, err := catalog.KeyPrefix(catalog.HashKey("sk-unknown"))
		require.NoError(t, err)
		require.NotContains(t, ks.GetKeyPrefixes(), p, "and no other")
	}},
	{"batches are acknowledged by kind, a replay never", func(t *testing.T, b *backend) {
		r := openReport(t, b)
		r.send(t, &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: []*switchboardv1.CallReport{
			{RequestId: "c-acks", Model: contractModel, EndpointId: "e", Outcome: switchboardv1.Outcome_OUTCOME_OK},
			{RequestId: "c-acks", Model: contractModel, EndpointId: "e", Outcome: switchboardv1.Outcome_OUTCOME_OK},
		}}}})
		r.send(t, &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{Sequence: 1}}})
		r.send(t, &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{Heartbeat: &switchboardv1.ReservationHeartbeat{ReservationIds: []string{"never-granted"}}}})
		r.send(t, reconcileBatch(0, "never-granted-1", "never-granted-2", "never-granted-3"))
		r.send(t, reconcileBatch(2, "never-granted-4"))
		var acks []*switchboardv1.ReportAck
		for len(acks) == 0 || acks[len(acks)-1].GetReconcileSequence() != 2 {
			acks = append(acks, r.ack(t))
		}
		term := r.ownerTerm(t)
		require.Positive(t, term, "the stream is told the broker owner's term")
		require.ElementsMatch(t, []*switchboardv1.ReportAck{
			{Accepted: 2},
			{ActivitySequence: 1},
			{Accepted: 1, ReconcileSequence: 2, OwnerTerm: term},
		}, acks, "a call-report batch by count, an activity batch and a reconcile batch by sequence, under the owner's term; no ack for the replay or the heartbeat")
	}},
	{"reserve admits and echoes the request", func(t *testing.T, b *backend) {
		req := reserveRequest(b.decide(t, "c-admit", acmeKey), acmeKey)
		resp, err := b.client.Reserve(t.Context(), req)
		require.NoError(t, err)
		require.True(t, resp.GetAdmitted())
		require.Nil(t, resp.GetRefusal())
		r := resp.GetReservation()
		require.NotEmpty(t, r.GetReservationId())
		require.Equal(t, req.GetRequestId(), r.GetRequestId())
		require.Equal(t, req.GetIdempotencyKey(), r.GetIdempotencyKey())
		require.True(t, proto.Equal(req.GetDemand(), r.GetDemand()), "reserved %v, asked %v", r.GetDemand(), req.GetDemand())
	}},
	{"a retried reserve returns the same reservation", func(t *testing.T, b *backend) {
		req := reserveRequest(b.decide(t, "c-retry", acmeKey), acmeKey)
		first, err := b.client.Reserve(t.Context(), req)
		require.NoError(t, err)
		again, err := b.client.Reserve(t.Context(), req)
		require.NoError(t, err)
		require.True(t, again.GetAdmitted())
		require.Equal(t, first.GetReservation().GetReservationId(), again.GetReservation().GetReservationId())
	}},
	{"reserve without an endpoint is invalid", func(t *testing.T, b *backend) {
		req := reserveRequest(b.decide(t, "c-noendpoint", acmeKey), acmeKey)
		req.EndpointId = ""
		_, err := b.client.Reserve(t.Context(), req)
		requireCode(t, codes.InvalidArgument, err)
	}},
	{"a refusal is an answer, not an error", func(t *testing.T, b *backend) {
		dec := b.decide(t, "c-refused", tightKey)
		b.refuseTight(t, dec.GetEndpoint().GetId())
		resp, err := b.client.Reserve(t.Context(), reserveRequest(dec, tightKey))
		require.NoError(t, err)
		require.False(t, resp.GetAdmitted())
		require.Nil(t, resp.GetReservation())
		require.NotEqual(t, switchboardv1.RefusalReason_REFUSAL_REASON_UNSPECIFIED, resp.GetRefusal().GetReason())
	}},
	{"a reservation is reconciled once", func(t *testing.T, b *backend) {
		id := reserve(t, b, "c-once")
		_, err := b.client.Reconcile(t.Context(), reconcile(id))
		require.NoError(t, err)
		_, err = b.client.Reconcile(t.Context(), reconcile(id))
		requireCode(t, codes.NotFound, err)
	}},
	{"reconciling an unknown reservation is NOT_FOUND", func(t *testing.T, b *backend) {
		_, err := b.client.Reconcile(t.Context(), reconcile("never-granted"))
		requireCode(t, codes.NotFound, err)
	}},
	{"reconcile without a reservation id is invalid", func(t *testing.T, b *backend) {
		_, err := b.client.Reconcile(t.Context(), reconcile(""))
		requireCode(t, codes.InvalidArgument, err)
	}},
	{"the Report stream opens with a hello", func(t *testing.T, b *backend) {
		// Bounded: a server that wrongly takes the stream would keep it open.
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		stream, err := b.client.Report(ctx)
		require.NoError(t, err)
		require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{}}}))
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
		}
		requireCode(t, codes.InvalidArgument, err)
	}},
	{"a reservation reconciled in an acknowledged batch is closed", func(t *testing.T, b *backend) {
		id := reserve(t, b, "c-batch")
		r := openReport(t, b)
		r.send(t, reconcileBatch(1, id))
		for r.ack(t).GetReconcileSequence() != 1 {
		}
		_, err := b.client.Reconcile(t.Context(), reconcile(id))
		require.Error(t, err, "applied from the batch already")
	}},
	{"the activity log keeps granted records once, for their tenant only", func(t *testing.T, b *backend) {
		mine := b.decide(t, "c-act-mine", acmeKey)
		forged := b.decide(t, "c-act-forged", acmeKey)
		theirs := b.decide(t, "c-act-theirs", globexKey)
		now := time.Now()
		bad := record(forged, now)
		bad.Grant = []byte("not the decision's grant")
		raised := b.decide(t, "c-act-raised", acmeKey)
		moreCaps := record(raised, now)
		moreCaps.Caps = &switchboardv1.DecisionCaps{MaxInputTokens: 1 << 30, MaxOutputTokens: 1 << 30, MaxCostUsd: 1e5, MaxAttemptsCostUsd: 1e5}
		r := openReport(t, b)
		r.send(t, activityBatch(1, record(mine, now), bad, moreCaps, record(theirs, now)))
		r.send(t, activityBatch(2, record(mine, now))) // a resend
		for r.ack(t).GetActivitySequence() != 2 {
		}

		list := func(key string) []string {
			resp, err := b.client.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{Identity: clientIdentity(key), Model: contractModel})
			require.NoError(t, err)
			var ids []string
			for _, rec := range resp.GetRecords() {
				ids = append(ids, rec.GetId())
			}
			return ids
		}
		require.Equal(t, []string{"c-act-mine"}, list(acmeKey), "kept once, the forged one and the one with other caps dropped, the other tenant's not shown")
		require.Equal(t, []string{"c-act-theirs"}, list(globexKey))

		get := func(key, id string) error {
			_, err := b.client.GetActivity(t.Context(), &switchboardv1.GetActivityRequest{Identity: clientIdentity(key), Id: id})
			return err
		}
		require.NoError(t, get(acmeKey, "c-act-mine"))
		requireCode(t, codes.NotFound, get(acmeKey, "c-act-theirs"))
		requireCode(t, codes.NotFound, get(acmeKey, "c-act-forged"))
		requireCode(t, codes.InvalidArgument, get(acmeKey, ""))
		requireCode(t, codes.Unauthenticated, get("sk-unknown", "c-act-mine"))
		_, err := b.client.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{Identity: clientIdentity(acmeKey), Limit: 501})
		requireCode(t, codes.InvalidArgument, err)
	}},
}

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want, status.Code(err), "%v", err)
}

// clientIdentity is the identity the edge sends for a client's key.
func clientIdentity(key string) *switchboardv1.Identity {
	return &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(key)}
}

// reserveRequest is the Reserve the edge sends for a decided request: the
// resolved identity with the client's key hash, on the decided endpoint.
func reserveRequest(dec *switchboardv1.DecideResponse, key string) *switchboardv1.ReserveRequest {
	who := proto.Clone(dec.GetIdentity()).(*switchboardv1.Identity)
	who.ApiKeySha256 = catalog.HashKey(key)
	ep := dec.GetEndpoint().GetId()
	return &switchboardv1.ReserveRequest{
		RequestId: dec.GetRequestId(), IdempotencyKey: dec.GetRequestId() + "|" + ep, Identity: who,
		Model: contractModel, EndpointId: ep,
		Demand: &switchboardv1.Demand{InputTokens: 100, OutputTokens: 10, Usd: 0.0001, Requests: 1},
	}
}

// reserve reserves for a new request of acme's and returns the reservation.
func reserve(t *testing.T, b *backend, requestID string) string {
	t.Helper()
	resp, err := b.client.Reserve(t.Context(), reserveRequest(b.decide(t, requestID, acmeKey), acmeKey))
	require.NoError(t, err)
	require.True(t, resp.GetAdmitted())
	return resp.GetReservation().GetReservationId()
}

func reconcile(id string) *switchboardv1.ReconcileRequest {
	return &switchboardv1.ReconcileRequest{ReservationId: id, Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true}}
}

func reconcileBatch(seq uint64, ids ...string) *switchboardv1.ReportRequest {
	b := &switchboardv1.ReconcileBatch{Sequence: seq}
	for _, id := range ids {
		b.Reconciles = append(b.Reconciles, reconcile(id))
	}
	return &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: b}}
}

func activityBatch(seq uint64, recs ...*switchboardv1.ActivityRecord) *switchboardv1.ReportRequest {
	return &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{Sequence: seq, Records: recs}}}
}

// record is the activity record the edge reports for a decided request.
func record(dec *switchboardv1.DecideResponse, at time.Time) *switchboardv1.ActivityRecord {
	return &switchboardv1.ActivityRecord{
		Id: dec.GetRequestId(), CreateTime: timestamppb.New(at), TenantId: dec.GetIdentity().GetTenantId(),
		ApiKeyId: dec.GetIdentity().GetApiKeyId(), Model: contractModel, EndpointId: dec.GetEndpoint().GetId(),
		Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200, Grant: dec.GetGrant(), Caps: dec.GetCaps(),
	}
}

// report is an open Report stream.
type report struct {
	stream grpc.BidiStreamingClient[switchboardv1.ReportRequest, switchboardv1.ReportResponse]
	acks   chan *switchboardv1.ReportAck
	// term is the latest broker owner term announced on the stream.
	term atomic.Int64

	mu sync.Mutex
	// kinds are the kinds of the messages received, in order (commandKind).
	kinds []string
	// keys is the first key set received.
	keys *switchboardv1.KeySet
}

// commandKind is the name of the command field a ReportResponse sets.
func commandKind(m *switchboardv1.ReportResponse) string {
	pm := m.ProtoReflect()
	if f := pm.WhichOneof(pm.Descriptor().Oneofs().ByName("command")); f != nil {
		return string(f.Name())
	}
	return ""
}

// commands returns the kinds of the messages received so far, in order.
func (r *report) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.kinds...)
}

// firstKeySet returns the first key set received, nil before one.
func (r *report) firstKeySet() *switchboardv1.KeySet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys
}

// openReport opens a Report stream as an edge that has its reconciliations
// acknowledged, and collects the acks it receives and the kind of every
// message, in order (what other commands say is no part of the contract).
func openReport(t *testing.T, b *backend) *report {
	t.Helper()
	stream, err := b.client.Report(t.Context())
	require.NoError(t, err)
	r := &report{stream: stream, acks: make(chan *switchboardv1.ReportAck, 64)}
	r.send(t, &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "contract"}}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.kinds = append(r.kinds, commandKind(m))
			if ks := m.GetKeySet(); ks != nil && r.keys == nil {
				r.keys = ks
			}
			r.mu.Unlock()
			if ot := m.GetOwnerTerm(); ot != nil {
				r.term.Store(ot.GetTerm())
			}
			if a := m.GetAck(); a != nil {
				select {
				case r.acks <- a:
				case <-stream.Context().Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = stream.CloseSend()
		<-done // the test's context, cancelled at its end, ends the stream
	})
	return r
}

func (r *report) send(t *testing.T, m *switchboardv1.ReportRequest) {
	t.Helper()
	require.NoError(t, r.stream.Send(m))
}

// ownerTerm is the broker owner's term the stream was told, announced
// before any acknowledgement.
func (r *report) ownerTerm(t *testing.T) int64 {
	t.Helper()
	return r.term.Load()
}

// ack waits for the next acknowledgement.
func (r *report) ack(t *testing.T) *switchboardv1.ReportAck {
	t.Helper()
	select {
	case a := <-r.acks:
		return a
	case <-time.After(waitFor):
		t.Fatal("no acknowledgement")
		return nil
	}
}

// edgeClient is a client of the decider's services an edge calls.
type edgeClient struct {
	switchboardv1.RouterServiceClient
	switchboardv1.EdgeServiceClient
}

// dial connects as the edge, with its bearer token.
func dial(t *testing.T, addr string) edgeClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(edgeToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return edgeClient{switchboardv1.NewRouterServiceClient(conn), switchboardv1.NewEdgeServiceClient(conn)}
}

// startFake is the fake, scripted as the edge's tests script it: Decide
// answers with a grant per request and the key's tenant, and the activity
// log knows the catalog's keys.
func startFake(t *testing.T) *backend {
	fd := fakedecider.Start(t)
	fd.SetKeySet(fakedecider.KeySetOf(1, acmeKey, globexKey, tightKey))
	tenants := map[string]string{
		catalog.HashKey(acmeKey): "acme", catalog.HashKey(globexKey): "globex", catalog.HashKey(tightKey): "tight",
	}
	identify := func(id *switchboardv1.Identity) (string, error) {
		if tenant, ok := tenants[id.GetApiKeySha256()]; ok {
			return tenant, nil
		}
		return "", status.Error(codes.Unauthenticated, "unknown API key")
	}
	fd.SetIdentify(identify)
	fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		tenant, err := identify(req.GetIdentity())
		if err != nil {
			return nil, err
		}
		return &switchboardv1.DecideResponse{
			RequestId: req.GetRequestId(), Model: req.GetModel(),
			Endpoint: &switchboardv1.Endpoint{Id: "alpha-endpoint", Provider: "alpha"},
			Identity: &switchboardv1.Identity{TenantId: tenant, ApiKeyId: "key-" + tenant},
			Grant:    []byte("grant:" + req.GetRequestId()),
			Caps:     &switchboardv1.DecisionCaps{MaxInputTokens: 1000, MaxOutputTokens: 1000, MaxCostUsd: 1, MaxAttemptsCostUsd: 2},
		}, nil
	})
	b := &backend{client: dial(t, fd.Addr())}
	b.decide = decideWith(b)
	b.refuseTight = func(t *testing.T, endpointID string) {
		fd.RefuseReserve(endpointID, &switchboardv1.Refusal{
			Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
			Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, Limit: 1,
		})
		t.Cleanup(func() { fd.RefuseReserve(endpointID, nil) })
	}
	return b
}

// startReal is the decider itself, in-process on an embedded etcd, with a
// catalog of one model, the three clients and the edge as a caller.
func startReal(t *testing.T) *backend {
	dir := t.TempDir()
	cat := fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
tenants:
  - {id: acme, api_keys_sha256: [%s]}
  - {id: globex, api_keys_sha256: [%s]}
  - id: tight
    api_keys_sha256: [%s]
    limits: [{unit: requests, per: minute, capacity: 1}]
callers:
  - {id: edges, role: edge, tokens_sha256: [%s]}
  - {id: deciders, role: replica, tokens_sha256: [%s]}
`, contractModel, catalog.HashKey(acmeKey), catalog.HashKey(globexKey), catalog.HashKey(tightKey),
		catalog.HashKey(edgeToken), catalog.HashKey(replicaToken))
	catPath := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(catPath, []byte(cat), 0o600))
	tokenPath := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenPath, []byte(replicaToken+"\n"), 0o600))
	d, err := deciderapp.Start(t.Context(), deciderapp.Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: catPath, TokenFile: tokenPath,
		ID: "contract", ShutdownTimeout: 5 * time.Second, Exploration: -1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	b := &backend{client: dial(t, d.Addr())}
	b.decide = decideWith(b)
	b.refuseTight = func(t *testing.T, _ string) {
		// Its limit is one request a minute: the first reservation fills it.
		reserve := reserveRequest(b.decide(t, "c-fill-tight", tightKey), tightKey)
		resp, err := b.client.Reserve(t.Context(), reserve)
		require.NoError(t, err)
		require.True(t, resp.GetAdmitted())
	}
	// No waiting for the broker's owner, elected after Start returns: a
	// stream opened before is told its term before any ack all the same.
	return b
}

// decideWith asks the backend's Decide, as the edge does.
func decideWith(b *backend) func(t *testing.T, requestID, key string) *switchboardv1.DecideResponse {
	return func(t *testing.T, requestID, key string) *switchboardv1.DecideResponse {
		t.Helper()
		return decide(t, b.client, requestID, key)
	}
}

func decide(t *testing.T, c switchboardv1.RouterServiceClient, requestID, key string) *switchboardv1.DecideResponse {
	t.Helper()
	resp, err := c.Decide(t.Context(), &switchboardv1.DecideRequest{
		RequestId: requestID, Identity: clientIdentity(key), Model: contractModel,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10},
	})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetEndpoint().GetId())
	return resp
}
