package claimstore

import (
	"io/fs"
	"sort"
	"syscall"
)

func sortStrings(s []string) { sort.Strings(s) }

func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
