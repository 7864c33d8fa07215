// Package auth owns who calls the decider, what each caller may do, and
// for whom: it also resolves the identity a request carries (an API key
// digest or a tenant id) into the tenant, key id and partner it acts for,
// and the workload class it is admitted as ([Index.Resolve]).
//
// # Authentication
//
// Every RPC except grpc.health.v1 (and server reflection, when it is on)
// carries a credential, checked against the catalog's callers:
//
//   - a bearer token, as the metadata "authorization: Bearer <token>": its
//     SHA-256 is compared, in constant time, with every caller's
//     tokens_sha256;
//   - or a client certificate the TLS handshake verified against the client
//     CA: its Subject CommonName names the caller.
//
// A call with neither, with a token no caller has, or with a certificate
// naming no caller fails with Unauthenticated, marked (bearer.CallerError)
// as the caller's own refusal, so an edge does not take it for its client's
// unknown API key. The catalog is watched: a
// caller or token added or removed applies to the next call, without a
// restart.
//
// # Authorization
//
// What a caller may do is one table, role × RPC (policy below); anything not
// in it is refused with PermissionDenied. The API is split by audience:
// RouterService holds Decide, Reserve, Reconcile, KeepReservations,
// ListModels, the activity calls and ReportCall; EdgeService Report and the hedge
// budget; OperatorService the experiments, Explain and the reads of the
// decider's state; ReplicaService what one decider replica forwards to
// another, and the observations and activity logs replicas share.
//
//	RPC                      edge        service          replica     operator
//	Decide                   by key      own tenants      -           -
//	Reserve                  by key      own tenants      -           -
//	ListModels               by key      own tenants      -           any tenant
//	ListActivity             by key      own tenants      -           any tenant
//	GetActivity              by key      own tenants      -           any tenant
//	Reconcile                any         own tenants      -           -
//	KeepReservations         any         own tenants      -           -
//	ReportCall               any         own tenants      -           -
//	Report                   any         -                -           -
//	AcquireHedge             any         -                -           -
//	SettleHedge              any         -                -           -
//	StartExperiment          -           -                -           yes
//	StopExperiment           -           -                -           yes
//	GetExperiment            -           -                -           yes
//	Explain                  -           -                -           any tenant
//	GetEndpointStats         -           -                -           any tenant
//	GetBroker                -           -                -           yes
//	GetCatalog               -           -                -           yes
//	ForwardReserve           -           -                forwarded   -
//	ForwardReconcile         -           -                forwarded   -
//	ForwardKeepReservations  -           -                forwarded   -
//	ForwardAcquireHedge      -           -                forwarded   -
//	ForwardSettleHedge       -           -                forwarded   -
//	ForwardGetBroker         -           -                forwarded   -
//	ForwardListActivity      -           -                forwarded   -
//	ForwardGetActivity       -           -                forwarded   -
//	ShareObservations        -           -                yes         -
//	TransferState            -           -                yes         -
//
// "By key": an edge decides for clients it authenticated by API key, so the
// request's identity must carry api_key_sha256; a bare tenant_id is refused.
// "Own tenants": a service acts for the tenants the catalog lists for it
// (["*"] is every tenant): the identity's tenant_id, or the tenant its key
// hash resolves to, must be one of them, and for Reconcile and
// KeepReservations the reservation must belong to one of them (for
// ReportCall, the record's tenant and every reservation it reconciles).
// "Forwarded": a replica forwards to the broker's owner what it admitted
// for its own caller, named in the request's caller_id (Forwarded); the
// owner then acts as that caller, by that caller's row of the public RPC
// forwarded — an edge's forwarded Reserve still needs api_key_sha256, a
// service's still only its tenants, and an RPC the caller's role may not
// call is refused. A caller_id naming nobody, a caller the catalog does not
// have or another replica is PermissionDenied. The replica credential acts
// for no tenant of its own and calls nothing of the public services: no
// metadata or field of theirs makes a call count as another caller's.
//
// What a caller reports of a provider (a reconciliation's failure and
// headers) moves what every tenant sees only when SharesProviderState says
// so: an edge's, the decider's own work, and a service's that the catalog
// marks shared_provider_state; any other service's applies to its
// reservation's tenant only.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Principal is an authenticated caller.
type Principal struct {
	// ID is the caller's id in the catalog.
	ID string
	// Role is edge, service, replica or operator.
	Role string
	// Tenants are the tenants a service acts for; "*" is every tenant.
	Tenants []string
	// Via is the replica that forwarded the call, when it came on behalf
	// of this caller; "" for a direct call.
	Via string
	// SharedProviderState is the catalog's trust of a service for what
	// every tenant sees of a provider (SharesProviderState).
	SharedProviderState bool
}

