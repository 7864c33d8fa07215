// Package childproc runs the services of a benchmark or a load test as
// child processes on loopback: started with their stderr in a log file,
// watched until they exit, stopped with SIGTERM (then SIGKILL), and given
// free ports chosen in advance, since the decider and the edge must be
// told their addresses before they start. edgebench and brokerload use it.
package childproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before it kills.
const StopGrace = 5 * time.Second

// Child is a started process.
type Child struct {
	// Name names it in errors and log file names.
	Name string
	// Addr is where it serves (set by the caller that knows it).
	Addr string
	// Debug is its --debug-listen address, if any (set by the caller).
	Debug string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs cmd with its stderr appended to the file at logPath and
// watches it exit.
func Start(name string, cmd *exec.Cmd, logPath string) (*Child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &Child{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	return c, nil
}

// Pid is the process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once the process has exited; Err then says how.
func (c *Child) Exited() <-chan struct{} { return c.done }

// Err is the process's exit error, once Exited is closed.
func (c *Child) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Stop asks the process to end (SIGTERM) and kills it if it has not within
// StopGrace. A nil Child is already stopped.
func (c *Child) Stop() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(StopGrace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// FreePort returns a loopback host:port free a moment ago, for the
// services whose address must be known before they start.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
