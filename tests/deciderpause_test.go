package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// freezer is a TCP proxy that can stop passing bytes either way while
// keeping its connections open: from the edge's side, a decider that is
// paused or cut off by the network.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	thaw   chan struct{} // closed while thawed; a fresh open channel while frozen
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &freezer{ln: ln, target: target, thaw: make(chan struct{})}
	close(f.thaw)
	var conns sync.WaitGroup
	var openMu sync.Mutex
	var open []net.Conn
	closed := false
	// The accept loop is counted too, so that no Add can start from zero
	// while the cleanup waits.
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			openMu.Lock()
			if closed {
				openMu.Unlock()
				_ = c.Close()
				_ = up.Close()
				return
			}
			open = append(open, c, up)
			openMu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); f.pipe(up, c) }()
			go func() { defer conns.Done(); f.pipe(c, up) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		f.set(false)
		openMu.Lock()
		closed = true
		for _, c := range open {
			_ = c.Close()
		}
		openMu.Unlock()
		conns.Wait()
	})
	return f
}

// pipe copies src to dst, holding each read's bytes while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		thaw := f.thaw
		f.mu.Unlock()
		<-thaw
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thaw: // thawed
		if frozen {
			f.thaw = make(chan struct{})
		}
	default:
		if !frozen {
			close(f.thaw)
		}
	}
}

// A decider that stops answering — a paused process, a cut network — must
// not hold a client whose request the edge sent it: a Decide that may wait
// in an admission queue has a deadline of many minutes, so only the edge's
// pings on the connection can tell. The client gets a 503 once two of them
// went unanswered (--decider-keepalive), not when its queue wait would have
// ended.
func TestUnansweringDeciderFailsTheRequestsWaitingOnIt(t *testing.T) {
	var f *freezer
	sys := startStack(t, stackOptions{sim: slowSimConfig, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[3]s, price: {input: 0.1, output: 0.5}}
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
`, model, url("alpha"), simModel, catalog.HashKey(testKey))
	}, tune: func(c *deciderapp.Config) { c.ID, c.Seed, c.ShutdownTimeout = "e2e-freeze", 0, 0 },
		edgeTo: func(s *stack) string {
			f = startFreezer(t, s.decider.Addr())
			return f.ln.Addr().String()
		},
		edgeArgs: []string{"--decider-keepalive=5s"}, ownDeadlines: true,
	})
	edge := sys.edge
	body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	code, _, _ := sys.post(t, testKey, body)
	require.Equal(t, http.StatusOK, code, "answered while the decider answers")

	f.set(true)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", raw)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
	require.Equal(t, "decider_unavailable", e.Error.Code)
}
