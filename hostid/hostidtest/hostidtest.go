package hostidtest

import (
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/hostid"
)

// The ids a Host presents when its fields are empty.
const (
	Machine = "0123456789abcdef0123456789abcdef"
	Boot    = "aaaaaaaa-0000-4000-8000-00000000000a"
	// InitialPIDNS is the initial PID namespace as PIDNamespace spells
	// it: device 4 (nsfs), inode PROC_PID_INIT_INO.
	InitialPIDNS = "4:4026531836"
)

// Host is a machine with a process table; see the package documentation.
type Host struct {
	Machine string
	Boot    string
	// Procs maps a running pid to its start time (clock ticks since boot).
	Procs map[int]string
	// Zombies are pids of Procs that exited and are not yet reaped.
	Zombies map[int]bool
	// Hidden are pids that exist but whose /proc entry the judge may not
	// read (hidepid, another user's process).
	Hidden map[int]bool
	// PIDNS is the namespace of every process, the judge's included.
	PIDNS string
}

var _ hostid.Host = (*Host)(nil)

// MachineID returns h.Machine, or Machine when it is empty.
func (h *Host) MachineID() (string, error) {
	if h.Machine == "" {
		return Machine, nil
	}
	return h.Machine, nil
}

// BootID returns h.Boot, or Boot when it is empty.
func (h *Host) BootID() (string, error) {
	if h.Boot == "" {
		return Boot, nil
	}
	return h.Boot, nil
}

// StartTime returns the start of a process of Procs; a hidden pid is a
// permission error and any other pid has no /proc entry, as on Linux.
func (h *Host) StartTime(pid int) (string, error) {
	if err := h.stat(pid); err != nil {
		return "", err
	}
	return h.Procs[pid], nil
}

// ProcState returns 'Z' for a zombie and 'S' for any other process of
// Procs, and StartTime's errors for the rest.
func (h *Host) ProcState(pid int) (byte, error) {
	if err := h.stat(pid); err != nil {
		return 0, err
	}
	if h.Zombies[pid] {
		return 'Z', nil
	}
	return 'S', nil
}

// stat is the error of reading /proc/<pid>/stat: nil for a process of
// Procs that is not hidden.
func (h *Host) stat(pid int) error {
	name := fmt.Sprintf("/proc/%d/stat", pid)
	if h.Hidden[pid] {
		return &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	if _, ok := h.Procs[pid]; !ok {
		return &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return nil
}

// PIDNamespace returns h.PIDNS, or InitialPIDNS when it is empty, for
// every pid: the fake's processes all run where the judge does.
func (h *Host) PIDNamespace(int) (string, error) {
	if h.PIDNS == "" {
		return InitialPIDNS, nil
	}
	return h.PIDNS, nil
}

// Signal0 answers nil for a process of Procs, EPERM for a hidden one and
// ESRCH for any other pid.
func (h *Host) Signal0(pid int) error {
	if h.Hidden[pid] {
		return unix.EPERM
	}
	if _, ok := h.Procs[pid]; ok {
		return nil
	}
	return unix.ESRCH
}
