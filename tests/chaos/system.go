package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/childproc"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/tests/freezer"
	"github.com/switchboard-ai/switchboard/tests/loadtest"
)

// Binaries name the built services (make build) the run starts as child
// processes, so that kill -9 and SIGSTOP are real. All three are required.
type Binaries struct {
	Decider, Edge, Provsim string
	// Etcd, if set, is an etcd binary: the three members run as its
	// processes instead of embedded in this one. (Optional)
	Etcd string
}

// The callers of the catalog: the edges, the deciders among themselves, the
// operator reading activity, and a service credential scoped to tenant
// mallory (the attacker with a valid credential).
const (
	edgeToken     = "chaos-edge-token"
	replicaToken  = "chaos-replica-token"
	operatorToken = "chaos-operator-token"
	serviceToken  = "chaos-mallory-service-token"
)

// The tenants, their API keys, and the model each one's traffic uses, so
// that each provider's counters (behind its own endpoint) are one tenant's.
const (
	tenantRPM, keyRPM, modelRPM       = "rpm", "chaos-key-rpm", "chaos/rpm"
	tenantConc, keyConc, modelConc    = "conc", "chaos-key-conc", "chaos/conc"
	tenantHedge, keyHedge, modelHedge = "hedge", "chaos-key-hedge", "chaos/hedge"
	// tenantLease's requests-per-minute limit is large enough to be leased
	// to the replicas (--broker-leases): they admit on their leases.
	tenantLease, keyLease, modelLease = "lease", "chaos-key-lease", "chaos/lease"
	tenantVictim, keyVictim           = "victim", "chaos-key-victim"
	tenantMallory, keyMallory         = "mallory", "chaos-key-mallory"
	modelSpare, modelSpare2           = "chaos/spare", "chaos/spare2"
	// modelTrace is the tracer's model, on a provider of its own (p-trace):
	// its calls are counted in every replica's statistics.
	modelTrace = "chaos/trace"
	// modelFill is the model of the attacker's many reservations, apart
	// from the spare model whose route its own reconcile pauses for it.
	modelFill = "chaos/fill"
)

// The limits under test: the short form's tenant limits (the long form
// draws its own from the seed, or takes Options.RPMLimit and ConcLimit),
// and the hedge budget.
const (
	shortRPMLimit  = 50 // tenant rpm: requests per minute
	shortConcLimit = 4  // tenant conc: requests in flight
	// shortLeaseLimit is tenant lease's requests per minute: at least the
	// 100 a bucket needs to be leased.
	shortLeaseLimit = 120
	// hedgeBudgetUSD is the decider's daily hedge budget, shared by every
	// edge; only tenant hedge's requests are large streams, so only they
	// are hedged.
	hedgeBudgetUSD = 0.02
	// hedgeTokens is the prompt size of the hedge tenant's requests, and
	// the decider's --hedge-from-tokens and --hedge-immediate-from-tokens:
	// both legs start at once.
	hedgeTokens = 500
)

// Prices ($ per million tokens) of the hedge endpoints: ha is the cheaper,
// so it is the primary and hb the hedge.
var hedgePrices = map[string][2]float64{"p-ha": {4, 8}, "p-hb": {5, 10}}

// providers of the simulator, one per endpoint: p-rpm, p-conc, p-ha, p-hb,
// p-spare (the spare models the attacks aim at), p-trace (the tracer's),
// p-lease (the leased tenant's).
var providerNames = []string{"p-rpm", "p-conc", "p-ha", "p-hb", "p-spare", "p-trace", "p-lease"}

const upstreamModel = "sim-model"

// The regions: etcd's three members, deciders d0 and d1 and edges A and B
// in the first; decider d2 and edge C in the second. Every connection
// between processes goes through a freezer in front of its server (each
// decider's and each etcd member's), which a cut freezes for the
// connections whose client is in the other region.
const (
	regionEast = "us-east"
	regionWest = "eu-west"
)

// deciderRegions and edgeRegions place the deciders (by index) and the
// edges (by name); etcd's members are all in regionEast.
var (
	deciderRegions = []string{regionEast, regionEast, regionWest}
	edgeNames      = []string{"A", "B", "C"}
	edgeRegions    = map[string]string{"A": regionEast, "B": regionEast, "C": regionWest}
)

