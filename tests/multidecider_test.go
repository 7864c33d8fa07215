package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// relay is a TCP proxy in front of a decider replica, the edge's way to it.
// It may start listening after the edge started (listen); cut closes its
// listener and every connection at once, as the death of the replica's
// machine looks to the edge: no goodbye, no NOT_SERVING first.
type relay struct {
	addr, target string
	accepted     atomic.Int64
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
	cutDone      bool
	wg           sync.WaitGroup
}

// newRelay returns a relay to target on a free address, not listening yet.
func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	r := &relay{addr: freeAddr(t), target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(r.cut)
	return r
}

// listen starts passing connections to the target.
func (r *relay) listen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	require.NoError(t, err)
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			up, err := net.Dial("tcp", r.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !r.track(c, up) {
				return
			}
			r.wg.Go(func() { r.pipe(up, c) })
			r.wg.Go(func() { r.pipe(c, up) })
		}
	})
}

// track records an open pair; false (both closed) once the relay was cut.
func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cutDone {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *relay) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// cut closes the listener and every connection, and waits for the relay's
// goroutines.
func (r *relay) cut() {
	r.mu.Lock()
	r.cutDone = true
	if r.ln != nil {
		_ = r.ln.Close()
	}
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// outcome is one request of the steady load.
type outcome struct {
	start, end time.Time
	code       int
	id         string
}

// steadyLoad sends small chat requests from a few clients, one after the
// other each, until stop, keeping every outcome.
type steadyLoad struct {
	mu   sync.Mutex
	outs []outcome
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(t *testing.T, edgeURL string, clients int) *steadyLoad {
	t.Helper()
	l := &steadyLoad{stop: make(chan struct{})}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, model)
	client := &http.Client{Timeout: 30 * time.Second}
	for range clients {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				o := outcome{start: time.Now()}
				req, err := http.NewRequest(http.MethodPost, edgeURL+"/chat/completions", strings.NewReader(body))
				if err != nil {
					return // a constant URL and body: never
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					o.code, o.id = resp.StatusCode, resp.Header.Get("X-Switchboard-Request-Id")
				}
				o.end = time.Now()
				l.mu.Lock()
				l.outs = append(l.outs, o)
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.finish)
	return l
}

// finish stops the load and waits for the requests in flight; idempotent.
func (l *steadyLoad) finish() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *steadyLoad) outcomes() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outcome(nil), l.outs...)
}

// okSince counts the successful requests that started after t.
func (l *steadyLoad) okSince(t time.Time) int {
	n := 0
	for _, o := range l.outcomes() {
		if o.code == http.StatusOK && o.start.After(t) {
			n++
		}
	}
	return n
}

// TestEdgeKeepsServingWhenTwoOfThreeDecidersDie: three deciders on one
// etcd, an edge given all three. Under steady load, with calls in flight
// and the edge's Report stream on a replica that goes, two replicas go at
// once: crashed (their connections cut, then killed) or stopped cleanly
// (health NOT_SERVING, then a graceful stop). The edge keeps serving from
// the third, moves its Report stream there with the reservations its calls
// hold and what the others never acknowledged, and every slot is given back
// and every call is in the activity log afterwards. Before, an edge took
// one address and answered 503 until that replica came back.
func TestEdgeKeepsServingWhenTwoOfThreeDecidersDie(t *testing.T) {
	for _, tt := range []struct {
		name  string
		crash bool
	}{
		{name: "crash", crash: true},
		{name: "clean stop", crash: false},
	} {
		// Each has its deciders, etcd and edge: the two run side by side.
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			twoOfThreeDeciders(t, tt.crash)
		})
	}
}

