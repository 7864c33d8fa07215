//go:build linux

package chaos

import (
	"os/exec"
	"syscall"
)

// killedWithUs has cmd's process killed (SIGKILL) when this process ends,
// however it ends: a run killed with SIGKILL, or a test that times out and
// exits without its cleanup, leaves no etcd member, decider, edge or
// simulator running. (The kernel sends it when the thread that started
// cmd exits; the Go runtime ends a thread only when a goroutine locked to
// it returns, which nothing here does.)
func killedWithUs(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}
