package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-ai/switchboard/pkg/childproc"
)

// cluster is three etcd members on loopback, each with its own data
// directory, peer and client ports: the external etcd the deciders are
// pointed at with --etcd. The members are hosted in this process, or, with
// an etcd binary, run as its processes (logs etcdN.log, a restarted one
// etcdN.2.log…, in the work directory). A member can be stopped and started
// again on the same ports and data, as a restarted etcd pod would be.
type cluster struct {
	mu      sync.Mutex
	bin     string // the etcd binary; empty: embedded members
	logDir  string
	members []*member
	// stops counts the member stops: a member process is killed with
	// SIGKILL on even ones and ended with SIGTERM on odd ones.
	stops int
}

type member struct {
	name         string
	dir          string
	peer, client string
	etcd         *embed.Etcd      // embedded; nil while stopped
	proc         *childproc.Child // a process of the binary; nil while stopped
	starts       int
}

// memberReady bounds how long a member may take to serve.
const memberReady = time.Minute

// startCluster starts three members under dir and waits until each is
// ready: embedded when bin is empty, else processes of bin.
func startCluster(ctx context.Context, dir, bin string) (*cluster, error) {
	c := &cluster{bin: bin, logDir: dir}
	var initial []string
	for i := range 3 {
		peer, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		client, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		m := &member{name: fmt.Sprintf("etcd%d", i), dir: filepath.Join(dir, fmt.Sprintf("etcd%d", i)), peer: peer, client: client}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+peer)
	}
	// The three must start together: each waits for a quorum of its peers.
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = c.startLocked(ctx, m, strings.Join(initial, ",")) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// describe says which etcd the members are: embedded, or the binary and
// its version.
func (c *cluster) describe() string {
	if c.bin == "" {
		return "embedded members (go.etcd.io/etcd/server/v3)"
	}
	out, err := exec.Command(c.bin, "--version").Output() //nolint:gosec // G204: the binary the operator named.
	version, _, _ := strings.Cut(string(out), "\n")
	if err != nil || version == "" {
		version = "version unknown"
	}
	return fmt.Sprintf("processes of %s (%s)", c.bin, version)
}

// startLocked starts m. Members are started one at a time under c.mu,
// except the first three, which startCluster starts together.
func (c *cluster) startLocked(ctx context.Context, m *member, initial string) error {
	m.starts++
	if c.bin == "" {
		return m.startEmbedded(ctx, initial)
	}
	return m.startProcess(ctx, c.bin, c.logDir, initial)
}

func (m *member) startEmbedded(ctx context.Context, initial string) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.LogLevel = "panic" // a member's own errors show as a start that fails or a member that is not ready
	cfg.ListenClientUrls = []url.URL{{Scheme: "http", Host: m.client}}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: m.peer}}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "switchboard-chaos"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(memberReady):
		e.Close()
		return fmt.Errorf("etcd member %s not ready within a minute", m.name)
	case <-ctx.Done():
		e.Close()
		return fmt.Errorf("etcd member %s: %w", m.name, ctx.Err())
	}
	m.etcd = e
	return nil
}

// startProcess runs m as a process of bin and waits until its /health
// says true (it serves, and its cluster has a leader). A restarted member
// finds its data directory and rejoins; --initial-cluster-state is then
// ignored.
func (m *member) startProcess(ctx context.Context, bin, logDir, initial string) error {
	cmd := exec.Command(bin, //nolint:gosec // G204: the binary the operator named.
		"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
		"--listen-peer-urls", "http://"+m.peer, "--initial-advertise-peer-urls", "http://"+m.peer,
		"--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", "switchboard-chaos",
		"--logger", "zap", "--log-outputs", "stderr")
	logName := m.name + ".log"
	if m.starts > 1 {
		logName = fmt.Sprintf("%s.%d.log", m.name, m.starts)
	}
	logPath := filepath.Join(logDir, logName)
	p, err := childproc.Start(m.name, killedWithUs(cmd), logPath)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, memberReady)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	for !healthy(ctx, hc, "http://"+m.client+"/health") {
		select {
		case <-p.Exited():
			return fmt.Errorf("etcd member %s exited: %w (log %s)", m.name, p.Err(), logPath)
		case <-ctx.Done():
			p.Stop()
			return fmt.Errorf("etcd member %s not healthy within a minute (log %s): %w", m.name, logPath, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	m.proc = p
	return nil
}

// healthy reports whether an etcd member's /health answers true.
func healthy(ctx context.Context, hc *http.Client, u string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	var h struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// endpoints is the --etcd list: every member's client URL.
func (c *cluster) endpoints() string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "http://"+m.client)
	}
	return strings.Join(eps, ",")
}

// initial is the members' initial cluster string.
func (c *cluster) initial() string {
	var s []string
	for _, m := range c.members {
		s = append(s, m.name+"=http://"+m.peer)
	}
	return strings.Join(s, ",")
}

// stopMember stops member i (its data stays) and says how: an embedded
// member is closed; a member process is killed with SIGKILL or, every
// other time, ended with SIGTERM (then SIGKILL if it lingers).
func (c *cluster) stopMember(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	switch {
	case m.etcd != nil:
		m.etcd.Close()
		m.etcd = nil
		return "closed"
	case m.proc != nil:
		how := "SIGKILL"
		if c.stops%2 == 1 {
			how = "SIGTERM"
		}
		c.stops++
		if how == "SIGKILL" {
			_ = syscall.Kill(m.proc.Pid(), syscall.SIGKILL)
			<-m.proc.Exited()
		} else {
			m.proc.Stop()
		}
		m.proc = nil
		return how
	}
	return "already stopped"
}

// startMember starts member i again on its ports and data, rejoining the
// others.
func (c *cluster) startMember(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.etcd != nil || m.proc != nil {
		return nil
	}
	return c.startLocked(ctx, m, c.initial())
}

// stop stops every member: embedded ones closed in turn, processes ended
// with SIGTERM together (a member left without a quorum is slow to stop).
func (c *cluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.etcd != nil {
			m.etcd.Close()
			m.etcd = nil
		}
		if p := m.proc; p != nil {
			wg.Go(p.Stop)
			m.proc = nil
		}
	}
	wg.Wait()
}
