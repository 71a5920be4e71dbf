package hostidtest_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/hostid"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// The fake judges as Linux would: Judge, which every store test relies
// on, reads each kind of process in the table as the state its doc names.
func TestJudge(t *testing.T) {
	h := &hostidtest.Host{
		Procs:   map[int]string{10: "500", 11: "500"},
		Zombies: map[int]bool{11: true},
		Hidden:  map[int]bool{12: true},
	}
	owner := func(pid int, start string) hostid.Owner {
		return hostid.Owner{PID: pid, Start: start, Boot: hostidtest.Boot}
	}
	for _, tc := range []struct {
		name  string
		owner hostid.Owner
		want  hostid.State
	}{
		{"running", owner(10, "500"), hostid.Live},
		{"pid reused", owner(10, "499"), hostid.Gone},
		{"zombie", owner(11, "500"), hostid.Unknown},
		{"hidden", owner(12, "500"), hostid.Unknown},
		{"no such process", owner(13, "500"), hostid.Gone},
		{"another boot", hostid.Owner{PID: 10, Start: "500", Boot: "bbbbbbbb-0000-4000-8000-00000000000b"}, hostid.Gone},
		{"another namespace", hostid.Owner{PID: 10, Start: "500", Boot: hostidtest.Boot, PIDNS: "4:4026532301"}, hostid.Unknown},
	} {
		if got, why := hostid.Judge(h, tc.owner); got != tc.want {
			t.Errorf("%s: Judge = %s (%s), want %s", tc.name, got, why, tc.want)
		}
	}
}

// The empty fields read as the documented defaults, the errors as the
// ones Linux gives, and Self records the fake's own facts.
func TestFacts(t *testing.T) {
	h := &hostidtest.Host{Procs: map[int]string{7: "1"}, Hidden: map[int]bool{8: true}}
	m, _ := h.MachineID()
	b, _ := h.BootID()
	ns, _ := h.PIDNamespace(7)
	if diff := cmp.Diff([]string{hostidtest.Machine, hostidtest.Boot, hostidtest.InitialPIDNS}, []string{m, b, ns}); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if !hostid.ValidMachineID(m) || !hostid.ValidBootID(b) || !hostid.InitialPIDNamespace(ns) {
		t.Errorf("defaults %q, %q, %q are not well-formed ids", m, b, ns)
	}
	h.Machine, h.Boot, h.PIDNS = "m", "b", "1:2"
	m, _ = h.MachineID()
	b, _ = h.BootID()
	ns, _ = h.PIDNamespace(0)
	if diff := cmp.Diff([]string{"m", "b", "1:2"}, []string{m, b, ns}); diff != "" {
		t.Errorf("set ids (-want +got):\n%s", diff)
	}
	if _, err := h.StartTime(9); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("StartTime(absent) = %v, want fs.ErrNotExist", err)
	}
	if _, err := h.ProcState(8); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("ProcState(hidden) = %v, want fs.ErrPermission", err)
	}
	var pe *fs.PathError
	if _, err := h.StartTime(8); !errors.As(err, &pe) || pe.Path != "/proc/8/stat" {
		t.Errorf("StartTime(hidden) = %v, want a *fs.PathError on /proc/8/stat", err)
	}
	if err := h.Signal0(8); !errors.Is(err, unix.EPERM) {
		t.Errorf("Signal0(hidden) = %v, want EPERM", err)
	}
	if err := h.Signal0(9); !errors.Is(err, unix.ESRCH) {
		t.Errorf("Signal0(absent) = %v, want ESRCH", err)
	}
	if st, err := h.ProcState(7); err != nil || st != 'S' {
		t.Errorf("ProcState(running) = %q, %v; want 'S'", st, err)
	}
}
