// Package store keeps the decider's durable state in etcd: the shared catalog,
// and replica membership under a lease. It can also run etcd embedded in the
// process, the default for a single-node deployment and for tests.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Key layout. Everything lives under one prefix so several Switchboard
// installations can share an etcd cluster with different prefixes later.
const (
	// CatalogKey holds the catalog's YAML.
	CatalogKey = "/switchboard/v1/catalog"
	// MembersPrefix holds one lease-bound key per live decider replica.
	MembersPrefix = "/switchboard/v1/deciders/"
)

// EmbeddedOptions configure an embedded etcd.
type EmbeddedOptions struct {
	// DataDir is where etcd keeps its data. (Required)
	DataDir string
	// ClientAddr is the host:port to serve etcd clients on. (Optional)
	// Defaults to 127.0.0.1:0, a free port.
	ClientAddr string
	// PeerAddr is the host:port for the raft peer listener. (Optional)
	// Defaults to 127.0.0.1:0.
	PeerAddr string
	// MaxRequestBytes is etcd's --max-request-bytes. (Optional) Defaults
	// to etcd's 1.5 MiB; a lower value is raised to it.
	MaxRequestBytes int
	// ClientTLS serves clients over https with these files; ClientCertAuth
	// requires client certificates of TrustedCAFile. (Optional) Empty serves
	// plain http, which the decider's own loopback etcd does.
	ClientTLS transport.TLSInfo
}

// Embedded is an etcd server running in this process.
type Embedded struct {
	etcd *embed.Etcd
}

// StartEmbedded starts a single-member etcd and waits until it serves.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.DataDir == "" {
		return nil, errors.New("embedded etcd: data dir is required")
	}
	if opts.ClientAddr == "" {
		opts.ClientAddr = "127.0.0.1:0"
	}
	if opts.PeerAddr == "" {
		opts.PeerAddr = "127.0.0.1:0"
	}
	cfg := embed.NewConfig()
	cfg.Name = "switchboard"
	cfg.Dir = opts.DataDir
	// etcd logs a stack trace at error level for every listener closed on a
	// clean shutdown; real failures still surface through e.Err().
	cfg.LogLevel = "panic"
	cfg.ListenClientUrls = []url.URL{{Scheme: "http", Host: opts.ClientAddr}}
	if !opts.ClientTLS.Empty() {
		cfg.ListenClientUrls[0].Scheme = "https"
		cfg.ClientTLSInfo = opts.ClientTLS
	}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: opts.PeerAddr}}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if uint(opts.MaxRequestBytes) > cfg.MaxRequestBytes {
		cfg.MaxRequestBytes = uint(opts.MaxRequestBytes)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Embedded{etcd: e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd: not ready after 60s")
	}
}

// Endpoint returns the address clients connect to.
func (e *Embedded) Endpoint() string { return e.etcd.Clients[0].Addr().String() }

// Close stops etcd.
func (e *Embedded) Close() { e.etcd.Close() }

// Store wraps an etcd client with the decider's keys.
type Store struct {
	cli    *clientv3.Client
	logger *slog.Logger
	wg     sync.WaitGroup // Register's lease keepers
}

// Connect dials etcd. ctx bounds the dial only: the client lives until
// Close, so a stop signal that cancels ctx still lets the caller write its
// final state and resign before closing.
func Connect(ctx context.Context, endpoints []string, logger *slog.Logger) (*Store, error) {
	return ConnectTLS(ctx, endpoints, nil, logger)
}

// ConnectTLS is Connect over TLS when tlsCfg is not nil. A handshake that
// fails (an unknown CA, a refused client certificate) fails at once with
// the reason, rather than as a timeout.
func ConnectTLS(ctx context.Context, endpoints []string, tlsCfg *tls.Config, logger *slog.Logger) (*Store, error) {
	return ConnectTLSWith(ctx, endpoints, tlsCfg, logger, 0)
}

// ConnectTLSWith is ConnectTLS with the largest request the client sends,
// in bytes (0, or below the client's default of 2 MiB: that default).
func ConnectTLSWith(ctx context.Context, endpoints []string, tlsCfg *tls.Config, logger *slog.Logger, maxSendBytes int) (*Store, error) {
	if tlsCfg != nil {
		if err := probeTLS(ctx, endpoints, tlsCfg); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Context:     context.WithoutCancel(ctx),
		// The client's own zap logs (retries on a closing connection at
		// shutdown, for instance) are noise next to the decider's; errors
		// that matter come back from the calls themselves.
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: max(maxSendBytes, 2<<20),
	})
	if err != nil {
		return nil, fmt.Errorf("connect etcd %v: %w", endpoints, err)
	}
	// A status call proves the cluster answers before we report healthy.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(sctx, CatalogKey, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("reach etcd %v: %w", endpoints, err)
	}
	return &Store{cli: cli, logger: logger}, nil
}

