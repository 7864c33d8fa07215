package auth

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// access is what a role may do with an RPC.
type access int

const (
	deny       access = iota // refused
	byKey                    // for an identity carrying api_key_sha256
	ownTenants               // for the caller's tenants only
	anyTenant                // for every tenant
	forwarded                // as the caller a replica forwards for (Forwarded)
)

// policy is the role × RPC table the package documentation shows.
var policy = map[string]map[string]access{
	switchboardv1.RouterService_Decide_FullMethodName: {
		catalog.RoleEdge: byKey, catalog.RoleService: ownTenants,
	},
	switchboardv1.RouterService_Reserve_FullMethodName: {
		catalog.RoleEdge: byKey, catalog.RoleService: ownTenants,
	},
	switchboardv1.RouterService_ListModels_FullMethodName: {
		catalog.RoleEdge: byKey, catalog.RoleService: ownTenants, catalog.RoleOperator: anyTenant,
	},
	switchboardv1.RouterService_ListActivity_FullMethodName: {
		catalog.RoleEdge: byKey, catalog.RoleService: ownTenants, catalog.RoleOperator: anyTenant,
	},
	switchboardv1.RouterService_GetActivity_FullMethodName: {
		catalog.RoleEdge: byKey, catalog.RoleService: ownTenants, catalog.RoleOperator: anyTenant,
	},
	switchboardv1.RouterService_Reconcile_FullMethodName: {
		catalog.RoleEdge: anyTenant, catalog.RoleService: ownTenants,
	},
	switchboardv1.RouterService_KeepReservations_FullMethodName: {
		catalog.RoleEdge: anyTenant, catalog.RoleService: ownTenants,
	},
	switchboardv1.RouterService_ReportCall_FullMethodName: {
		catalog.RoleEdge: anyTenant, catalog.RoleService: ownTenants,
	},
	switchboardv1.EdgeService_Report_FullMethodName: {
		catalog.RoleEdge: anyTenant,
	},
	switchboardv1.EdgeService_AcquireHedge_FullMethodName:         {catalog.RoleEdge: anyTenant},
	switchboardv1.EdgeService_SettleHedge_FullMethodName:          {catalog.RoleEdge: anyTenant},
	switchboardv1.OperatorService_StartExperiment_FullMethodName:  {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_StopExperiment_FullMethodName:   {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_GetExperiment_FullMethodName:    {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_Explain_FullMethodName:          {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_GetEndpointStats_FullMethodName: {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_GetBroker_FullMethodName:        {catalog.RoleOperator: anyTenant},
	switchboardv1.OperatorService_GetCatalog_FullMethodName:       {catalog.RoleOperator: anyTenant},

	switchboardv1.ReplicaService_ForwardReserve_FullMethodName:          {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardReconcile_FullMethodName:        {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardKeepReservations_FullMethodName: {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardAcquireHedge_FullMethodName:     {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardSettleHedge_FullMethodName:      {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardGetBroker_FullMethodName:        {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardListActivity_FullMethodName:     {catalog.RoleReplica: forwarded},
	switchboardv1.ReplicaService_ForwardGetActivity_FullMethodName:      {catalog.RoleReplica: forwarded},
	// A replica shares what its own edges reported, as itself.
	switchboardv1.ReplicaService_ShareObservations_FullMethodName: {catalog.RoleReplica: anyTenant},
	// A replica that starts asks another for what it learned.
	switchboardv1.ReplicaService_TransferState_FullMethodName: {catalog.RoleReplica: anyTenant},
	// A replica renews its own quota leases, for whichever tenants' calls.
	switchboardv1.ReplicaService_RenewLeases_FullMethodName: {catalog.RoleReplica: anyTenant},
}

// Allowed reports whether the policy lets role call method at all, for
// some tenant.
func Allowed(role, method string) bool { return policy[method][role] != deny }

// Resolve turns the identity a request carries into the one it acts for,
// by idx's catalog: an API key digest must be known (its tenant and key id
// come from the catalog); without one, a tenant id must name a tenant. The partner always
// comes from the catalog, never from the caller, so no one can charge (or
// escape) another partner's limits. It fails with Unauthenticated.
//
// The workload class is the one the request asks for, which the tenant
// must be allowed (else PermissionDenied); when it asks for none, its
// key's class, else its tenant's default class, else interactive. A class
// that is none of the known ones is InvalidArgument.
func (idx *Index) Resolve(id *switchboardv1.Identity) (*switchboardv1.Identity, error) {
	if idx == nil {
		return nil, status.Error(codes.Unavailable, "decider is starting: catalog not loaded yet")
	}
	out := &switchboardv1.Identity{}
	if id != nil {
		out.App, out.Environment, out.Partner = id.App, id.Environment, id.Partner
	}
	asked := id.GetWorkloadClass()
	if _, known := switchboardv1.WorkloadClass_name[int32(asked)]; !known {
		return nil, status.Errorf(codes.InvalidArgument, "unknown workload_class %d", int32(asked))
	}
	var key keyInfo
	switch {
	case id.GetApiKeySha256() != "":
		k, ok := idx.keys[strings.ToLower(id.GetApiKeySha256())]
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "invalid API key")
		}
		key = k
		out.TenantId, out.ApiKeyId = k.tenant, k.keyID
	case id.GetTenantId() != "":
		if !idx.tenants[id.GetTenantId()] {
			return nil, status.Errorf(codes.Unauthenticated, "unknown tenant %q", id.GetTenantId())
		}
		out.TenantId, out.ApiKeyId = id.GetTenantId(), id.GetApiKeyId()
	default:
		return nil, status.Error(codes.Unauthenticated,
			"no identity: send identity.api_key_sha256 (the SHA-256 of the client's API key) or identity.tenant_id")
	}
	out.Partner = idx.partner[out.TenantId]
	tc := idx.classes[out.TenantId]
	switch {
	case asked != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED:
		if !slices.Contains(tc.allowed, asked) {
			names := make([]string, len(tc.allowed))
			for i, c := range tc.allowed {
				names[i] = ClassName(c)
			}
			return nil, status.Errorf(codes.PermissionDenied, "workload class %s is not allowed for this tenant; it may use %s",
				ClassName(asked), strings.Join(names, ", "))
		}
		out.WorkloadClass = asked
	case key.class != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED:
		out.WorkloadClass = key.class
	case tc.def != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED:
		out.WorkloadClass = tc.def
	default:
		out.WorkloadClass = switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE
	}
	return out, nil
}

// Contract returns the admission contract of a workload class as the
// catalog sets it (interactive for unspecified); false before the catalog
// is loaded or for an unknown class.
func (a *Authenticator) Contract(cls switchboardv1.WorkloadClass) (catalog.Contract, bool) {
	return a.index(context.Background()).Contract(cls)
}

// Contract is [Authenticator.Contract] by idx's catalog: a call's
// admission reads the contracts of the catalog it resolved its identity by
// (admission.Policy.Contracts).
func (idx *Index) Contract(cls switchboardv1.WorkloadClass) (catalog.Contract, bool) {
	if idx == nil {
		return catalog.Contract{}, false
	}
	if cls == switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
		cls = switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE
	}
	k, ok := idx.contracts[cls]
	return k, ok
}

// ClassOf maps a workload class's catalog name (catalog.Classes) to its
// proto value; unspecified for any other name.
func ClassOf(name string) switchboardv1.WorkloadClass {
	if i := slices.Index(catalog.Classes, name); i >= 0 {
		return switchboardv1.WorkloadClass(i + 1)
	}
	return switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED
}

// ClassName is a workload class's catalog name, the one clients send in
// the X-Switchboard-Workload header; interactive for unspecified.
func ClassName(cls switchboardv1.WorkloadClass) string {
	if cls == switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
		return catalog.ClassInteractive
	}
	if n := switchboardv1.EnumName(cls); n != "" {
		return n
	}
	return cls.String()
}

// Identity checks that the caller of ctx may send method with id, and
// returns id resolved (Resolve), by idx's catalog: a handler passes the
// index of the catalog snapshot its call was authenticated by (the views
// the interceptor pinned into ctx), and routes by the same snapshot. Work
// the decider does on its own (no caller in ctx) is only resolved.
func (idx *Index) Identity(ctx context.Context, method string, id *switchboardv1.Identity) (*switchboardv1.Identity, error) {
	p := FromContext(ctx)
	if p == nil {
		return idx.Resolve(id)
	}
	// A forwarded call is the named caller's (Forwarded): its row of the
	// table applies as if it had called the owner itself.
	switch policy[method][p.Role] {
	case deny:
		return nil, status.Errorf(codes.PermissionDenied, "caller %q (role %s) may not call %s", p.ID, p.Role, method)
	case byKey:
		if id.GetApiKeySha256() == "" && id.GetTenantId() != "" {
			return nil, status.Errorf(codes.PermissionDenied, "caller %q (role %s) acts only for a client it authenticated by API key: send identity.api_key_sha256", p.ID, p.Role)
		}
	case ownTenants:
		if t := id.GetTenantId(); t != "" && id.GetApiKeySha256() == "" && !p.ActsFor(t) {
			return nil, status.Errorf(codes.PermissionDenied, "caller %q may not act for tenant %q", p.ID, t)
		}
	}
	out, err := idx.Resolve(id)
	if err != nil {
		return nil, err
	}
	if !p.ActsFor(out.GetTenantId()) {
		return nil, status.Errorf(codes.PermissionDenied, "caller %q may not act for tenant %q", p.ID, out.GetTenantId())
	}
	return out, nil
}

// Reservations returns what limits the caller of ctx to reservations of
// its own tenants: nil when it may touch any reservation.
func Reservations(ctx context.Context) func(tenant string) bool {
	p := FromContext(ctx)
	if p == nil || p.Role != catalog.RoleService || slices.Contains(p.Tenants, catalog.AllTenants) {
		return nil
	}
	return p.ActsFor
}

// SharesProviderState reports whether what the caller of ctx reports of a
// provider (a reconciliation's failure and headers) may move what every
// tenant sees: route pauses, learned limits, estimate corrections. An
// edge and the decider's own work may; a service only when the catalog
// trusts it (shared_provider_state), else what it reports applies to the
// reservation's tenant only. A forwarded call is judged by the caller it
// was forwarded for.
func SharesProviderState(ctx context.Context) bool {
	p := FromContext(ctx)
	return p == nil || p.Role != catalog.RoleService || p.SharedProviderState
}
