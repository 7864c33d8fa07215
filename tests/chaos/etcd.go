package chaos

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-ai/switchboard/pkg/childproc"
)

// cluster is three etcd members on loopback, hosted in this process, each
// with its own data directory, peer and client ports: the external etcd the
// deciders are pointed at with --etcd. A member can be stopped and started
// again on the same ports and data, as a restarted etcd pod would be.
type cluster struct {
	mu      sync.Mutex
	members []*member
}

type member struct {
	name         string
	dir          string
	peer, client string
	etcd         *embed.Etcd // nil while stopped
}

// startCluster starts three members under dir and waits until each is ready.
func startCluster(dir string) (*cluster, error) {
	c := &cluster{}
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
		wg.Go(func() { errs[i] = m.start(strings.Join(initial, ",")) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (m *member) start(initial string) error {
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
	case <-time.After(time.Minute):
		e.Close()
		return fmt.Errorf("etcd member %s not ready within a minute", m.name)
	}
	m.etcd = e
	return nil
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

// stopMember stops member i (its data stays).
func (c *cluster) stopMember(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.members[i].etcd; e != nil {
		e.Close()
		c.members[i].etcd = nil
	}
}

// startMember starts member i again on its ports and data, rejoining the
// others.
func (c *cluster) startMember(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[i].etcd != nil {
		return nil
	}
	return c.members[i].start(c.initial())
}

func (c *cluster) stop() {
	for i := range c.members {
		c.stopMember(i)
	}
}
