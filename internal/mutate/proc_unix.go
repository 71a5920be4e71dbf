//go:build unix

package main

import (
	"os/exec"
	"syscall"
	"time"
)

// killGroup makes cmd's cancellation kill its whole process group: go test
// runs the test binary, which may run children of its own (the SIGKILL
// tests, Node.js), and a hung mutant must not leave them behind.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
}