// system is the whole deployment on loopback.
type system struct {
	dir        string
	sessionTTL time.Duration
	bins       Binaries
	etcd       *cluster
	cli        *clientv3.Client

	sim      *childproc.Child
	simURLs  map[string]string // provider → its own base URL (…/v1)
	taps     map[string]*tap
	catPath  string
	tokens   map[string]string // caller → token file
	mu       sync.Mutex        // guards deciders and edges while they start
	deciders []*decider
	edges    []*edge
	// etcdProxies front etcd's members, in order: the deciders' --etcd.
	etcdProxies []*freezer.Proxy
	// o are the run's options: the tenants' limits.
	o Options
}

type decider struct {
	id, addr, dir string
	region        string
	// admin is its --admin-listen address (/metrics).
	admin string
	// proxy fronts the decider: its --advertise, and the edges' way to it.
	proxy  *freezer.Proxy
	mu     sync.Mutex
	child  *childproc.Child
	starts int
	paused bool
}

type edge struct {
	name, url, region string
	child             *childproc.Child
}

// start brings the deployment up: etcd, the simulator with its taps, the
// three deciders (d0 first, so it owns the broker), each behind its
// freezer, and the three edges, each given every decider, its own
// region's first.
func start(ctx context.Context, dir string, o Options) (_ *system, err error) {
	bins := o.Binaries
	if bins.Decider == "" || bins.Edge == "" || bins.Provsim == "" {
		return nil, errors.New("the decider, edge and provsim binaries are all needed")
	}
	s := &system{dir: dir, bins: bins, sessionTTL: o.SessionTTL, o: o, simURLs: map[string]string{}, taps: map[string]*tap{}, tokens: map[string]string{}}
	defer func() { //nolint:contextcheck // stopping must not depend on the start's context, which may be what ended it
		if err != nil {
			s.stop()
		}
	}()
	for name, tok := range map[string]string{"edge": edgeToken, "replica": replicaToken} {
		p := filepath.Join(dir, name+".token")
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			return nil, err
		}
		s.tokens[name] = p
	}
	if s.etcd, err = startCluster(ctx, dir, bins.Etcd); err != nil {
		return nil, err
	}
	for _, ep := range strings.Split(s.etcd.endpoints(), ",") {
		p, err := freezer.Start(strings.TrimPrefix(ep, "http://"), s.crosses(regionEast))
		if err != nil {
			return nil, err
		}
		s.etcdProxies = append(s.etcdProxies, p)
	}
	s.cli, err = clientv3.New(clientv3.Config{Endpoints: strings.Split(s.etcd.endpoints(), ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	if err := s.startSim(ctx); err != nil {
		return nil, err
	}
	s.catPath = filepath.Join(dir, "catalog.yaml")
	cat := s.catalogYAML()
	if _, err := catalog.Parse([]byte(cat)); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if err := os.WriteFile(s.catPath, []byte(cat), 0o600); err != nil {
		return nil, err
	}
	for i := range 3 {
		addr, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		admin, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		d := &decider{id: fmt.Sprintf("d%d", i), addr: addr, admin: admin, dir: filepath.Join(dir, fmt.Sprintf("d%d", i)), region: deciderRegions[i]}
		if d.proxy, err = freezer.Start(addr, s.crosses(d.region)); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.deciders = append(s.deciders, d)
		s.mu.Unlock()
		if err := s.startDecider(ctx, i); err != nil {
			return nil, err
		}
		if i == 0 {
			if err := s.waitOwner(ctx, func(o int) bool { return o == 0 }); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range edgeNames {
		if err := s.startEdge(ctx, name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// crosses is a freezer's hold function for a server in region: a
// connection is held by a cut when its client is a decider or an edge of
// another region. Only deciders and edges connect through the freezers
// (the harness's own clients go straight to the servers); a client not
// found among them is one started a moment ago whose process this one has
// not recorded yet, looked for again for up to a second.
func (s *system) crosses(region string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		for range 100 {
			regions := s.processRegions()
			pids := make([]int, 0, len(regions))
			for pid := range regions {
				pids = append(pids, pid)
			}
			if r, ok := regions[sockOwner(c, pids)]; ok {
				return r != region
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
}

// processRegions is the region of every decider and edge process, by pid.
func (s *system) processRegions() map[int]string {
	regions := map[int]string{}
	s.mu.Lock()
	deciders := s.deciders
	s.mu.Unlock()
	for _, d := range deciders {
		d.mu.Lock()
		if d.child != nil {
			regions[d.child.Pid()] = d.region
		}
		d.mu.Unlock()
	}
	s.mu.Lock()
	for _, e := range s.edges {
		regions[e.child.Pid()] = e.region
	}
	s.mu.Unlock()
	return regions
}

// cut freezes (true) or heals (false) every connection between the regions.
func (s *system) cut(frozen bool) {
	for _, p := range s.etcdProxies {
		p.Set(frozen)
	}
	for _, d := range s.deciders {
		d.proxy.Set(frozen)
	}
}

// etcdEndpoints is the deciders' --etcd: every member through its freezer.
func (s *system) etcdEndpoints() string {
	var eps []string
	for _, p := range s.etcdProxies {
		eps = append(eps, "http://"+p.Addr())
	}
	return strings.Join(eps, ",")
}

func (s *system) startSim(ctx context.Context) error {
	var b strings.Builder
	b.WriteString("seed: 7\nproviders:\n")
	listen := map[string]string{}
	for _, p := range providerNames {
		addr, err := childproc.FreePort()
		if err != nil {
			return err
		}
		listen[p] = addr
		s.simURLs[p] = "http://" + addr + "/v1"
		// p-conc answers in about 0.7 s (300 ms to the first token, then 16
		// tokens at 40/s), so 4 in flight hold their slots long enough to be
		// seen; the others are fast.
		ttft, tps := "20ms", 400
		if p == "p-conc" {
			ttft, tps = "300ms", 40
		}
		fmt.Fprintf(&b, "  - name: %s\n    listen: %s\n    models:\n      - id: %s\n        ttft: {base: %s}\n        tokens_per_second: %d\n        default_output_tokens: 8\n        max_output_tokens: 4096\n",
			p, addr, upstreamModel, ttft, tps)
	}
	cfgPath := filepath.Join(s.dir, "provsim.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		return err
	}
	sim, err := childproc.Start("provsim", killedWithUs(exec.CommandContext(ctx, s.bins.Provsim, "--config", cfgPath)), filepath.Join(s.dir, "provsim.log")) //nolint:gosec // G204: the binary the operator named.
	if err != nil {
		return err
	}
	s.sim = sim
	for _, p := range providerNames {
		if err := loadtest.WaitHealthy(ctx, sim, strings.TrimSuffix(s.simURLs[p], "/v1")+"/healthz"); err != nil {
			return fmt.Errorf("provider %s: %w", p, err)
		}
		t, err := startTap(p, strings.TrimSuffix(s.simURLs[p], "/v1"))
		if err != nil {
			return err
		}
		s.taps[p] = t
	}
	return nil
}

func (s *system) catalogYAML() string {
	var b strings.Builder
	ep := func(provider string, in, out float64) {
		fmt.Fprintf(&b, "      - {provider: %s, base_url: %s, upstream_model: %s, price: {input: %g, output: %g}}\n",
			provider, s.taps[provider].url(), upstreamModel, in, out)
	}
	b.WriteString("models:\n")
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelRPM)
	ep("p-rpm", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelLease)
	ep("p-lease", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelConc)
	ep("p-conc", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelHedge)
	ep("p-ha", hedgePrices["p-ha"][0], hedgePrices["p-ha"][1])
	ep("p-hb", hedgePrices["p-hb"][0], hedgePrices["p-hb"][1])
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelSpare)
	ep("p-spare", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelSpare2)
	ep("p-spare", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelTrace)
	ep("p-trace", 1, 2)
	fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", modelFill)
	ep("p-spare", 1, 2)
	b.WriteString("tenants:\n")
	tenant := func(id, key, limits string) {
		fmt.Fprintf(&b, "  - id: %s\n    api_keys_sha256: [%s]\n", id, catalog.HashKey(key))
		if limits != "" {
			fmt.Fprintf(&b, "    limits: [%s]\n", limits)
		}
	}
	tenant(tenantRPM, keyRPM, fmt.Sprintf("{unit: requests, per: minute, capacity: %d}", s.o.RPMLimit))
	tenant(tenantConc, keyConc, fmt.Sprintf("{unit: concurrent_requests, capacity: %d}", s.o.ConcLimit))
	tenant(tenantLease, keyLease, fmt.Sprintf("{unit: requests, per: minute, capacity: %d}", s.o.LeaseLimit))
	// The hedge tenant's daily limit is never reached; it keeps its
	// reservations with the owner (a daily window is never leased), as a
	// request that charges no bucket at all is admitted by a replica
	// holding leases by itself: so every lease admission is tenant lease's.
	tenant(tenantHedge, keyHedge, "{unit: requests, per: day, capacity: 1000000}")
	tenant(tenantVictim, keyVictim, "")
	tenant(tenantMallory, keyMallory, "")
	fmt.Fprintf(&b, "callers:\n  - {id: edges, role: edge, tokens_sha256: [%s]}\n  - {id: deciders, role: replica, tokens_sha256: [%s]}\n"+
		"  - {id: ops, role: operator, tokens_sha256: [%s]}\n  - {id: mallory-billing, role: service, tenants: [%s], tokens_sha256: [%s]}\n",
		catalog.HashKey(edgeToken), catalog.HashKey(replicaToken), catalog.HashKey(operatorToken), tenantMallory, catalog.HashKey(serviceToken))
	return b.String()
}

// deciderArgs are a decider's flags, the one place they are set: its
// region, the external etcd and the other replicas' way to it through the
// freezers, no probes and no exploration (they would send the providers
// calls of their own), the hedge budget under test, spent as hedges come,
// the admin listener (/metrics: where admissions were made), quota leases
// (--broker-leases) unless Options.NoLeases, and Options.DeciderArgs last
// (a later flag wins). The rest, the --shutdown-timeout among them, are
// the product's defaults.
func (s *system) deciderArgs(d *decider) []string {
	args := []string{
		"--listen=" + d.addr, "--advertise=" + d.proxy.Addr(), "--region=" + d.region,
		"--etcd=" + s.etcdEndpoints(), "--data-dir=" + d.dir, "--catalog=" + s.catPath, "--id=" + d.id,
		"--token-file=" + s.tokens["replica"], "--drain-delay=0s", "--probe-interval=0", "--exploration=-1",
		"--broker-session-ttl=" + s.sessionTTL.String(),
		fmt.Sprintf("--hedge-budget-usd=%g", hedgeBudgetUSD), "--hedge-budget-burst=24h",
		fmt.Sprintf("--hedge-from-tokens=%d", hedgeTokens), fmt.Sprintf("--hedge-immediate-from-tokens=%d", hedgeTokens),
		"--admin-listen=" + d.admin,
	}
	if !s.o.NoLeases {
		args = append(args, "--broker-leases")
	}
	return append(args, s.o.DeciderArgs...)
}

func (s *system) startDecider(ctx context.Context, i int) error {
	d := s.deciders[i]
	d.mu.Lock()
	d.starts++
	log := filepath.Join(s.dir, fmt.Sprintf("%s.%d.log", d.id, d.starts))
	d.mu.Unlock()
	c, err := childproc.Start(d.id, killedWithUs(exec.CommandContext(ctx, s.bins.Decider, s.deciderArgs(d)...)), log) //nolint:gosec // G204: the binary the operator named.
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.child = c
	d.mu.Unlock()
	return waitServing(ctx, c, d.addr)
}

// startEdge starts edge name in its region, given every decider through
// its freezer, its own region's first.
func (s *system) startEdge(ctx context.Context, name string) error {
	addr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	region := edgeRegions[name]
	var near, far []string
	for _, d := range s.deciders {
		if d.region == region {
			near = append(near, d.proxy.Addr())
		} else {
			far = append(far, d.proxy.Addr())
		}
	}
	args := []string{
		"--listen=" + addr, "--decider=" + strings.Join(append(near, far...), ","), "--region=" + region,
		"--decider-token-file=" + s.tokens["edge"], "--edge-id=edge" + name,
		"--reserve-timeout=5s", "--hedge-acquire-timeout=5s", "--drain-delay=0s", "--shutdown-grace=2s", "--report-flush-interval=50ms",
		"--decider-keepalive=5s",
		// The checks count every provider call against the broker's
		// limits: an edge serving from the decider's last answers while
		// its decider is killed would exceed them by design.
		"--offline-grace=0",
	}
	c, err := childproc.Start("edge"+name, killedWithUs(exec.CommandContext(ctx, s.bins.Edge, args...)), filepath.Join(s.dir, "edge"+name+".log")) //nolint:gosec // G204: the binary the operator named.
	if err != nil {
		return err
	}
	e := &edge{name: name, url: "http://" + addr + "/v1", child: c, region: region}
	s.mu.Lock()
	s.edges = append(s.edges, e)
	s.mu.Unlock()
	return loadtest.WaitHealthy(ctx, c, "http://"+addr+"/readyz")
}

// owner is the index of the decider that owns the broker, from the
// election key in etcd, or -1.
func (s *system) owner(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, "/switchboard/v1/broker/owner", append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil {
		return -1, err
	}
	if len(resp.Kvs) == 0 {
		return -1, nil
	}
	addr := string(resp.Kvs[0].Value)
	for i, d := range s.deciders {
		if a := d.proxy.Addr(); a == addr || strings.HasSuffix(addr, a) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the broker owner %q is none of the deciders", addr)
}

// waitOwner polls until the owner satisfies ok, for at most a minute.
func (s *system) waitOwner(ctx context.Context, ok func(int) bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if o, err := s.owner(ctx); err == nil && ok(o) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the broker owner: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill kills decider i with SIGKILL and waits for it to be gone.
func (s *system) kill(i int) {
	d := s.deciders[i]
	d.mu.Lock()
	c := d.child
	d.mu.Unlock()
	_ = syscall.Kill(c.Pid(), syscall.SIGKILL)
	<-c.Exited()
}

// term ends decider i with SIGTERM (a clean stop: it drains, writes its
// last snapshot and resigns) and waits for it to be gone; SIGKILL after
// a minute.
func (s *system) term(i int) {
	d := s.deciders[i]
	d.mu.Lock()
	c := d.child
	d.mu.Unlock()
	_ = syscall.Kill(c.Pid(), syscall.SIGTERM)
	select {
	case <-c.Exited():
	case <-time.After(time.Minute):
		_ = syscall.Kill(c.Pid(), syscall.SIGKILL)
		<-c.Exited()
	}
}

// pause stops decider i (SIGSTOP) or lets it go on (SIGCONT).
func (s *system) pause(i int, stop bool) {
	d := s.deciders[i]
	d.mu.Lock()
	defer d.mu.Unlock()
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(d.child.Pid(), sig)
	d.paused = stop
}

// member reports whether decider i's membership key is in etcd.
func (s *system) member(ctx context.Context, i int) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, "/switchboard/v1/deciders/"+s.deciders[i].id, clientv3.WithCountOnly())
	return err == nil && resp.Count > 0
}

// snapshotRevision is the modification revision of the broker's snapshot.
func (s *system) snapshotRevision(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, "/switchboard/v1/broker/snapshot", clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// rpc is a client of decider i calling with token.
func (s *system) rpc(i int, token string) (switchboardv1.DeciderClient, func(), error) {
	conn, err := grpc.NewClient(s.deciders[i].addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer.Token(token)))
	if err != nil {
		return switchboardv1.DeciderClient{}, nil, err
	}
	return switchboardv1.NewDeciderClient(conn), func() { _ = conn.Close() }, nil
}

// stop stops everything: edges first (their last reports reach the
// deciders), then the deciders (a paused one is let go first), etcd and
// the simulator.
func (s *system) stop() {
	var wg sync.WaitGroup
	for _, e := range s.edges {
		wg.Go(e.child.Stop)
	}
	wg.Wait()
	for _, d := range s.deciders {
		d.mu.Lock()
		c, paused := d.child, d.paused
		d.mu.Unlock()
		if c == nil {
			continue
		}
		if paused {
			_ = syscall.Kill(c.Pid(), syscall.SIGCONT)
		}
		wg.Go(c.Stop)
	}
	wg.Wait()
	if s.cli != nil {
		_ = s.cli.Close()
	}
	for _, d := range s.deciders {
		d.proxy.Close()
	}
	for _, p := range s.etcdProxies {
		p.Close()
	}
	if s.etcd != nil {
		s.etcd.stop()
	}
	for _, t := range s.taps {
		t.close()
	}
	s.sim.Stop()
}

// waitServing polls a decider's gRPC health until it answers SERVING.
func waitServing(ctx context.Context, c *childproc.Child, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	h := healthpb.NewHealthClient(conn)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := h.Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-c.Exited():
			return fmt.Errorf("%s exited: %w", c.Name, c.Err())
		case <-ctx.Done():
			return fmt.Errorf("%s not serving: %w", c.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
