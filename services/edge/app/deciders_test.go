package app

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-ai/switchboard/pkg/readiness"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
)

func TestParseDeciders(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    deciders
		wantErr string
	}{
		{name: "single address", in: "127.0.0.1:9090", want: deciders{target: "127.0.0.1:9090"}},
		{name: "single host name", in: " decider.switchboard.svc:9090 ", want: deciders{target: "decider.switchboard.svc:9090"}},
		{name: "list", in: "10.0.0.1:9090,10.0.0.2:9090, decider-2:9090",
			want: deciders{addrs: []string{"10.0.0.1:9090", "10.0.0.2:9090", "decider-2:9090"}}},
		{name: "dns target", in: "dns:///decider.switchboard.svc:9090", want: deciders{target: "dns:///decider.switchboard.svc:9090"}},
		{name: "passthrough target", in: "passthrough:///127.0.0.1:9090", want: deciders{target: "passthrough:///127.0.0.1:9090"}},
		{name: "unix socket", in: "unix:///run/decider.sock", want: deciders{target: "unix:///run/decider.sock"}},
		{name: "empty", in: " ", wantErr: "required"},
		{name: "a target in a list", in: "dns:///decider:9090,127.0.0.1:9090", wantErr: "cannot be listed"},
		{name: "no port", in: "127.0.0.1:9090,decider", wantErr: `"decider": not host:port`},
		{name: "empty entry", in: "127.0.0.1:9090,", wantErr: `"": not host:port`},
		{name: "listed twice", in: "127.0.0.1:9090,127.0.0.1:9090", wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDeciders(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// A list is loopback only when every address is; a bad --decider is
// reported by the flags, every mistake at once.
func TestDeciderFlag(t *testing.T) {
	c, err := ParseFlags([]string{"--decider", "127.0.0.1:9090,127.0.0.1:9091"}, nil)
	require.NoError(t, err)
	require.NoError(t, c.checkPlaintext())
	c.Decider = "127.0.0.1:9090,10.0.0.7:9090"
	require.ErrorContains(t, c.checkPlaintext(), "--decider-plaintext")
	c.DeciderPlaintext = true
	require.NoError(t, c.checkPlaintext())

	_, err = ParseFlags([]string{"--decider", "a:1,b,a:1"}, nil)
	require.ErrorContains(t, err, `--decider: "b": not host:port`)
	require.ErrorContains(t, err, `"a:1": listed twice`)
}

// The service config balances over every replica and health-checks each
// against the admission health the decider reports; grpc accepts it.
func TestDeciderServiceConfig(t *testing.T) {
	var sc struct {
		LoadBalancingConfig []map[string]json.RawMessage `json:"loadBalancingConfig"`
		HealthCheckConfig   struct {
			ServiceName string `json:"serviceName"`
		} `json:"healthCheckConfig"`
	}
	require.NoError(t, json.Unmarshal([]byte(deciderServiceConfig), &sc))
	require.Len(t, sc.LoadBalancingConfig, 1)
	require.Contains(t, sc.LoadBalancingConfig[0], "round_robin")
	require.Equal(t, readiness.AdmissionService, sc.HealthCheckConfig.ServiceName)
	for _, spec := range []string{"127.0.0.1:9090", "127.0.0.1:9090,127.0.0.1:9091", "dns:///localhost:9090"} {
		conn, err := dialDeciders(spec, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err, spec)
		require.NoError(t, conn.Close())
	}
}

// twoDeciders is the harness with a second fake decider, answering as the
// first does; the edge is given both.
func twoDeciders(t *testing.T, n int, mod func(*Config)) (*harness, *fakedecider.Server) {
	t.Helper()
	var fd2 *fakedecider.Server
	var h *harness
	h = newHarness(t, n, func(c *Config) {
		fd2 = fakedecider.Start(t)
		fd2.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
			return h.decision(req), nil
		})
		c.Decider += "," + fd2.Addr()
		if mod != nil {
			mod(c)
		}
	})
	return h, fd2
}

// decides counts the Decide calls each fake decider got.
func decides(fds ...*fakedecider.Server) []int {
	out := make([]int, len(fds))
	for i, fd := range fds {
		out[i] = len(fd.DecideRequests())
	}
	return out
}

// The edge's calls go to every decider it is given that can admit; one
// that cannot, or died, gets none and costs no request; the edge is ready
// while one is.
func TestEdgeUsesEveryDecider(t *testing.T) {
	h, fd2 := twoDeciders(t, 1, nil)
	ok := func() bool { return h.chat(plainReq, authed()).status == http.StatusOK }
	readyz := func() reply { return h.do(t.Context(), http.MethodGet, "/readyz", "", nil) }
	// allTo reports whether the next requests all succeed on fds[i] alone.
	allTo := func(i int, fds ...*fakedecider.Server) bool {
		before := decides(fds...)
		for range 8 {
			if !ok() {
				return false
			}
		}
		after := decides(fds...)
		for j := range fds {
			if (j == i) != (after[j] > before[j]) {
				return false
			}
		}
		return true
	}

	var failed atomic.Int64
	require.Eventually(t, func() bool {
		if !ok() {
			failed.Add(1)
		}
		n := decides(h.fd, fd2)
		return n[0] > 0 && n[1] > 0
	}, 10*time.Second, 10*time.Millisecond, "requests go to both deciders")
	require.Zero(t, failed.Load(), "no request fails while both answer")

	// One cannot admit (its etcd lost): the others take every request.
	h.fd.SetAdmitting(false)
	require.Eventually(t, func() bool { return allTo(1, h.fd, fd2) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, readyz().status, "ready while one decider is")

	// It admits again and the other dies: no request fails for long.
	h.fd.SetAdmitting(true)
	fd2.Stop()
	require.Eventually(t, func() bool { return allTo(0, h.fd, fd2) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, readyz().status)

	// None can admit: not ready, and why.
	h.fd.SetAdmitting(false)
	require.Eventually(t, func() bool {
		r := readyz()
		return r.status == http.StatusServiceUnavailable && r.body != ""
	}, 10*time.Second, 10*time.Millisecond)
	var body map[string]string
	require.NoError(t, json.Unmarshal([]byte(readyz().body), &body))
	// grpc's reason for one of them: the one stopped, or the one whose
	// admission health is NOT_SERVING.
	require.Contains(t, body["reason"], "no decider replica ready ("+readiness.AdmissionService+" SERVING): Unavailable")
	require.Equal(t, http.StatusServiceUnavailable, h.chat(plainReq, authed()).status)

	h.fd.SetAdmitting(true)
	require.Eventually(t, func() bool { return readyz().status == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	require.True(t, ok())
}

// When the decider holding the Report stream dies, the stream opens on
// another: it declares the reservations held by calls in flight, and sends
// again, as numbered, the activity and reconcile batches the dead one never
// acknowledged; the live one acknowledges them and nothing is left owed.
func TestReportStreamMovesToALiveDecider(t *testing.T) {
	h, fd2 := twoDeciders(t, 1, func(c *Config) { c.FirstTokenTimeout = longWait })
	fds := []*fakedecider.Server{h.fd, fd2}
	var dead, live *fakedecider.Server
	require.Eventually(t, func() bool {
		for i, fd := range fds {
			if fd.Streams() > 0 {
				dead, live = fd, fds[1-i]
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the Report stream opens")
	require.Zero(t, live.Streams(), "one stream")
	// The stream's decider stores nothing and applies nothing (it dies
	// before it would).
	dead.WithholdActivityAcks(true)
	dead.WithholdReconcileAcks(true)

	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status)
	id := r.header.Get("X-Switchboard-Request-Id")
	rsv := h.decideReservation(id)
	var sent *switchboardv1.ReconcileBatch
	require.Eventually(t, func() bool {
		for _, b := range dead.ReconcileBatches() {
			if slices.ContainsFunc(b.GetReconciles(), func(r *switchboardv1.ReconcileRequest) bool { return r.GetReservationId() == rsv }) {
				sent = b
			}
		}
		return sent != nil && slices.ContainsFunc(dead.ActivityRecords(), func(r *switchboardv1.ActivityRecord) bool { return r.GetId() == id })
	}, 10*time.Second, 10*time.Millisecond, "the dead decider got the record and the reconciliation")
	require.Equal(t, 1, h.edge.UnackedReconciles())

	// A call in flight holds its reservation through the move.
	gate := make(chan struct{})
	h.ups[0].SetGate(gate)
	inFlight := make(chan reply, 1)
	go func() { inFlight <- h.chat(streamReq, authed()) }()
	var held []string
	require.Eventually(t, func() bool { held = h.edge.HeldReservations(); return len(held) == 1 },
		10*time.Second, 10*time.Millisecond, "the call in flight holds its reservation")

	dead.Stop()
	require.Eventually(t, func() bool {
		declared := slices.ContainsFunc(live.Heartbeats(), func(hb *switchboardv1.ReservationHeartbeat) bool {
			return slices.Contains(hb.GetReservationIds(), held[0])
		})
		resent := slices.ContainsFunc(live.ReconcileBatches(), func(b *switchboardv1.ReconcileBatch) bool {
			return b.GetSequence() == sent.GetSequence() && b.GetReconciles()[0].GetReservationId() == rsv
		})
		stored := slices.ContainsFunc(live.ActivityRecords(), func(r *switchboardv1.ActivityRecord) bool { return r.GetId() == id })
		return declared && resent && stored
	}, 10*time.Second, 10*time.Millisecond, "the live decider got the held reservation, the reconciliation as numbered, and the record")
	require.Eventually(t, func() bool { return h.edge.UnackedReconciles() == 0 && h.edge.reports.Unacked() == 0 },
		10*time.Second, 10*time.Millisecond, "the live decider acknowledged both")

	close(gate)
	require.Equal(t, http.StatusOK, (<-inFlight).status)
	require.Eventually(t, func() bool { return len(h.edge.HeldReservations()) == 0 && h.edge.UnackedReconciles() == 0 },
		10*time.Second, 10*time.Millisecond, "the call in flight is reconciled with the live decider")
}
