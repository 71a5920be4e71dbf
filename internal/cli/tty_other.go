//go:build !linux

package cli

import (
	"errors"
	"os"
)

// readPassword is not available off Linux: give the password by
// $CLAIMSTORE_ETCD_PASSWORD instead.
func readPassword(*os.File) (string, error) {
	return "", errors.New("asking for a password needs Linux; set $" + envPassword)
}

// isTerminalFd answers false off Linux: progress output is only a
// convenience, and plain output is always correct.
func isTerminalFd(int) bool { return false }

func terminalColumns(int) int { return 0 }
