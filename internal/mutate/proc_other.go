//go:build !unix

package main

import (
	"os/exec"
	"time"
)

// killGroup: without process groups, cancellation kills go itself only.
func killGroup(cmd *exec.Cmd) { cmd.WaitDelay = 10 * time.Second }
