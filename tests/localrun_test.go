package tests

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLocalRunStopsCleanly runs deploy/local/run.sh (what `make run` runs)
// with freshly built binaries and stops it as a user does: Ctrl-C, which the
// terminal sends to the whole process group as SIGINT, or a SIGTERM to the
// script alone. Either way the script exits 0 with no error line, every
// component has stopped, and the banner said where the edge, the decider
// and the metrics are, and the switchboard commands it suggests run as
// printed. Long: it builds the binaries and starts the whole system twice,
// on the simulated providers' fixed ports.
func TestLocalRunStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("long: builds the binaries and runs deploy/local/run.sh")
	}
	for _, tool := range []string{"bash", "curl", "sha256sum", "od"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "run.sh needs %s", tool)
	}
	root, bin := buildBinaries(t, "")

	// A child inherits an ignored SIGINT (a shell's background job has it
	// ignored, and bash cannot trap a signal ignored on entry), while a
	// signal this process handles is reset to its default in its children:
	// handling SIGINT here gives the script the disposition a terminal's
	// foreground job has.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	t.Cleanup(func() { signal.Stop(sigs) })

	tests := []struct {
		name  string
		group bool // the signal goes to the whole process group, as Ctrl-C does
		sig   syscall.Signal
	}{
		{name: "ctrl-c to the process group", group: true, sig: syscall.SIGINT},
		{name: "sigterm to the script", sig: syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edgeAddr, deciderAddr, edgeDebug, deciderDebug := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "deploy/local/run.sh"))
			cmd.Env = append(os.Environ(),
				"SWITCHBOARD_BIN="+bin, "SWITCHBOARD_DATA="+t.TempDir(),
				"EDGE_ADDR="+edgeAddr, "DECIDER_ADDR="+deciderAddr,
				"EDGE_ADMIN_ADDR="+edgeDebug, "DECIDER_ADMIN_ADDR="+deciderDebug)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			// Past the deadline the whole group goes, not the script alone.
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			stdout, stderr := &lockedWriter{w: &bytes.Buffer{}}, &lockedWriter{w: &bytes.Buffer{}}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()

			// The banner is the last thing printed before the script waits.
			var banner string
			require.Eventually(t, func() bool {
				select {
				case err := <-exited:
					require.FailNow(t, "run.sh exited before it was ready", "%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
				default:
				}
				banner = stdout.String()
				return strings.Contains(banner, "/switchboard explain ")
			}, time.Minute, 50*time.Millisecond, "the banner")
			require.Contains(t, banner, "Switchboard is running")
			require.Contains(t, banner, "Base URL: http://"+edgeAddr+"/v1")
			require.Contains(t, banner, "Decider:  "+deciderAddr)
			require.Contains(t, banner, "http://"+edgeDebug+"/metrics")
			require.Contains(t, banner, "http://"+deciderDebug+"/metrics")
			// The switchboard commands the banner suggests run as printed.
			var suggested int
			for line := range strings.Lines(banner) {
				args := strings.Fields(line)
				if len(args) < 2 || filepath.Base(args[0]) != "switchboard" {
					continue
				}
				suggested++
				var out, errOut bytes.Buffer
				sb := exec.CommandContext(ctx, args[0], args[1:]...)
				sb.Stdout, sb.Stderr = &out, &errOut
				require.NoError(t, sb.Run(), "%s: %s", strings.TrimSpace(line), errOut.String())
				require.Contains(t, out.String(), "deepseek/deepseek-v4.1-flash", strings.TrimSpace(line))
			}
			require.Equal(t, 2, suggested, "the banner suggests switchboard stats and explain")
			require.Contains(t, banner, "Dashboard: http://"+deciderDebug+"/dashboard/")
			for _, url := range []string{"http://" + edgeDebug + "/metrics", "http://" + deciderDebug + "/metrics", "http://" + deciderDebug + "/dashboard/"} {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				require.NoError(t, err)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err, url)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode, url)
			}

			pid := cmd.Process.Pid
			if tt.group {
				pid = -pid
			}
			require.NoError(t, syscall.Kill(pid, tt.sig))
			err := <-exited
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("run.sh exited %v on %v; stderr:\n%s", exit, tt.sig, stderr)
			}
			require.NoError(t, err)
			require.NotContains(t, stderr.String(), "a component exited")
			require.NotContains(t, strings.ToLower(stderr.String()), "error")
			require.Contains(t, stderr.String(), "Switchboard stopped.")
			// The script waited for its components: nothing listens any more.
			for _, addr := range []string{edgeAddr, deciderAddr, edgeDebug, deciderDebug} {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					_ = c.Close()
				}
				require.Error(t, err, "%s still listening after run.sh exited", addr)
			}
		})
	}
}

