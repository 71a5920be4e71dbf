//go:build !linux

package cli

// isTerminalFd answers false off Linux: progress output is only a
// convenience, and plain output is always correct.
func isTerminalFd(int) bool { return false }

func terminalColumns(int) int { return 0 }
