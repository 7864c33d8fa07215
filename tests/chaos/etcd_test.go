package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterRestart stops a member while the other two keep a quorum,
// starts it again on its ports and data, and reads from it alone what was
// written while it was down; then stops the cluster. With an etcd binary on
// PATH the members are its processes, stopped with SIGKILL, then SIGTERM,
// and none may be left running; without one they are embedded.
func TestClusterRestart(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		bin = ""
	}
	t.Logf("etcd binary: %q (empty: embedded)", bin)
	c, err := startCluster(t.Context(), t.TempDir(), bin)
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			c.stop()
		}
	}()
	pids := map[int]bool{}
	record := func() {
		for _, m := range c.members {
			if m.proc != nil {
				pids[m.proc.Pid()] = true
			}
		}
	}
	record()

	all, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoints(), ","), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer all.Close()
	for round, how := range []string{"SIGKILL", "SIGTERM"} {
		if bin == "" {
			how = "closed"
		}
		require.Equal(t, how, c.stopMember(0), "round %d", round)
		want := fmt.Sprintf("written while member 0 was down (%s, round %d)", how, round)
		put(t, all, "k", want)
		require.NoError(t, c.startMember(t.Context(), 0))
		record()
		one, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + c.members[0].client}, DialTimeout: 5 * time.Second})
		require.NoError(t, err)
		// Serializable: what member 0 itself holds, once it has caught up.
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			resp, err := one.Get(ctx, "k", clientv3.WithSerializable())
			return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == want
		}, time.Minute, 50*time.Millisecond, "member 0 serves %q", want)
		_ = one.Close()
	}
	c.stop()
	stopped = true
	require.Equal(t, "already stopped", c.stopMember(1))
	if bin != "" {
		require.Len(t, pids, 5, "three members, one started twice more")
		for pid := range pids {
			require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "member process %d still running", pid)
		}
	}
}

// put writes k until etcd takes it: a write just after the leader was
// killed may time out while the other two elect a new one.
func put(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, k, v)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "put %s", k)
}