// probeTLS does a TLS handshake with each endpoint until one succeeds. When
// endpoints refused the handshake (a certificate that does not verify, an
// alert from the server) and none accepted it, it returns why; an endpoint
// that does not answer at all is left to the client's own retries.
func probeTLS(ctx context.Context, endpoints []string, tlsCfg *tls.Config) error {
	var errs []error
	for _, e := range endpoints {
		host := e
		if u, err := url.Parse(e); err == nil && u.Host != "" {
			host = u.Host
		}
		cfg := tlsCfg.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(host)
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
		if err != nil {
			cancel()
			continue // unreachable for now: left to the client's retries
		}
		cfg.NextProtos = []string{"h2"}
		conn := tls.Client(raw, cfg)
		err = conn.HandshakeContext(dctx)
		answered := err == nil
		if answered {
			err = awaitServerFrame(dctx, conn)
		} else {
			err = refusal(err)
		}
		cancel()
		_ = conn.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("etcd %s: TLS handshake: %w", e, err))
		case answered:
			return nil
		}
		// A handshake cut or timed out is left to the client's retries.
	}
	return errors.Join(errs...)
}

// awaitServerFrame opens HTTP/2 and reads the server's first frame. Under
// TLS 1.3 the server checks the client's certificate after the client's
// handshake is done, so a refused certificate shows only as an alert on
// the first read; a server that is merely slow is not an error here.
func awaitServerFrame(ctx context.Context, conn *tls.Conn) error {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// The client preface and an empty SETTINGS frame.
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return refusal(err)
	}
	var frame [9]byte
	_, err := conn.Read(frame[:])
	return refusal(err)
}

// refusal keeps the errors that are a TLS refusal (an alert from the
// server, a certificate error) and drops the rest.
func refusal(err error) error {
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	if errors.As(err, &verify) || (errors.As(err, &op) && op.Op == "remote error") {
		return err // crypto/tls reports the server's alert as a "remote error"
	}
	return nil
}

// Client returns the etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Close closes the client, which ends every lease keeper (a revocation in
// flight is cut short: the lease then expires by itself).
func (s *Store) Close() error {
	err := s.cli.Close()
	s.wg.Wait()
	return err
}

// PutCatalog stores the catalog's YAML unless the stored copy is identical,
// and returns the revision that holds it.
func (s *Store) PutCatalog(ctx context.Context, data []byte) (int64, error) {
	get, err := s.cli.Get(ctx, CatalogKey)
	if err != nil {
		return 0, fmt.Errorf("get catalog: %w", err)
	}
	if len(get.Kvs) == 1 && string(get.Kvs[0].Value) == string(data) {
		return get.Kvs[0].ModRevision, nil
	}
	put, err := s.cli.Put(ctx, CatalogKey, string(data))
	if err != nil {
		return 0, fmt.Errorf("put catalog: %w", err)
	}
	return put.Header.Revision, nil
}

// ErrNoCatalog means etcd holds no catalog yet.
var ErrNoCatalog = errors.New("no catalog stored in etcd: start a decider with --catalog once")

// GetCatalog returns the stored catalog YAML and the revision of the read.
func (s *Store) GetCatalog(ctx context.Context) ([]byte, int64, error) {
	get, err := s.cli.Get(ctx, CatalogKey)
	if err != nil {
		return nil, 0, fmt.Errorf("get catalog: %w", err)
	}
	if len(get.Kvs) == 0 {
		return nil, get.Header.Revision, ErrNoCatalog
	}
	return get.Kvs[0].Value, get.Header.Revision, nil
}