// buildBinaries builds bin/decider, bin/edge, bin/provsim and
// bin/switchboard as make build does, with version as their Version when
// it is not empty, into a temporary directory; it returns the repository's
// root and that directory.
func buildBinaries(t *testing.T, version string) (root, bin string) {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin = t.TempDir()
	for _, b := range []struct{ name, pkg, version string }{
		{"decider", "./services/decider/cmd/decider", "github.com/switchboard-ai/switchboard/services/decider/app.Version"},
		{"edge", "./services/edge/cmd/edge", "github.com/switchboard-ai/switchboard/services/edge/app.Version"},
		{"provsim", "./services/provsim/cmd/provsim", "main.version"},
		{"switchboard", "./services/decider/cmd/switchboard", "github.com/switchboard-ai/switchboard/services/decider/internal/cli.Version"},
	} {
		args := []string{"build", "-o", filepath.Join(bin, b.name)}
		if version != "" && b.version != "" {
			args = append(args, "-ldflags", "-X "+b.version+"="+version)
		}
		build := exec.CommandContext(t.Context(), "go", append(args, b.pkg)...)
		build.Dir = root
		out, err := build.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", b.name, out)
	}
	return root, bin
}

// TestBinariesVersionAndHelp: the edge, the decider, provsim and
// switchboard print the version make build stamps them with and exit 0; decider --help lists
// its subcommands, and experiment --help its own, exiting 0; switchboard
// --help lists its commands and each command's --help exits 0. Long: it
// builds the binaries.
func TestBinariesVersionAndHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("long: builds the binaries")
	}
	const version = "v1.2.3-test"
	_, bin := buildBinaries(t, version)
	type binCase struct {
		name       string
		args       []string
		wantStdout string
		// wantInStdout and wantStderr are each in the output.
		wantInStdout, wantStderr []string
	}
	tests := []binCase{
		{name: "edge --version", args: []string{"edge", "--version"}, wantStdout: "edge " + version + "\n"},
		{name: "edge -version", args: []string{"edge", "-version"}, wantStdout: "edge " + version + "\n"},
		{name: "decider --version", args: []string{"decider", "--version"}, wantStdout: "decider " + version + "\n"},
		{name: "decider --help", args: []string{"decider", "--help"},
			wantStderr: []string{"decider explain", "decider experiment start|stop|show", "decider certs", "decider --version", "-listen"}},
		{name: "decider experiment --help", args: []string{"decider", "experiment", "--help"},
			wantStdout: "usage: decider experiment start|stop|show [flags] (each with -help)\n"},
		{name: "edge --help", args: []string{"edge", "--help"}, wantStderr: []string{"edge --version", "-listen"}},
		{name: "provsim --version", args: []string{"provsim", "--version"}, wantStdout: "provsim " + version + "\n"},
		{name: "switchboard --version", args: []string{"switchboard", "--version"}, wantStdout: "switchboard " + version + "\n"},
		{name: "switchboard version", args: []string{"switchboard", "version"}, wantStdout: "switchboard " + version + "\n"},
	}
	for _, c := range []string{"catalog validate", "catalog show", "stats", "explain", "broker", "hedge", "experiment start",
		"experiment stop", "experiment show", "activity tail", "version"} {
		tests = append(tests, binCase{name: "switchboard " + c + " --help", args: append(append([]string{"switchboard"}, strings.Fields(c)...), "--help"),
			wantInStdout: []string{"usage: switchboard " + c}})
	}
	tests = append(tests, binCase{name: "switchboard --help", args: []string{"switchboard", "--help"},
		wantInStdout: []string{"catalog validate FILE", "stats [MODEL]", "activity tail", "--token-file"}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(t.Context(), filepath.Join(bin, tt.args[0]), tt.args[1:]...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "exit 0; stderr: %s", stderr.String())
			if tt.wantStdout != "" {
				require.Equal(t, tt.wantStdout, stdout.String())
			}
			for _, w := range tt.wantInStdout {
				require.Contains(t, stdout.String(), w)
			}
			for _, w := range tt.wantStderr {
				require.Contains(t, stderr.String(), w)
			}
		})
	}
}
