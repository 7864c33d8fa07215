package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
)

// TestReportCall: a service that called the provider itself reports the
// request: its reservation is reconciled (once, however often the report
// is sent again), and it reports only for its own tenants, with what it
// sends checked as an edge's reports are.
func TestReportCall(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	f.caller.Store(&auth.Principal{ID: "billing", Role: catalog.RoleService, Tenants: []string{"acme"}})

	d, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Reserve: true, Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
	require.NoError(t, err)
	rsv := d.GetReservation().GetReservationId()
	require.NotEmpty(t, rsv)
	start := time.Now().Add(-time.Second)
	report := &switchboardv1.ReportCallRequest{
		Record: &switchboardv1.ActivityRecord{
			Id: d.GetRequestId(), CreateTime: timestamppb.New(start), TenantId: "acme", Model: model,
			EndpointId: d.GetEndpoint().GetId(), Provider: d.GetEndpoint().GetProvider(), Stream: true,
			Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200, Duration: durationpb.New(time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true},
			Attempts: []*switchboardv1.Attempt{{EndpointId: d.GetEndpoint().GetId(), Provider: d.GetEndpoint().GetProvider(),
				Outcome: switchboardv1.Outcome_OUTCOME_OK, HttpStatus: 200, StartTime: timestamppb.New(start), Ttft: durationpb.New(300 * time.Millisecond)}},
			Grant: d.GetGrant(), Caps: d.GetCaps(),
		},
		Reconciles: []*switchboardv1.ReconcileRequest{{ReservationId: rsv, Outcome: switchboardv1.Outcome_OUTCOME_OK,
			Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true}}},
		PromptTokens: 100,
	}
	r, err := f.client.ReportCall(ctx, report)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.GetReconciled())
	r, err = f.client.ReportCall(ctx, report)
	require.NoError(t, err, "a report sent again is answered, not refused")
	require.Equal(t, int64(0), r.GetReconciled(), "a reservation is reconciled once")

	tests := []struct {
		name string
		req  *switchboardv1.ReportCallRequest
		want codes.Code
	}{
		{"no record", &switchboardv1.ReportCallRequest{}, codes.InvalidArgument},
		{"another tenant's record", &switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "r1", TenantId: "globex"}}, codes.PermissionDenied},
		{"a reconciliation without its reservation", &switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "r2", TenantId: "acme"},
			Reconciles: []*switchboardv1.ReconcileRequest{{}}}, codes.InvalidArgument},
		{"a negative prompt", &switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "r3", TenantId: "acme"}, PromptTokens: -1}, codes.InvalidArgument},
		{"an unknown outcome", &switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "r4", TenantId: "acme",
			Attempts: []*switchboardv1.Attempt{{EndpointId: "alpha/" + model, Outcome: 99}}}}, codes.InvalidArgument},
		// An earlier decision's grant covers only an edge's offline calls:
		// a service reports each request under its own decision.
		{"another decision's grant", &switchboardv1.ReportCallRequest{Record: &switchboardv1.ActivityRecord{Id: "r5", TenantId: "acme",
			GrantRequestId: d.GetRequestId()}}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.client.ReportCall(ctx, tt.req)
			requireCode(t, tt.want, err, tt.name)
		})
	}
}

// TestMissingIdentityNamed: a service that sends no identity is told which
// fields to send, not that an API key is missing.
func TestMissingIdentityNamed(t *testing.T) {
	f := start(t)
	f.caller.Store(&auth.Principal{ID: "billing", Role: catalog.RoleService, Tenants: []string{"acme"}})
	_, err := f.client.ListModels(t.Context(), &switchboardv1.ListModelsRequest{})
	requireCode(t, codes.Unauthenticated, err, "ListModels without an identity")
	require.ErrorContains(t, err, "no identity: send identity.api_key_sha256 (the SHA-256 of the client's API key) or identity.tenant_id")
}