// WatchCatalog calls fn with every new catalog stored after revision rev,
// until ctx ends. Watching from rev+1 means no change between the read and the
// watch is missed; WithRequireLeader makes a partitioned member's watch fail
// rather than go silent.
func (s *Store) WatchCatalog(ctx context.Context, rev int64, fn func(data []byte, rev int64)) {
	for ctx.Err() == nil {
		wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), CatalogKey, clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				s.logger.Warn("catalog watch", "err", err)
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					fn(ev.Kv.Value, ev.Kv.ModRevision)
				}
				rev = ev.Kv.ModRevision
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Register records this replica under a lease kept alive until ctx ends, so
// other replicas and operators see which deciders are alive. ttl is in seconds.
// When ctx ends the lease is revoked, so a replica that stops cleanly leaves
// the list at once; one that dies leaves it when the lease expires. A lease
// lost while the replica lives (a pause past its TTL, etcd out of reach for
// longer, a revocation) is replaced: the replica registers again under a new
// lease, the same key, as soon as etcd answers, retrying with a back-off of
// up to 2 s.
func (s *Store) Register(ctx context.Context, id string, m Member, ttl int64) error {
	addr := string(m.encode())
	lease, ka, err := s.register(ctx, ctx, id, addr, ttl)
	if err != nil {
		return err
	}
	s.wg.Go(func() {
		for {
			for range ka { // drain until ctx ends or the lease is lost
			}
			if ctx.Err() != nil {
				break
			}
			if s.cli.Ctx().Err() != nil {
				return // the client is closed: the process is stopping
			}
			s.logger.Error("membership lease lost; registering again", "member", id)
			if lease, ka = s.reregister(ctx, id, addr, ttl); ka == nil {
				return // ctx ended
			}
			s.logger.Info("membership registered again", "member", id)
		}
		// Best effort: a client closed meanwhile fails at once, and the
		// lease then runs out by itself.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := s.cli.Revoke(rctx, lease); err != nil {
			s.logger.Debug("revoking the membership lease", "member", id, "err", err)
		}
	})
	return nil
}

// register puts the member key (its value addr, encoded) under a new
// lease, within ctx, and keeps the lease alive until keep ends.
func (s *Store) register(ctx, keep context.Context, id, addr string, ttl int64) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, error) {
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, nil, fmt.Errorf("grant lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, MembersPrefix+id, addr, clientv3.WithLease(lease.ID)); err != nil {
		s.revokeSoon(ctx, lease.ID)
		return 0, nil, fmt.Errorf("register member: %w", err)
	}
	ka, err := s.cli.KeepAlive(keep, lease.ID)
	if err != nil {
		s.revokeSoon(ctx, lease.ID)
		return 0, nil, fmt.Errorf("keep lease alive: %w", err)
	}
	return lease.ID, ka, nil
}

// reregister retries register until it succeeds, or ctx ends or the client
// is closed (nil channel).
func (s *Store) reregister(ctx context.Context, id, addr string, ttl int64) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse) {
	backoff := 100 * time.Millisecond
	for {
		// Each attempt is bounded, so a hung etcd is tried again rather
		// than waited for.
		actx, cancel := context.WithTimeout(ctx, time.Duration(ttl)*time.Second)
		lease, ka, err := s.register(actx, ctx, id, addr, ttl)
		cancel()
		if err == nil {
			return lease, ka
		}
		if ctx.Err() != nil || s.cli.Ctx().Err() != nil {
			return 0, nil
		}
		s.logger.Warn("registering membership again", "member", id, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-s.cli.Ctx().Done():
			return 0, nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// revokeSoon revokes a lease that holds nothing useful, best effort.
func (s *Store) revokeSoon(ctx context.Context, lease clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(rctx, lease)
}

// LogsPrefix holds one key per replica that keeps an activity log, by its
// id, whatever its address: written at start and never removed, so a
// replica that reads every log knows one whose replica is gone is out of
// reach.
const LogsPrefix = "/switchboard/v1/activity-logs/"

// RegisterLog records that the replica id keeps an activity log.
func (s *Store) RegisterLog(ctx context.Context, id string) error {
	if _, err := s.cli.Put(ctx, LogsPrefix+id, ""); err != nil {
		return fmt.Errorf("register activity log: %w", err)
	}
	return nil
}

// StatsPrefix holds the routing statistics, one key per model.
const StatsPrefix = "/switchboard/v1/stats/"

// PutStats writes the shards whose content changed since the last call and
// returns how many it wrote. written remembers what was last stored, by key;
// the caller keeps it between calls.
func (s *Store) PutStats(ctx context.Context, shards map[string][]byte, written map[string]string) (int, error) {
	n := 0
	for model, blob := range shards {
		if written[model] == string(blob) {
			continue
		}
		if _, err := s.cli.Put(ctx, StatsPrefix+model, string(blob)); err != nil {
			return n, fmt.Errorf("put stats %s: %w", model, err)
		}
		written[model] = string(blob)
		n++
	}
	return n, nil
}

// GetStats returns every stored shard, by model.
func (s *Store) GetStats(ctx context.Context) (map[string][]byte, error) {
	get, err := s.cli.Get(ctx, StatsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("get stats: %w", err)
	}
	out := make(map[string][]byte, len(get.Kvs))
	for _, kv := range get.Kvs {
		out[string(kv.Key[len(StatsPrefix):])] = kv.Value
	}
	return out, nil
}

// HedgeBudgetKey holds the day's hedge spend; the owner of the rate-limit
// broker writes it with the broker's snapshot, fenced.
const HedgeBudgetKey = "/switchboard/v1/hedge-budget"