func twoOfThreeDeciders(t *testing.T, crash bool) {
	const capacity = 64
	// The first runs the etcd and owns the broker; it survives. The edge
	// reaches each replica through a relay; the survivor's opens once the
	// edge's Report stream is on a doomed one, so that the stream has to
	// move. A short reservation TTL: a reservation made for a request
	// whose answer was lost with its replica is given back within the
	// test, at its expiry; calls in flight keep theirs by heartbeat.
	var toFirst *relay
	var relays []*relay
	r := startStack(t, stackOptions{sim: slowSimConfig, catalog: concurrencyCatalog(capacity), replicas: []string{"second", "third"},
		tune: func(c *deciderapp.Config) { c.ID, c.Seed = "first", 0 },
		// a clean stop drains for the default delay
		tuneReplica: func(c *deciderapp.Config) { c.Seed, c.NoDrainDelay = 0, crash },
		edgeTo: func(s *stack) string {
			toFirst = newRelay(t, s.decider.Addr())
			relays = []*relay{newRelay(t, s.replicas[0].Addr()), newRelay(t, s.replicas[1].Addr())}
			for _, rl := range relays {
				rl.listen(t)
			}
			return strings.Join([]string{toFirst.addr, relays[0].addr, relays[1].addr}, ",")
		},
		edgeArgs: []string{"--reservation-ttl=5s"}, ownDeadlines: true,
	})
	first, doomed, edge := r.decider, slices.Clone(r.replicas), r.edge
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{first.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	owner, _ := brokerOwner(t, cli)
	require.Equal(t, first.Addr(), owner)
	require.Eventually(t, func() bool { return len(doomed[0].Edges())+len(doomed[1].Edges()) == 1 }, waitFor, tick,
		"the Report stream opens on a doomed replica")
	toFirst.listen(t)
	require.Eventually(t, func() bool { return toFirst.accepted.Load() > 0 }, waitFor, tick, "the edge connects to the survivor")

	load := startLoad(t, edge.URL(), 4)
	// Calls that outlive the deaths: 40 tokens at 20 a second.
	var streams []*liveStream
	for range 3 {
		s, code := r.openStream(t, 40)
		require.Equal(t, http.StatusOK, code)
		streams = append(streams, s)
	}
	warm := time.Now()
	require.Eventually(t, func() bool { return load.okSince(warm) >= 20 }, waitFor, tick, "steady load served")
	for _, o := range load.outcomes() {
		require.Equal(t, http.StatusOK, o.code, "every request succeeds while the three serve")
	}
	require.Empty(t, first.Edges(), "the stream is still on a doomed replica")

	kill := time.Now()
	if crash {
		for _, rl := range relays {
			rl.cut()
		}
		for _, d := range doomed {
			d.Kill()
		}
	} else {
		var stops sync.WaitGroup
		for _, d := range doomed {
			stops.Go(d.Close)
		}
		stops.Wait()
	}

	// Serving again: requests sent after the deaths succeed.
	require.Eventually(t, func() bool { return load.okSince(kill) > 0 }, waitFor, tick, "the edge serves after two deciders died")
	var firstOK time.Time
	failedBefore, failedAfterKill := 0, 0
	codes := map[int]int{}
	for _, o := range load.outcomes() {
		if o.start.After(kill) && o.code == http.StatusOK && (firstOK.IsZero() || o.end.Before(firstOK)) {
			firstOK = o.end
		}
	}
	for _, o := range load.outcomes() {
		if o.end.After(kill) && o.code != http.StatusOK {
			failedAfterKill++
			codes[o.code]++
			if o.end.Before(firstOK) {
				failedBefore++
			}
		}
	}
	t.Logf("first successful answer %v after the kill; %d requests failed before it, %d after the kill in all (by status: %v)",
		firstOK.Sub(kill).Round(time.Millisecond), failedBefore, failedAfterKill, codes)

	// It keeps serving: nothing sent after that first answer fails.
	settled := time.Now()
	require.Eventually(t, func() bool { return load.okSince(settled) >= 20 }, waitFor, tick)
	for _, o := range load.outcomes() {
		if o.start.After(firstOK) {
			require.Equal(t, http.StatusOK, o.code, "a request sent after the edge served again")
		}
	}
	readyz, err := http.Get("http://" + edge.Addr() + "/readyz")
	require.NoError(t, err)
	_ = readyz.Body.Close()
	require.Equal(t, http.StatusOK, readyz.StatusCode, "ready while one decider is")

	// The Report stream moved to the survivor, declaring the reservations
	// of the calls in flight there.
	require.Eventually(t, func() bool { return len(first.Edges()) == 1 }, waitFor, tick, "the Report stream moves to the survivor")
	require.Eventually(t, func() bool { return first.ReservationHeartbeats() > 0 }, waitFor, tick,
		"the moved stream declares the held reservations")
	for _, s := range streams {
		s.finish(t)
	}
	load.finish()

	// Consistent afterwards: every reconciliation acknowledged, nothing
	// held, every slot back (an orphan of a lost answer at its expiry at
	// the latest), and every served call in the activity log.
	require.Eventually(t, func() bool { return r.edgeSettled() && len(edge.HeldReservations()) == 0 }, waitFor, tick)
	require.Eventually(t, func() bool {
		for _, l := range first.TenantLimits("acme") {
			if l.Unit == "concurrent_requests" {
				return l.Remaining == capacity
			}
		}
		return false
	}, waitFor, tick, "every slot given back: %+v", first.TenantLimits("acme"))
	want := map[string]bool{}
	for _, o := range load.outcomes() {
		if o.code == http.StatusOK {
			want[o.id] = true
		}
	}
	for _, s := range streams {
		want[s.id] = true
	}
	// Each replica keeps the activity it stored in its own log: the dead
	// ones' are read once they are back on their data directories (the
	// edge does not know their new addresses).
	logs := []string{first.Addr()}
	for i := range doomed {
		logs = append(logs, r.restartReplica(t, i).Addr())
	}
	logged := map[string]bool{}
	for _, addr := range logs {
		for id := range loggedCalls(t, addr) {
			logged[id] = true
		}
	}
	var missing []string
	for id := range want {
		if !logged[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "every served call is in the activity log")
	t.Logf("%d calls served and logged", len(want))
}

// loggedCalls returns the ids of every call of tenant acme in the activity
// log of the decider at addr.
func loggedCalls(t *testing.T, addr string) map[string]bool {
	t.Helper()
	rpc := operatorRPC(t, addr)
	out := map[string]bool{}
	for cursor := ""; ; {
		resp, err := rpc.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Limit: 500, Cursor: cursor})
		require.NoError(t, err)
		for _, rec := range resp.GetRecords() {
			out[rec.GetId()] = true
		}
		if cursor = resp.GetNextCursor(); cursor == "" {
			return out
		}
	}
}