// ActsFor reports whether p may act for tenant: any role but service acts
// for every tenant its role allows.
func (p *Principal) ActsFor(tenant string) bool {
	if p.Role != catalog.RoleService {
		return true
	}
	return slices.Contains(p.Tenants, catalog.AllTenants) || slices.Contains(p.Tenants, tenant)
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller of the call ctx belongs to; nil for work
// the decider does on its own (no RPC).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

type token struct {
	sum [sha256.Size]byte
	p   *Principal
}

// Index is the auth view of one catalog: its callers and their tokens, its
// tenants, API keys and workload classes. Immutable once built; the
// decider's one catalog snapshot holds it (gate.Views).
type Index struct {
	tokens []token
	byID   map[string]*Principal
	// The clients' side: API key digest → tenant and key id, the tenants,
	// and each tenant's partner.
	keys    map[string]keyInfo
	tenants map[string]bool
	partner map[string]string
	// classes are each tenant's workload classes: those it may ask for and
	// its default; contracts are the classes' admission contracts.
	classes   map[string]tenantClasses
	contracts map[switchboardv1.WorkloadClass]catalog.Contract
}

type keyInfo struct {
	tenant, keyID string
	// class is the key's own workload class; unspecified when it has none.
	class switchboardv1.WorkloadClass
}

// tenantClasses are the workload classes a tenant may use, and the one its
// requests get when neither they nor their key name one.
type tenantClasses struct {
	allowed []switchboardv1.WorkloadClass
	def     switchboardv1.WorkloadClass
}

// Authenticator authenticates calls against the catalog's callers.
type Authenticator struct {
	// pin returns the index of the catalog snapshot a call works on, and
	// ctx carrying that snapshot.
	pin func(ctx context.Context) (context.Context, *Index)
}

// New returns an authenticator of the catalog pin gives each call: the
// decider's one catalog snapshot, so a caller or token added or removed
// applies to the next call. pin returns the snapshot ctx already carries,
// else the one applied now with ctx carrying it (gate.Current.PinAuth):
// the unary interceptor authenticates by it and hands the handler that
// ctx, so one call reads one catalog from its credentials to its route.
// While pin returns nil it answers Unavailable.
func New(pin func(ctx context.Context) (context.Context, *Index)) *Authenticator {
	return &Authenticator{pin: pin}
}

// index is the index of the snapshot ctx carries, else of the catalog
// applied now.
func (a *Authenticator) index(ctx context.Context) *Index {
	_, idx := a.pin(ctx)
	return idx
}

// NewIndex builds c's auth index: its callers, tenants and API keys.
func NewIndex(c *catalog.Catalog) *Index {
	idx := &Index{byID: map[string]*Principal{}, keys: map[string]keyInfo{}, tenants: map[string]bool{}, partner: map[string]string{},
		classes: map[string]tenantClasses{}, contracts: map[switchboardv1.WorkloadClass]catalog.Contract{}}
	for _, k := range c.Contracts() {
		idx.contracts[ClassOf(k.Class)] = k
	}
	for _, t := range c.Tenants {
		idx.tenants[t.ID] = true
		if t.Partner != "" {
			idx.partner[t.ID] = t.Partner
		}
		tc := tenantClasses{def: ClassOf(t.DefaultClassOf(""))}
		for _, name := range t.AllowedClasses() {
			tc.allowed = append(tc.allowed, ClassOf(name))
		}
		idx.classes[t.ID] = tc
		for _, k := range t.APIKeysSHA256 {
			ki := keyInfo{tenant: t.ID, keyID: catalog.KeyID(k)}
			if cl := ClassOf(t.DefaultClassOf(k)); cl != tc.def {
				ki.class = cl
			}
			idx.keys[k] = ki
		}
	}
	for _, cl := range c.Callers {
		p := &Principal{ID: cl.ID, Role: cl.Role, Tenants: slices.Clone(cl.Tenants), SharedProviderState: cl.SharedProviderState}
		idx.byID[cl.ID] = p
		for _, h := range cl.TokensSHA256 {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) != sha256.Size {
				continue // the catalog validated it: never reached
			}
			t := token{p: p}
			copy(t.sum[:], b)
			idx.tokens = append(idx.tokens, t)
		}
	}
	return idx
}

// Authenticate is the go-grpc-middleware auth function: it returns ctx
// carrying the caller's Principal, or Unauthenticated, PermissionDenied
// (a role the policy does not allow the RPC) or Unavailable (the catalog is
// not loaded yet).
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	ctx, idx := a.pin(ctx)
	if idx == nil {
		return nil, status.Error(codes.Unavailable, "decider is starting: callers not loaded yet")
	}
	p, err := idx.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	method, _ := grpc.Method(ctx)
	if policy[method][p.Role] == deny {
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("caller %q (role %s) may not call %s", p.ID, p.Role, method))
	}
	return NewContext(ctx, p), nil
}

