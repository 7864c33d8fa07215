package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// agentTimeout bounds one run of a coding-agent CLI: a turn against the
// loopback simulator takes a few seconds, so this only guards against a
// hang (a prompt waiting for a permission, a connection that never ends).
const agentTimeout = 2 * time.Minute

// agentBin is the path of a coding-agent CLI that `make agents` (a
// prerequisite of `make test`) installed from tests/agents/package-lock.json.
func agentBin(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("agents", "node_modules", ".bin", name))
	require.NoError(t, err)
	_, err = os.Stat(p)
	require.NoError(t, err, "%s is not installed: run `make agents` (make test does it first)", name)
	return p
}

// egressTrap is an HTTP proxy on loopback that refuses whatever it is
// asked for, at once, and remembers it. A CLI under test gets it as its
// HTTPS_PROXY/HTTP_PROXY (with NO_PROXY naming loopback), so any attempt
// to reach a host other than the gateway fails fast instead of hanging on
// a network this machine may not have, and the test can say what was tried.
type egressTrap struct {
	srv *httptest.Server

	mu    sync.Mutex
	tried []string
}

func startEgressTrap(t *testing.T) *egressTrap {
	t.Helper()
	e := &egressTrap{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Host
		if r.Method != http.MethodConnect {
			target = r.Method + " " + r.URL.String()
		}
		e.mu.Lock()
		e.tried = append(e.tried, target)
		e.mu.Unlock()
		http.Error(w, "the test allows loopback only", http.StatusForbidden)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// env is the proxy settings that send every non-loopback request to the trap.
func (e *egressTrap) env() []string {
	u := e.srv.URL
	return []string{"HTTPS_PROXY=" + u, "HTTP_PROXY=" + u, "https_proxy=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1"}
}

// attempts is what the CLI tried to reach beyond loopback.
func (e *egressTrap) attempts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.tried)
}

// agentRun is one finished run of a coding-agent CLI.
type agentRun struct {
	stdout, stderr string
	err            error
	// report is what a failure message shows of the run.
	report string
}

// runAgent runs bin with args in dir, with env as its whole environment
// (nothing of the test's own, so no credential of the machine reaches it),
// bounded by agentTimeout: past it the CLI's process group is killed.
func runAgent(t *testing.T, dir string, env []string, bin string, args ...string) agentRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so a timeout also ends the shells it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s did not finish within %s: %w", filepath.Base(bin), agentTimeout, err)
	}
	return agentRun{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// agentStack is a whole Switchboard on loopback for a coding agent to
// run against: the system, the egress trap, and the agent's own HOME
// with an empty project directory to work in.
type agentStack struct {
	*stack
	trap *egressTrap
	// home is the agent's HOME; work, below it, its working directory.
	home, work string
	// env is the agent's whole environment: a PATH with the shell its
	// tools run in, its HOME, and the trap's proxy; tests add its own.
	env []string
}

func startAgentStack(t *testing.T) *agentStack {
	t.Helper()
	a := &agentStack{stack: startSystem(t), trap: startEgressTrap(t), home: t.TempDir()}
	a.work = filepath.Join(a.home, "project")
	require.NoError(t, os.Mkdir(a.work, 0o700))
	a.env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + a.home, "TMPDIR=" + a.home, "LANG=C.UTF-8",
		"TERM=dumb", "NO_COLOR=1"}, a.trap.env()...)
	return a
}

// run runs the agent CLI bin in the project directory and returns what
// it did, with the report a failure shows: its output, what it tried
// beyond loopback, and the edge's log.
func (a *agentStack) run(t *testing.T, bin string, args ...string) agentRun {
	t.Helper()
	r := runAgent(t, a.work, a.env, bin, args...)
	r.report = fmt.Sprintf("exit: %v\n--- stdout\n%s\n--- stderr\n%s\n--- non-loopback attempts\n%q\n--- edge log\n%s",
		r.err, r.stdout, r.stderr, a.trap.attempts(), a.logText())
	return r
}

// randomToken is a fresh word for a tool to print: only a run that really
// executed the tool can show it.
func randomToken(t *testing.T) string {
	t.Helper()
	return strings.ToLower(rand.Text()[:12])
}

// uuid4 is a random RFC 4122 version-4 id, the form Claude Code's
// --session-id wants.
func uuid4(t *testing.T) string {
	t.Helper()
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// servedRequests is how many chat completions the simulated providers
// answered in full, all providers together.
func (s *stack) servedRequests() int64 {
	var n int64
	for _, p := range s.sim.Providers() {
		n += p.Stats().Models[simModel].Outcomes.OK
	}
	return n
}

// acmeActivity is the tenant's activity records, newest first.
func (s *stack) acmeActivity(t *testing.T) []*switchboardv1.ActivityRecord {
	t.Helper()
	resp, err := operatorRPC(t, s.decider.Addr()).ListActivity(t.Context(),
		&switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Limit: 100})
	require.NoError(t, err)
	return resp.GetRecords()
}

