package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	// Client-side health checking: the channel watches each replica's
	// admission health and picks only the replicas that are SERVING.
	_ "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/readiness"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// deciders is what --decider names: one gRPC target, which grpc's resolver
// for its scheme turns into addresses (dns:///decider.ns.svc:9090, a
// headless Service, resolves to every replica; a host:port alone is
// resolved by DNS too), or a fixed list of host:port addresses, which the
// edge hands to grpc itself (a manual resolver).
type deciders struct {
	// target is the gRPC target; "" for a list.
	target string
	// addrs are the listed addresses, nil for a target.
	addrs []string
}

// deciderListScheme is the scheme of the manual resolver that serves a
// listed --decider.
const deciderListScheme = "switchboard-deciders"

// parseDeciders reads --decider: "host:port", "host:port,host:port,…" or a
// gRPC target URI ("dns:///decider.ns.svc:9090"), which cannot be listed.
func parseDeciders(s string) (deciders, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return deciders{}, errors.New("required")
	}
	if strings.Contains(s, "://") || strings.HasPrefix(s, "unix:") {
		if strings.Contains(s, ",") {
			return deciders{}, fmt.Errorf("%q: a gRPC target (scheme://…) names the replicas alone; it cannot be listed with others", s)
		}
		return deciders{target: s}, nil
	}
	parts := strings.Split(s, ",")
	seen := make(map[string]bool, len(parts))
	var errs []error
	for i, p := range parts {
		p = strings.TrimSpace(p)
		parts[i] = p
		if _, port, err := net.SplitHostPort(p); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%q: not host:port", p))
			continue
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("%q: listed twice", p))
		}
		seen[p] = true
	}
	if err := errors.Join(errs...); err != nil {
		return deciders{}, err
	}
	if len(parts) == 1 {
		return deciders{target: parts[0]}, nil
	}
	return deciders{addrs: parts}, nil
}

// loopback reports whether every decider named stays on this machine.
func (d deciders) loopback() bool {
	if d.target != "" {
		return tlsfiles.Loopback(d.target)
	}
	for _, a := range d.addrs {
		if !tlsfiles.Loopback(a) {
			return false
		}
	}
	return true
}

// deciderServiceConfig spreads the edge's calls over every decider replica
// (round_robin, each call on the next ready replica) and has grpc watch each
// replica's admission health (readiness.AdmissionService): a replica that
// cannot admit, is starting or is shutting down (its health turns
// NOT_SERVING before it stops) gets no new calls, and one that died drops
// out when its connection does. A call then fails only if no replica is
// ready; a new Report stream opens on a ready one.
const deciderServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],` +
	`"healthCheckConfig":{"serviceName":"` + readiness.AdmissionService + `"}}`

// dialDeciders returns the client connection to every decider replica
// --decider names, balanced and health-checked (deciderServiceConfig).
func dialDeciders(spec string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	d, err := parseDeciders(spec)
	if err != nil {
		return nil, fmt.Errorf("--decider: %w", err)
	}
	// The edge's own service config, never one from DNS (TXT records).
	opts = append(opts, grpc.WithDefaultServiceConfig(deciderServiceConfig), grpc.WithDisableServiceConfig())
	target := d.target
	if d.addrs != nil {
		// Each address is verified, over TLS, against its own host name
		// (unless --decider-server-name says otherwise).
		eps := make([]resolver.Endpoint, 0, len(d.addrs))
		for _, a := range d.addrs {
			host, _, _ := net.SplitHostPort(a) // checked by parseDeciders
			eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
		}
		r := manual.NewBuilderWithScheme(deciderListScheme)
		r.InitialState(resolver.State{Endpoints: eps})
		opts = append(opts, grpc.WithResolvers(r))
		target = deciderListScheme + ":///" + d.addrs[0]
	}
	return grpc.NewClient(target, opts...)
}

// deciderReady is the edge's readiness: it can serve while at least one
// decider replica can, since every call goes to a ready one. The channel
// picks only replicas whose admission health is SERVING (deciderServiceConfig:
// etcd reachable, a rate-limit broker owner known, the owner's state saved;
// every chat request reserves), so the checks fail fast, with grpc's reason,
// when none is; they also ask the replica they reach whether it is serving
// (its catalog loaded) and admits. Two small RPCs per probe, never on a
// request's path.
func deciderReady(hc healthpb.HealthClient) func(context.Context) error {
	services := [...]struct{ name, what string }{
		{switchboardv1.RouterService_ServiceDesc.ServiceName, "decider"},
		{readiness.AdmissionService, "decider admission"},
	}
	return func(ctx context.Context) error {
		for _, s := range services {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: s.name})
			if err != nil {
				st := status.Convert(err)
				return fmt.Errorf("no decider replica ready (%s SERVING): %s: %s", readiness.AdmissionService, st.Code(), st.Message())
			}
			if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("%s %s", s.what, st)
			}
		}
		return nil
	}
}
