// Package auth owns who calls the decider, what each caller may do, and
// for whom: it also resolves the identity a request carries (an API key
// digest or a tenant id) into the tenant, key id and partner it acts for,
// and the workload class it is admitted as (Resolve).
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
// budget; OperatorService the experiments.
//
//	RPC               edge        service          replica     operator
//	Decide            by key      own tenants      -           dry run, any tenant
//	Reserve           by key      own tenants      forwarded   -
//	ListModels        by key      own tenants      -           any tenant
//	ListActivity      by key      own tenants      -           any tenant
//	GetActivity       by key      own tenants      -           any tenant
//	Reconcile         any         own tenants      forwarded   -
//	KeepReservations  any         own tenants      forwarded   -
//	ReportCall        any         own tenants      -           -
//	Report            any         -                -           -
//	AcquireHedge      any         -                forwarded   -
//	SettleHedge       any         -                forwarded   -
//	StartExperiment   -           -                -           yes
//	StopExperiment    -           -                -           yes
//	GetExperiment     -           -                -           yes
//
// "By key": an edge decides for clients it authenticated by API key, so the
// request's identity must carry api_key_sha256; a bare tenant_id is refused.
// "Own tenants": a service acts for the tenants the catalog lists for it
// (["*"] is every tenant): the identity's tenant_id, or the tenant its key
// hash resolves to, must be one of them, and for Reconcile and
// KeepReservations the reservation must belong to one of them (for
// ReportCall, the record's tenant and every reservation it reconciles). "Forwarded":
// a replica forwards to the broker's owner what it admitted for its own
// caller, whose caller id travels in the metadata "switchboard-on-behalf-of";
// the owner then acts as that caller, by that caller's row of the table —
// an edge's forwarded Reserve still needs api_key_sha256, a service's still
// only its tenants, and an RPC the caller's role may not call is refused.
// That metadata is honoured only from a replica, and a replica must send
// it: without it, or naming a caller the catalog does not have or another
// replica, its call is PermissionDenied. The replica credential acts for
// no tenant of its own.
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
	"sync/atomic"

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

// OnBehalfOf is the metadata key a replica names its original caller in.
const OnBehalfOf = "switchboard-on-behalf-of"

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

type index struct {
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
	idx atomic.Pointer[index]
}

// New returns an authenticator that answers Unavailable until SetCatalog.
func New() *Authenticator { return &Authenticator{} }

// SetCatalog makes c's callers, tenants and API keys the ones accepted,
// from the next call on.
func (a *Authenticator) SetCatalog(c *catalog.Catalog) {
	idx := &index{byID: map[string]*Principal{}, keys: map[string]keyInfo{}, tenants: map[string]bool{}, partner: map[string]string{},
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
	a.idx.Store(idx)
}

// Authenticate is the go-grpc-middleware auth function: it returns ctx
// carrying the caller's Principal, or Unauthenticated, PermissionDenied
// (a role the policy does not allow the RPC) or Unavailable (the catalog is
// not loaded yet).
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	idx := a.idx.Load()
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
	if p.Role == catalog.RoleReplica {
		fwd, err := idx.forwarded(ctx, p, method)
		if err != nil {
			return nil, err
		}
		p = fwd
	}
	return NewContext(ctx, p), nil
}

// forwarded is the caller a replica's call is made for: the one it names
// in OnBehalfOf, with that caller's own role and tenants. A replica only
// forwards what it admitted for a caller of its own, so a call naming
// nobody, naming a caller the catalog does not have, naming another
// replica (forwarding does not chain) or naming a caller whose role may
// not call method is PermissionDenied: the replica credential alone acts
// for no tenant.
func (idx *index) forwarded(ctx context.Context, replica *Principal, method string) (*Principal, error) {
	vals := metadata.ValueFromIncomingContext(ctx, OnBehalfOf)
	if len(vals) != 1 || vals[0] == "" {
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf(
			"replica %q may call %s only on behalf of one caller it names in %s", replica.ID, method, OnBehalfOf))
	}
	orig, ok := idx.byID[vals[0]]
	switch {
	case !ok:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("replica %q forwarded for unknown caller %q", replica.ID, vals[0]))
	case orig.Role == catalog.RoleReplica:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("replica %q forwarded for replica %q: a replica forwards only for its own callers", replica.ID, orig.ID))
	case policy[method][orig.Role] == deny:
		return nil, bearer.CallerError(codes.PermissionDenied, fmt.Sprintf("caller %q (role %s, forwarded by replica %q) may not call %s", orig.ID, orig.Role, replica.ID, method))
	}
	fwd := *orig
	fwd.Via = replica.ID
	return &fwd, nil
}

func (idx *index) authenticate(ctx context.Context) (*Principal, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "authorization")) > 0 {
		tok, err := grpcauth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, bearer.CallerError(codes.Unauthenticated, "malformed authorization: send authorization: Bearer <token>")
		}
		sum := sha256.Sum256([]byte(tok))
		var found *Principal
		for _, t := range idx.tokens { // every one, without stopping early
			if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
				found = t.p
			}
		}
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

// StreamInterceptor authenticates and authorises every stream but the exempt ones.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	in := grpcauth.StreamServerInterceptor(a.Authenticate)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !needsAuth(info.FullMethod) {
			return h(srv, ss)
		}
		return in(srv, ss, info, h)
	}
}

// ForwardInterceptor is the client interceptor of a replica's connections
// to the broker's owner: it names the caller the forwarded call is made
// for, so the owner applies that caller's rules. Work a replica does on
// its own behalf must carry the caller it is done for (NewContext): a call
// naming nobody is refused by the owner.
func ForwardInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if p := FromContext(ctx); p != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, OnBehalfOf, p.ID)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