// TestClaudeCodeToolTurnThroughEdge runs Claude Code, unchanged, in print
// mode against the edge's Messages API, with the tenant key as an API key
// (x-api-key) and as an auth token (Authorization: Bearer): the simulator
// asks it to run a shell command, Claude Code runs it and sends the result
// back, and the simulator's answer quoting the command's output is what
// Claude Code prints. A command it may not run comes back as an error
// result, quoted the same way. The gateway saw a Messages-API conversation
// of two turns, named by Claude Code's session header.
func TestClaudeCodeToolTurnThroughEdge(t *testing.T) {
	claude := agentBin(t, "claude")
	tests := []struct {
		name, keyEnv string
		// allow is the --allowedTools rule: print mode cannot ask for a
		// permission, and a root user may not skip them. echo alone needs
		// none (Claude Code runs read-only commands freely); tee, which
		// writes a file, does.
		allow string
		ran   bool
	}{
		{name: "API key", keyEnv: "ANTHROPIC_API_KEY", allow: "Bash(tee:*)", ran: true},
		{name: "auth token", keyEnv: "ANTHROPIC_AUTH_TOKEN", allow: "Bash(tee:*)", ran: true},
		{name: "command not allowed", keyEnv: "ANTHROPIC_API_KEY", allow: "Bash(ls:*)", ran: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startAgentStack(t)
			token := randomToken(t)
			session := uuid4(t)
			s.env = append(s.env,
				"ANTHROPIC_BASE_URL="+strings.TrimSuffix(s.edge.URL(), "/v1"),
				tt.keyEnv+"="+testKey,
				// Every model Claude Code asks for is the catalog's: its
				// main model and the small, fast one of its side requests.
				"ANTHROPIC_MODEL="+model,
				"ANTHROPIC_DEFAULT_HAIKU_MODEL="+model,
				"ANTHROPIC_DEFAULT_SONNET_MODEL="+model,
				"ANTHROPIC_DEFAULT_OPUS_MODEL="+model,
				// No telemetry, error reports, update checks or other
				// traffic beyond the API calls: without it, it calls
				// api.anthropic.com three times in a print-mode turn.
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				// The simulator writes max_tokens tokens before a tool call.
				"CLAUDE_CODE_MAX_OUTPUT_TOKENS=32",
			)
			prompt := fmt.Sprintf(`Save the token. [[provsim:tool=Bash {"command":"echo switchboard-%s | tee token.txt","description":"Save the token"}]]`, token)
			run := s.run(t, claude, "-p", prompt, "--model", model, "--session-id", session,
				"--output-format", "text", "--max-turns", "4", "--allowedTools", tt.allow)
			report := run.report
			require.NoError(t, run.err, report)
			saved, err := os.ReadFile(filepath.Join(s.work, "token.txt"))
			if tt.ran {
				// The simulator's answer to the tool's result, which only a
				// run of the command could have produced, is what Claude
				// Code printed; the command's file is there.
				require.Contains(t, run.stdout, "tool result: switchboard-"+token, report)
				require.NoError(t, err, report)
				require.Equal(t, "switchboard-"+token+"\n", string(saved))
			} else {
				// The refusal went back as an error result, and nothing ran.
				require.Contains(t, run.stdout, "tool result: Error:", report)
				require.Contains(t, run.stdout, "requires approval", report)
				require.NotContains(t, run.stdout, "switchboard-"+token, report)
				require.ErrorIs(t, err, os.ErrNotExist)
			}
			require.Empty(t, s.trap.attempts(), "Claude Code tried to reach beyond loopback\n%s", report)
			s.requireAgentTurns(t, switchboardv1.ClientApi_CLIENT_API_MESSAGES, report)

			// Claude Code's session header named the conversation: the
			// decider keeps its next turn where the last one was served.
			rpc := operatorRPC(t, s.decider.Addr())
			require.Contains(t, sessionDryRun(t, rpc, session, 4096), "sticky=kept", report)
			require.Contains(t, sessionDryRun(t, rpc, uuid4(t), 4096), "sticky=new", "a session nobody used is new")
		})
	}
}

