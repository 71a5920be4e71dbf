package lifecycle

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// setSubreaper makes this process the child subreaper of its descendants.
func setSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// groupMembers describes the processes in group pgid as /proc shows them
// ("pid 12 sleep (zombie, parent 1)"), for a message; nil when /proc
// cannot be read. It is not evidence: only kill(-pgid, 0) decides.
func groupMembers(pgid int) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ")".
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		state := map[string]string{"R": "running", "S": "sleeping", "D": "in uninterruptible sleep", "Z": "zombie", "T": "stopped", "t": "traced"}[f[0]]
		if state == "" {
			state = "state " + f[0]
		}
		if f[0] == "Z" {
			state += ", not yet reaped by its parent " + f[1]
		}
		out = append(out, "pid "+strconv.Itoa(pid)+" "+s[open+1:close]+" ("+state+")")
		if len(out) == 8 {
			out = append(out, "…")
			break
		}
	}
	return out
}
