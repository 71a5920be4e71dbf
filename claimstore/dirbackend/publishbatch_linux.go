package dirbackend

import "syscall"

// openTempBudget is how many temporaries PublishBatch keeps open at once:
// a quarter of the descriptor limit (Go raises the soft limit to the hard
// one at start), between 16 and 1,000.
func openTempBudget() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 16
	}
	return int(min(max(l.Cur/4, 16), 1000))
}
