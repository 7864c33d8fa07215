//go:build !linux

package chaos

import "os/exec"

// killedWithUs leaves cmd as it is: only Linux kills a child with its
// parent. Stopping the run stops every child either way.
func killedWithUs(cmd *exec.Cmd) *exec.Cmd { return cmd }