// requireAgentTurns checks the gateway's side of an agent's tool turn: at
// least two calls (the one answered by a tool call, the one carrying the
// tool's result), each with an activity record that came in by api and
// served, and as many calls served by the simulated providers.
func (s *stack) requireAgentTurns(t *testing.T, api switchboardv1.ClientApi, report string) {
	t.Helper()
	var recs []*switchboardv1.ActivityRecord
	require.Eventually(t, func() bool {
		recs = s.acmeActivity(t)
		return len(recs) >= 2 && int64(len(recs)) == s.servedRequests()
	}, 20*time.Second, 20*time.Millisecond, "activity records %d, provider calls served %d\n%s", len(recs), s.servedRequests(), report)
	for _, r := range recs {
		require.Equal(t, api, r.GetClientApi(), "record %s", r.GetId())
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus(), "record %s", r.GetId())
		require.Equal(t, model, r.GetModel())
		require.Positive(t, r.GetUsage().GetOutputTokens(), "record %s", r.GetId())
	}
}

// codexConfig is Codex CLI's config.toml for the edge at baseURL: a model
// provider speaking the Responses API with the key in keyEnv, no approvals
// asked (exec cannot ask), and none of its own services that would reach
// beyond the gateway: with plugins on, codex exec fetches its plugin
// marketplace from github.com and api.github.com and its plugin catalog
// from chatgpt.com at start; with analytics on, it reports to
// ab.chatgpt.com (the update check is the interactive UI's).
func codexConfig(baseURL, keyEnv string) string {
	return fmt.Sprintf(`model = %q
model_provider = "switchboard"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.switchboard]
name = "Switchboard"
base_url = %q
env_key = %q
wire_api = "responses"

[analytics]
enabled = false

[features]
plugins = false
`, model, baseURL, keyEnv)
}

// codexEvent is a line of codex exec --json, as far as these tests read it.
type codexEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Item     struct {
		Type             string `json:"type"`
		Text             string `json:"text"`
		Command          string `json:"command"`
		AggregatedOutput string `json:"aggregated_output"`
		ExitCode         *int   `json:"exit_code"`
	} `json:"item"`
}

// codexEvents decodes codex exec --json's output, one event a line.
func codexEvents(t *testing.T, stdout, report string) []codexEvent {
	t.Helper()
	var evs []codexEvent
	for line := range strings.Lines(stdout) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var ev codexEvent
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "%s\n%s", line, report)
		evs = append(evs, ev)
	}
	return evs
}

// TestCodexToolTurnThroughEdge runs Codex CLI, unchanged, with codex exec
// against the edge's Responses API: the simulator asks it to run a shell
// command (its exec_command tool), Codex runs it and sends the output
// back, and the simulator's answer quoting it is Codex's last message.
// The gateway saw a Responses-API conversation of two turns, named by
// Codex's session header.
func TestCodexToolTurnThroughEdge(t *testing.T) {
	codex := agentBin(t, "codex")
	s := startAgentStack(t)
	codexHome := filepath.Join(s.home, ".codex")
	require.NoError(t, os.Mkdir(codexHome, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig(s.edge.URL(), "SWITCHBOARD_API_KEY")), 0o600))
	s.env = append(s.env, "CODEX_HOME="+codexHome, "SWITCHBOARD_API_KEY="+testKey)

	token := randomToken(t)
	prompt := fmt.Sprintf(`Print the token. [[provsim:tool=exec_command {"cmd":"echo switchboard-%s"}]]`, token)
	run := s.run(t, codex, "exec", "--skip-git-repo-check", "--ephemeral", "--json", prompt)
	report := run.report
	require.NoError(t, run.err, report)

	var thread, answer string
	var ran bool
	for _, ev := range codexEvents(t, run.stdout, report) {
		switch {
		case ev.Type == "thread.started":
			thread = ev.ThreadID
		case ev.Type == "item.completed" && ev.Item.Type == "command_execution":
			require.Contains(t, ev.Item.Command, "echo switchboard-"+token, report)
			require.Equal(t, "switchboard-"+token+"\n", ev.Item.AggregatedOutput, report)
			require.NotNil(t, ev.Item.ExitCode, report)
			require.Zero(t, *ev.Item.ExitCode, report)
			ran = true
		case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
			answer = ev.Item.Text
		case ev.Type == "turn.failed" || ev.Type == "error":
			require.Fail(t, "codex reported an error", report)
		}
	}
	require.True(t, ran, "codex ran no command\n%s", report)
	// Its last message is the simulator's answer to the command's output
	// (which Codex prefixes with the run's wall time and exit code).
	require.True(t, strings.HasPrefix(answer, "tool result: "), "last message %q\n%s", answer, report)
	require.Contains(t, answer, "Output: switchboard-"+token, report)
	require.Empty(t, s.trap.attempts(), "Codex tried to reach beyond loopback\n%s", report)
	s.requireAgentTurns(t, switchboardv1.ClientApi_CLIENT_API_RESPONSES, report)

	// Its session header (the thread id) named the conversation.
	require.NotEmpty(t, thread, report)
	require.Contains(t, sessionDryRun(t, operatorRPC(t, s.decider.Addr()), thread, 4096), "sticky=kept", report)
}
