package app

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// TestHealthWhileStarting: while start-up waits for etcd, the decider's
// address answers health checks with NOT_SERVING and every other call with
// UNAVAILABLE, from a server of its own; once etcd answers and everything
// is built, the same address serves the decider, SERVING.
func TestHealthWhileStarting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen, etcdAddr := freeAddr(t), freeAddr(t)
	cfg := Config{
		Listen: listen, Etcd: []string{etcdAddr}, Catalog: writeCatalog(t, dir, false), DataDir: dir,
		ShutdownTimeout: 5 * time.Second, NoDrainDelay: true, ID: "test", TokenFile: writeToken(t, testReplicaToken),
	}
	type started struct {
		d   *Decider
		err error
	}
	done := make(chan started, 1)
	go func() {
		d, err := Start(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		done <- started{d, err}
	}()

	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)
	require.Eventually(t, func() bool {
		h, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}, 10*time.Second, 10*time.Millisecond, "NOT_SERVING while etcd is not reachable")
	client := switchboardv1.NewDeciderClient(conn)
	_, err = client.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model"})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	select {
	case s := <-done:
		t.Fatalf("Start returned before etcd was up: %v", s.err)
	default:
	}

	etcd, err := store.StartEmbedded(t.Context(), store.EmbeddedOptions{DataDir: filepath.Join(t.TempDir(), "etcd"), ClientAddr: etcdAddr})
	require.NoError(t, err)
	t.Cleanup(etcd.Close)
	s := <-done
	require.NoError(t, s.err)
	t.Cleanup(s.d.Close)
	require.Equal(t, listen, s.d.Addr())

	// The start-up server's connection was closed at the handover; the
	// client reconnects to the real server on the same address.
	require.Eventually(t, func() bool {
		h, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 10*time.Second, 10*time.Millisecond, "SERVING once started")
	resp, err := client.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model"})
	require.NoError(t, err)
	require.Equal(t, "acme", resp.GetIdentity().GetTenantId())
}
