package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
)

const (
	nightlyKey = "sk-acme-nightly"
	small      = "vendor/small"
)

// classCatalog has a cheap fallback model for interactive requests (named
// by one of its aliases), a tenant whose nightly key is batch, and one
// concurrent request per endpoint of the main model.
var classCatalog = `
models:
  - id: ` + model + `
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}, limits: [{unit: concurrent_requests, capacity: 1}]}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.3, output: 1.0}, limits: [{unit: concurrent_requests, capacity: 1}]}
  - id: ` + small + `
    aliases: ["claude-haiku-*"]
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.02, output: 0.08}}
workload_classes:
  interactive: {max_wait: 200ms, overload: fallback, fallback_model: claude-haiku-4-5}
  background: {max_wait: 100ms}
  batch: {max_wait: 100ms}
tenants:
  - id: acme
    api_keys_sha256: [` + catalog.HashKey(acmeKey) + `]
    api_keys: [{sha256: ` + catalog.HashKey(nightlyKey) + `, class: batch}]
  - id: globex
    api_keys_sha256: [` + catalog.HashKey(globexKey) + `]
    classes: [background]
    default_class: background
    limits: [{unit: concurrent_requests, capacity: 1}]
`

// startWith serves a ready Server for catalog yaml over bufconn, with
// admission on embedded etcd.
func startWith(t *testing.T, yaml string) switchboardv1.DeciderClient {
	t.Helper()
	srv := server.New(build(t, yaml).Deps)
	return serve(t, grpc.NewServer(), srv)
}

func withClass(id *switchboardv1.Identity, cls switchboardv1.WorkloadClass) *switchboardv1.Identity {
	id.WorkloadClass = cls
	return id
}

// TestDecideResolvesClass checks the class Decide admits a request as, and
// that a class the tenant may not use is refused before anything is
// reserved.
func TestDecideResolvesClass(t *testing.T) {
	client := startWith(t, classCatalog)
	ctx := t.Context()
	decide := func(id *switchboardv1.Identity) (*switchboardv1.DecideResponse, error) {
		return client.Decide(ctx, &switchboardv1.DecideRequest{Identity: id, Model: model, Reserve: true,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 10}})
	}
	for _, tt := range []struct {
		name string
		id   *switchboardv1.Identity
		want switchboardv1.WorkloadClass
	}{
		{"default", key(acmeKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE},
		{"the key's", key(nightlyKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH},
		{"asked for", withClass(key(nightlyKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND), switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND},
		{"the tenant's default", key(globexKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND},
	} {
		d, err := decide(tt.id)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, d.GetIdentity().GetWorkloadClass(), tt.name)
		require.NotEmpty(t, d.GetReservation().GetReservationId(), tt.name)
		_, err = client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: d.GetReservation().GetReservationId(), Usage: &switchboardv1.Usage{}})
		require.NoError(t, err)
	}
	_, err := decide(withClass(key(acmeKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_PARTNER))
	requireCode(t, codes.PermissionDenied, err, "partner is not for a tenant without a partner")
	require.ErrorContains(t, err, "workload class partner is not allowed for this tenant")
	_, err = client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: withClass(key(globexKey), switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE),
		RequestId: "r", Model: model, EndpointId: "alpha/" + model, Demand: &switchboardv1.Demand{Requests: 1}})
	requireCode(t, codes.PermissionDenied, err, "Reserve checks the class like Decide")
}

// TestDecideRefusalCarriesCodeAndFallback checks what a refusal says: its
// stable code and class, and, for an interactive request refused for the
// provider's capacity, the class's fallback model; never for the caller's
// own limit, which another model would not relieve.
func TestDecideRefusalCarriesCodeAndFallback(t *testing.T) {
	client := startWith(t, classCatalog)
	ctx := t.Context()
	decide := func(id *switchboardv1.Identity) *switchboardv1.DecideResponse {
		d, err := client.Decide(ctx, &switchboardv1.DecideRequest{Identity: id, Model: model, Reserve: true,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 10}})
		require.NoError(t, err)
		return d
	}
	// Both endpoints' one slot each, taken.
	first, second := decide(key(acmeKey)), decide(key(nightlyKey))
	require.NotEqual(t, first.GetEndpoint().GetId(), second.GetEndpoint().GetId(), "a full endpoint is skipped for the next")

	d := decide(key(acmeKey))
	ref := d.GetRefusal()
	require.NotNil(t, ref)
	require.Nil(t, d.GetEndpoint())
	require.Equal(t, broker.CodeQueueDeadline, ref.GetCode(), "waited its class's max_wait for a slot")
	require.Positive(t, d.GetQueue().GetWaited().AsDuration())
	require.Equal(t, switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE, ref.GetWorkloadClass())
	require.Equal(t, small, ref.GetFallbackModel(), "interactive degrades to its fallback model, by its id")
	f, err := client.Decide(ctx, &switchboardv1.DecideRequest{Identity: key(acmeKey), Model: "claude-haiku-4-5-20251001", Reserve: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 10}})
	require.NoError(t, err)
	require.Equal(t, small, f.GetModel(), "an alias is decided as its model")
	require.NotEmpty(t, f.GetReservation().GetReservationId(), "the fallback model has room")
	fr, err := client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key(acmeKey), RequestId: "by-alias", Model: "claude-haiku-4-5",
		EndpointId: "alpha/" + small, Demand: &switchboardv1.Demand{Requests: 1}, MaxWait: admission.NoWait})
	require.NoError(t, err)
	require.True(t, fr.GetAdmitted(), "Reserve takes the model by alias")
	_, err = client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key(acmeKey), RequestId: "wrong-alias", Model: "claude-haiku-4-5",
		EndpointId: "alpha/" + model, Demand: &switchboardv1.Demand{Requests: 1}, MaxWait: admission.NoWait})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "an alias of another model than the endpoint's")

	d = decide(key(nightlyKey))
	require.Equal(t, broker.CodeQueueDeadline, d.GetRefusal().GetCode())
	require.Equal(t, switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH, d.GetRefusal().GetWorkloadClass())
	require.Empty(t, d.GetRefusal().GetFallbackModel(), "batch rejects")

	// globex's own limit: one request in flight.
	g := decide(key(globexKey))
	require.Equal(t, broker.CodeQueueDeadline, g.GetRefusal().GetCode(), "both endpoints are still full")
	for _, r := range []*switchboardv1.DecideResponse{first, second} {
		_, err := client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: r.GetReservation().GetReservationId(), Usage: &switchboardv1.Usage{}})
		require.NoError(t, err)
	}
	g = decide(key(globexKey))
	require.NotEmpty(t, g.GetReservation().GetReservationId())
	g2 := decide(key(globexKey))
	ref = g2.GetRefusal()
	require.Equal(t, switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, ref.GetScope())
	require.Equal(t, broker.CodeQueueDeadline, ref.GetCode())
	require.Empty(t, ref.GetFallbackModel(), "the caller's own limit: no fallback")

	r, err := client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key(globexKey), RequestId: "r", Model: model,
		EndpointId: "alpha/" + model, Demand: &switchboardv1.Demand{Requests: 1}, MaxWait: admission.NoWait})
	require.NoError(t, err)
	require.False(t, r.GetAdmitted())
	require.Equal(t, broker.CodeConcurrency, r.GetRefusal().GetCode(), "Reserve answers the code too")
	require.Equal(t, switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND, r.GetRefusal().GetWorkloadClass())
}