// Forwarded returns ctx acting for the caller a replica's ReplicaService
// call names, callerID, with that caller's own role and tenants, for the
// public RPC method it forwards: the owner then handles the call as that
// caller's own call of method. A replica only forwards what it admitted for
// a caller of its own, so a call naming nobody, naming a caller the catalog
// does not have, naming another replica (forwarding does not chain) or
// naming a caller whose role may not call method is PermissionDenied, as
// is one whose own caller is not a replica: the replica credential alone
// acts for no tenant.
func (a *Authenticator) Forwarded(ctx context.Context, callerID, method string) (context.Context, error) {
	idx := a.index(ctx)
	if idx == nil {
		return nil, status.Error(codes.Unavailable, "decider is starting: callers not loaded yet")
	}
	replica := FromContext(ctx)
	switch {
	case replica == nil || replica.Role != catalog.RoleReplica:
		return nil, status.Error(codes.PermissionDenied, "only a replica forwards a call for another caller")
	case callerID == "":
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("replica %q may call %s only on behalf of the caller it names in caller_id", replica.ID, method))
	}
	orig, ok := idx.byID[callerID]
	switch {
	case !ok:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("replica %q forwarded for unknown caller %q", replica.ID, callerID))
	case orig.Role == catalog.RoleReplica:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("replica %q forwarded for replica %q: a replica forwards only for its own callers", replica.ID, orig.ID))
	case policy[method][orig.Role] == deny:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("caller %q (role %s, forwarded by replica %q) may not call %s", orig.ID, orig.Role, replica.ID, method))
	}
	fwd := *orig
	fwd.Via = replica.ID
	return NewContext(ctx, &fwd), nil
}

// CallerID is the catalog id of the caller of ctx, the one a replica
// forwards a call for; "" for work the decider does on its own.
func CallerID(ctx context.Context) string {
	if p := FromContext(ctx); p != nil {
		return p.ID
	}
	return ""
}

func (idx *Index) authenticate(ctx context.Context) (*Principal, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "authorization")) > 0 {
		tok, err := grpcauth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, bearer.CallerError(codes.Unauthenticated, "malformed authorization: send authorization: Bearer <token>")
		}
		found := idx.Caller(tok)
		if found == nil {
			return nil, bearer.CallerError(codes.Unauthenticated, "unknown bearer token")
		}
		return found, nil
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
			cn := ti.State.PeerCertificates[0].Subject.CommonName
			if p, ok := idx.byID[cn]; ok {
				return p, nil
			}
			return nil, bearer.CallerError(codes.Unauthenticated, fmt.Sprintf("client certificate %q names no caller", cn))
		}
	}
	return nil, bearer.CallerError(codes.Unauthenticated, "no credentials: send authorization: Bearer <token> or a client certificate")
}

// Caller returns the caller whose bearer token is tok, nil when none: the
// token's SHA-256 is compared with every caller's, in constant time and
// without stopping early.
func (idx *Index) Caller(tok string) *Principal {
	sum := sha256.Sum256([]byte(tok))
	var found *Principal
	for _, t := range idx.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			found = t.p
		}
	}
	return found
}

// CallerByID returns the catalog's caller of that id, nil when none.
func (idx *Index) CallerByID(id string) *Principal { return idx.byID[id] }

// exempt are the services every caller reaches without credentials.
var exempt = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

func needsAuth(method string) bool {
	for _, e := range exempt {
		if strings.HasPrefix(method, e) {
			return false
		}
	}
	return true
}

// UnaryInterceptor authenticates and authorises every unary call but the exempt ones.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	in := grpcauth.UnaryServerInterceptor(a.Authenticate)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !needsAuth(info.FullMethod) {
			return h(ctx, req)
		}
		return in(ctx, req, info, h)
	}
}

// StreamInterceptor authenticates and authorises every stream but the
// exempt ones. A stream (Report) lives across many catalogs: it is
// authenticated by the one applied when it opens, but its context does
// not carry that snapshot, so its later work reads the catalog applied
// then rather than one pinned for its life.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	in := grpcauth.StreamServerInterceptor(func(ctx context.Context) (context.Context, error) {
		pinned, err := a.Authenticate(ctx)
		if err != nil {
			return nil, err
		}
		return NewContext(ctx, FromContext(pinned)), nil
	})
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !needsAuth(info.FullMethod) {
			return h(srv, ss)
		}
		return in(srv, ss, info, h)
	}
}
