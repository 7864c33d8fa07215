package chaos

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// procdeathChild, when set, makes TestChildrenDieWithHarness the harness
// itself: it starts a child the way the harness starts its services,
// prints the child's pid and waits to be killed.
const procdeathChild = "CHAOS_TEST_PROCDEATH_CHILD"

// TestChildrenDieWithHarness kills (SIGKILL) a process that started a
// child as the harness starts etcd members and services: the child must
// end with it instead of running on.
func TestChildrenDieWithHarness(t *testing.T) {
	if os.Getenv(procdeathChild) != "" {
		sleep := killedWithUs(exec.Command("sleep", "600"))
		require.NoError(t, sleep.Start())
		fmt.Printf("child pid %d\n", sleep.Process.Pid)
		select {}
	}
	harness := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestChildrenDieWithHarness$") //nolint:gosec // G204: this test binary.
	harness.Env = append(os.Environ(), procdeathChild+"=1")
	out, err := harness.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, harness.Start())
	pid := 0
	sc := bufio.NewScanner(out)
	for pid == 0 && sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "child pid "); ok {
			pid, err = strconv.Atoi(s)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, pid, "the harness printed its child's pid")
	require.NoError(t, harness.Process.Kill())
	_ = harness.Wait()
	require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 20*time.Millisecond,
		"child %d still running after its harness was killed", pid)
}

// running reports whether process pid exists and is not a zombie (an
// orphan's zombie lingers where nothing reaps it).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(stat), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}
