package hostid

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

const (
	initialNS = "4:4026531836" // the initial PID namespace (PROC_PID_INIT_INO)
	childNS   = "4:4026532301" // a container's
	otherNS   = "4:4026532555" // another container's
)

// procTable is a Host with a process table and a judge in a chosen PID
// namespace: nothing is read from this machine. It is not hostidtest.Host
// (the one fake host of the other suites) because these tests are inside
// package hostid, which hostidtest imports, and because they need what
// that fake does not model: the judge's namespace failing to read.
type procTable struct {
	boot  string
	ns    string // the judge's own namespace
	nsErr error  // reading it fails
	procs map[int]fakeProc
}

type fakeProc struct {
	start string
	state byte
}

func (h procTable) MachineID() (string, error) { return goodMachine, nil }
func (h procTable) BootID() (string, error)    { return h.boot, nil }
func (h procTable) StartTime(pid int) (string, error) {
	p, ok := h.procs[pid]
	if !ok {
		return "", &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrNotExist}
	}
	return p.start, nil
}
func (h procTable) ProcState(pid int) (byte, error) {
	p, ok := h.procs[pid]
	if !ok {
		return 0, &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrNotExist}
	}
	return p.state, nil
}
func (h procTable) Signal0(pid int) error {
	if _, ok := h.procs[pid]; ok {
		return nil
	}
	return unix.ESRCH
}
func (h procTable) PIDNamespace(pid int) (string, error) {
	if pid != 0 && pid != os.Getpid() {
		return "", errors.New("procTable knows only the judge's namespace")
	}
	return h.ns, h.nsErr
}

var _ Host = procTable{}

// TestJudgePIDNamespace: a pid is judged only in the namespace it was
// recorded in; a different boot is proof whatever the namespace.
func TestJudgePIDNamespace(t *testing.T) {
	running := map[int]fakeProc{4100: {"500", 'S'}}
	zombie := map[int]fakeProc{4100: {"500", 'Z'}}
	none := map[int]fakeProc{}
	owner := func(ns string) Owner { return Owner{PID: 4100, Start: "500", Boot: goodBoot, PIDNS: ns} }
	tests := []struct {
		name   string
		host   procTable
		o      Owner
		want   State
		reason []string // what the reason must name
	}{
		// The issue: the owner runs in the host's namespace, the judge in a
		// container where pid 4100 does not exist.
		{"other namespace, pid absent here", procTable{boot: goodBoot, ns: childNS, procs: none}, owner(initialNS), Unknown,
			[]string{"another PID namespace", initialNS, childNS, "4100 cannot be judged"}},
		{"other namespace, pid present here", procTable{boot: goodBoot, ns: childNS, procs: running}, owner(otherNS), Unknown,
			[]string{"another PID namespace", otherNS, childNS}},
		{"other namespace, same inode, other device", procTable{boot: goodBoot, ns: "5:4026532301", procs: running}, owner(childNS), Unknown,
			[]string{"another PID namespace"}},
		{"unrecorded, judge in a container", procTable{boot: goodBoot, ns: childNS, procs: none}, owner(""), Unknown,
			[]string{"recorded without a PID namespace", "non-initial", childNS}},
		{"unrecorded, judge in a container, pid present", procTable{boot: goodBoot, ns: childNS, procs: running}, owner(""), Unknown,
			[]string{"recorded without a PID namespace"}},
		{"unrecorded, judge in the initial namespace, live", procTable{boot: goodBoot, ns: initialNS, procs: running}, owner(""), Live, nil},
		{"unrecorded, judge in the initial namespace, gone", procTable{boot: goodBoot, ns: initialNS, procs: none}, owner(""), Gone, []string{"no process 4100"}},
		{"same container namespace, live", procTable{boot: goodBoot, ns: childNS, procs: running}, owner(childNS), Live, nil},
		{"same container namespace, gone", procTable{boot: goodBoot, ns: childNS, procs: none}, owner(childNS), Gone, []string{"no process 4100"}},
		{"same container namespace, reused", procTable{boot: goodBoot, ns: childNS, procs: map[int]fakeProc{4100: {"501", 'S'}}}, owner(childNS), Gone, []string{"reused"}},
		{"same initial namespace, live", procTable{boot: goodBoot, ns: initialNS, procs: running}, owner(initialNS), Live, nil},
		{"judge namespace unreadable", procTable{boot: goodBoot, nsErr: errors.New("stat /proc/self/ns/pid: no such file"), procs: none}, owner(initialNS), Unknown,
			[]string{"PID namespace is unreadable", "/proc/self/ns/pid"}},
		{"judge namespace unreadable, unrecorded", procTable{boot: goodBoot, nsErr: errors.New("stat /proc/self/ns/pid: no such file"), procs: none}, owner(""), Unknown,
			[]string{"PID namespace is unreadable"}},
		{"judge namespace malformed, unrecorded", procTable{boot: goodBoot, ns: "garbage", procs: none}, owner(""), Unknown, nil},
		{"another boot, other namespace", procTable{boot: goodBoot, ns: childNS, procs: running}, Owner{4100, "500", otherBoot, initialNS}, Gone, []string{"boot"}},
		{"another boot, unrecorded, judge in a container", procTable{boot: goodBoot, ns: childNS, procs: none}, Owner{4100, "500", otherBoot, ""}, Gone, []string{"boot"}},
		{"another boot, judge namespace unreadable", procTable{boot: goodBoot, nsErr: errors.New("no"), procs: none}, Owner{4100, "500", otherBoot, initialNS}, Gone, nil},
		{"zombie", procTable{boot: goodBoot, ns: initialNS, procs: zombie}, owner(initialNS), Unknown, []string{"pid 4100 exited, not yet reaped by its parent"}},
		{"zombie, unrecorded namespace", procTable{boot: goodBoot, ns: initialNS, procs: zombie}, owner(""), Unknown, []string{"not yet reaped"}},
		{"zombie of a reused pid", procTable{boot: goodBoot, ns: initialNS, procs: map[int]fakeProc{4100: {"501", 'Z'}}}, owner(initialNS), Gone, []string{"reused"}},
	}
	for _, bad := range []string{"x", "4", "4:", ":4026531836", "04:4026531836", "4:04026531836", "4:4026531836:1", "-4:4026531836", "4:+1", " 4:4026531836", "pid:[4026531836]", "4:99999999999999999999"} {
		tests = append(tests, struct {
			name   string
			host   procTable
			o      Owner
			want   State
			reason []string
		}{"malformed pidns " + strconv.Quote(bad), procTable{boot: goodBoot, ns: initialNS, procs: running}, owner(bad), Invalid, []string{"pidns", strconv.Quote(bad)}})
	}
	// A malformed pidns is invalid even under another boot, as a malformed
	// start or boot is.
	tests = append(tests, struct {
		name   string
		host   procTable
		o      Owner
		want   State
		reason []string
	}{"malformed pidns, another boot", procTable{boot: goodBoot, ns: initialNS, procs: running}, Owner{4100, "500", otherBoot, "x"}, Invalid, nil})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Judge(tt.host, tt.o)
			if got != tt.want {
				t.Errorf("Judge(%+v) = %s (%s), want %s", tt.o, got, reason, tt.want)
			}
			if reason == "" {
				t.Errorf("Judge(%+v) gave no reason", tt.o)
			}
			for _, w := range tt.reason {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q does not say %q", reason, w)
				}
			}
		})
	}
}

// A ProcState that fails after the start time matched (the process went
// away in between, or /proc changed) is not Live.
func TestJudgeStateUnreadable(t *testing.T) {
	h := stateErr{procTable{boot: goodBoot, ns: initialNS, procs: map[int]fakeProc{4100: {"500", 'S'}}}}
	got, reason := Judge(h, Owner{4100, "500", goodBoot, initialNS})
	if got != Unknown || !strings.Contains(reason, "state is unreadable") {
		t.Fatalf("Judge = %s (%s), want unknown: state is unreadable", got, reason)
	}
}

type stateErr struct{ procTable }

func (stateErr) ProcState(pid int) (byte, error) {
	return 0, &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrPermission}
}

// Override presents another namespace for the judge only; the recorded
// owner (this process, with its real namespace) is then foreign.
func TestOverridePIDNamespace(t *testing.T) {
	me := self(t)
	h := Override{Host: System, PIDNS: childNS}
	if ns, _ := h.PIDNamespace(0); ns != childNS {
		t.Errorf("Override.PIDNamespace(0) = %q, want %q", ns, childNS)
	}
	if ns, _ := h.PIDNamespace(os.Getpid()); ns != childNS {
		t.Errorf("Override.PIDNamespace(getpid) = %q, want %q", ns, childNS)
	}
	_, o := startSleeper(t, sleepPath(t))
	if ns, _ := h.PIDNamespace(o.PID); ns != me.PIDNS {
		t.Errorf("Override.PIDNamespace(child) = %q, want the child's real %q", ns, me.PIDNS)
	}
	if got, reason := Judge(h, me); got != Unknown || !strings.Contains(reason, "another PID namespace") {
		t.Errorf("Judge(self) from an overridden namespace = %s (%s), want unknown", got, reason)
	}
}

func TestPIDNamespaceSystem(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, pid := range []int{0, os.Getpid()} {
		got, err := System.PIDNamespace(pid)
		if err != nil {
			t.Fatalf("PIDNamespace(%d): %v", pid, err)
		}
		if got != want {
			t.Errorf("PIDNamespace(%d) = %q, want %q", pid, got, want)
		}
	}
	if me := self(t); me.PIDNS != want {
		t.Errorf("Self().PIDNS = %q, want %q", me.PIDNS, want)
	}
	// A child shares our namespace.
	_, o := startSleeper(t, sleepPath(t))
	if o.PIDNS != want {
		t.Errorf("child's PIDNamespace = %q, want ours %q", o.PIDNS, want)
	}
	if !ValidPIDNamespace(want) {
		t.Errorf("ValidPIDNamespace(%q) = false", want)
	}
	// The machine the tests run on may or may not be a container; log it.
	t.Logf("this test runs in PID namespace %s (initial: %v)", want, InitialPIDNamespace(want))

	cmd, gone := startSleeper(t, sleepPath(t))
	cmd.Process.Kill()
	cmd.Wait()
	if ns, err := System.PIDNamespace(gone.PID); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("/proc/%d/ns/pid", gone.PID)) {
		t.Errorf("PIDNamespace(reaped pid) = %q, %v: want an error naming /proc/%d/ns/pid", ns, err, gone.PID)
	}
	if _, err := System.PIDNamespace(-1); err == nil {
		t.Errorf("PIDNamespace(-1): want an error")
	}
}

func TestInitialPIDNamespace(t *testing.T) {
	for id, want := range map[string]bool{
		"4:4026531836":  true,
		"17:4026531836": true, // the nsfs device number is allocated at boot
		"4:4026531835":  false,
		"4:4026532301":  false,
		"4:04026531836": false,
		"4026531836":    false,
		":4026531836":   false,
		"":              false,
	} {
		if got := InitialPIDNamespace(id); got != want {
			t.Errorf("InitialPIDNamespace(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestParseStatState(t *testing.T) {
	for _, tt := range []struct {
		stat    string
		want    byte
		wantErr bool
	}{
		{statLine(123, "sleep", "4567"), 'S', false},
		{strings.Replace(statLine(123, "a) Z (b", "4567"), ") S ", ") Z ", 1), 'Z', false},
		{strings.Replace(statLine(123, "x) R 1", "4567"), ") S ", ") Z ", 1), 'Z', false},
		{strings.Replace(statLine(123, "sleep", "4567"), ") S ", ") ZZ ", 1), 0, true},
		{strings.Replace(statLine(123, "sleep", "4567"), ") S ", ") 5 ", 1), 0, true},
	} {
		got, err := parseStat("/proc/123/stat", 123, tt.stat)
		if tt.wantErr != (err != nil) || got.state != tt.want {
			t.Errorf("parseStat(%q) = %q, %v: want %q (error %v)", tt.stat, got.state, err, tt.want, tt.wantErr)
		}
	}
}

// A real zombie: a child killed and not yet waited for. Its pid is held
// and its start time unchanged, and it must not read as gone, nor as
// running.
func TestJudgeRealZombie(t *testing.T) {
	cmd, o := startSleeper(t, sleepPath(t))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not waited for: the child stays a zombie until cmd.Wait.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := System.ProcState(o.PID)
		if err != nil {
			t.Fatalf("ProcState(%d): %v", o.PID, err)
		}
		if st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d is in state %q 10s after SIGKILL, not a zombie", o.PID, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, reason := Judge(System, o)
	if got == Gone || got == Live {
		t.Errorf("Judge(zombie) = %s (%s), want held and not running", got, reason)
	}
	if want := fmt.Sprintf("pid %d exited, not yet reaped by its parent", o.PID); !strings.Contains(reason, want) {
		t.Errorf("Judge(zombie) reason %q does not say %q", reason, want)
	}
	cmd.Wait()
	if got, reason := Judge(System, o); got != Gone {
		t.Errorf("Judge(reaped zombie) = %s (%s), want gone", got, reason)
	}
}

// pidnsHelper is the helper mode that judges an owner from wherever it was
// started (a new PID namespace).
const pidnsHelper = "pidns"

// pidnsReport is what the pidns helper prints.
type pidnsReport struct {
	PID     int // getpid() in the helper's namespace
	SelfNS  string
	SelfErr string
	// Judge on System of the target as recorded, and with its namespace
	// dropped (as the reference records it).
	Judge, Unrecorded             State
	JudgeReason, UnrecordedReason string
	// Blind judges the target pretending to be in its namespace: what a
	// judge that ignored namespaces concluded from here.
	Blind       State
	BlindReason string
}

func pidnsHelperMain() int {
	var o Owner
	if err := json.Unmarshal([]byte(os.Getenv(helperTarget)), &o); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	r := pidnsReport{PID: os.Getpid()}
	if me, err := Self(System); err != nil {
		r.SelfErr = err.Error()
	} else {
		r.SelfNS = me.PIDNS
	}
	r.Judge, r.JudgeReason = Judge(System, o)
	unrecorded := o
	unrecorded.PIDNS = ""
	r.Unrecorded, r.UnrecordedReason = Judge(System, unrecorded)
	r.Blind, r.BlindReason = Judge(Override{Host: System, PIDNS: o.PIDNS}, o)
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 2
	}
	return 0
}

// runInNewPIDNamespace runs this test binary's pidns helper under
// unshare(1) with args, judging target, and returns its report.
func runInNewPIDNamespace(t *testing.T, target Owner, args ...string) pidnsReport {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("a new PID namespace needs root (CAP_SYS_ADMIN)")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot run unshare(1) (%v), and CI is set", err)
		}
		t.Skipf("cannot run unshare(1) (util-linux): %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tj, _ := json.Marshal(target)
	cmd := exec.Command(unshare, append(args, exe)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+pidnsHelper, helperTarget+"="+string(tj))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s%s", unshare, strings.Join(args, " "), err, out, stderr)
	}
	var r pidnsReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	t.Logf("helper in %v: %+v", args, r)
	return r
}

// TestJudgeFromAnotherPIDNamespace is the scenario on real
// namespaces: classify run under `unshare -p -f --mount-proc` judges an
// owner that is alive in the namespace it was recorded in (this test
// process). Without the namespace check the helper finds no such pid and
// says gone.
func TestJudgeFromAnotherPIDNamespace(t *testing.T) {
	me := self(t)
	r := runInNewPIDNamespace(t, me, "--pid", "--fork", "--mount-proc")
	if r.SelfErr != "" {
		t.Fatalf("Self in the new namespace: %s", r.SelfErr)
	}
	if r.SelfNS == me.PIDNS || InitialPIDNamespace(r.SelfNS) || !ValidPIDNamespace(r.SelfNS) {
		t.Fatalf("helper's namespace %q: want a valid non-initial one other than ours (%s)", r.SelfNS, me.PIDNS)
	}
	if r.PID == me.PID {
		t.Logf("the helper's pid equals ours (%d): the blind judge may see itself", r.PID)
	}
	if diff := cmp.Diff(Unknown, r.Judge); diff != "" {
		t.Errorf("Judge of a live owner from another namespace (-want +got):\n%s\nreason: %s", diff, r.JudgeReason)
	}
	for _, w := range []string{"another PID namespace", me.PIDNS, r.SelfNS, fmt.Sprintf("pid %d cannot be judged from here", me.PID)} {
		if !strings.Contains(r.JudgeReason, w) {
			t.Errorf("reason %q does not say %q", r.JudgeReason, w)
		}
	}
	if r.Unrecorded != Unknown || !strings.Contains(r.UnrecordedReason, "recorded without a PID namespace") || !strings.Contains(r.UnrecordedReason, "non-initial") {
		t.Errorf("Judge of an owner recorded without a namespace, from a container = %s (%s), want unknown", r.Unrecorded, r.UnrecordedReason)
	}
	// The test is sound only if judging the pid from there is wrong: the
	// owner is alive, yet its pid is not one of that namespace's.
	if r.Blind != Gone && r.PID != me.PID {
		t.Errorf("a namespace-blind judge in the helper said %s (%s); the scenario expects gone", r.Blind, r.BlindReason)
	}
	// Meanwhile, here, the owner is live.
	if got, reason := Judge(System, me); got != Live {
		t.Errorf("Judge(self) here = %s (%s), want live", got, reason)
	}
}

// A new PID namespace that still sees the host's /proc (no --mount-proc):
// every pid read through it names another process, so Self refuses and
// Judge fails closed.
func TestJudgeWithForeignProc(t *testing.T) {
	me := self(t)
	r := runInNewPIDNamespace(t, me, "--pid", "--fork")
	const want = "/proc is mounted for another PID namespace"
	if !strings.Contains(r.SelfErr, want) {
		t.Errorf("Self with a foreign /proc: error %q, want one saying %q", r.SelfErr, want)
	}
	for _, j := range []struct {
		s      State
		reason string
	}{{r.Judge, r.JudgeReason}, {r.Unrecorded, r.UnrecordedReason}} {
		if j.s != Unknown || !strings.Contains(j.reason, want) {
			t.Errorf("Judge with a foreign /proc = %s (%s), want unknown saying %q", j.s, j.reason, want)
		}
	}
}

// parseStat's edges: every one-letter state (both cases, both ends of the
// alphabet), exactly the 20 fields after the command it needs, and a line
// with no closing parenthesis.
func TestParseStatEdges(t *testing.T) {
	for _, st := range []string{"A", "Z", "a", "z", "R", "t"} {
		got, err := parseStat("/proc/123/stat", 123, strings.Replace(statLine(123, "x", "4567"), ") S ", ") "+st+" ", 1))
		if err != nil || got.state != st[0] || got.start != "4567" {
			t.Errorf("state %s: %+v, %v", st, got, err)
		}
	}
	// Exactly 20 fields after the command: the start time is the last.
	exact := "123 (x) S 1 100 100 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 4567\n"
	if got, err := parseStat("/proc/123/stat", 123, exact); err != nil || got.start != "4567" {
		t.Errorf("20 fields: %+v, %v; want start 4567", got, err)
	}
	for _, bad := range []string{
		"123 (x) S 1 100 100 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1\n",        // 19 fields
		"123 (x S 1 100 100 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 4567\n",  // no ')'
		"124 (x) S 1 100 100 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 4567\n", // another pid
	} {
		if got, err := parseStat("/proc/123/stat", 123, bad); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, got)
		}
	}
}

// probeErr is a procTable whose start times cannot be read and whose
// signal probe answers err.
type probeErr struct {
	procTable
	err error
}

func (probeErr) StartTime(pid int) (string, error) {
	return "", &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrPermission}
}
func (h probeErr) Signal0(int) error { return h.err }

// With the start time unreadable, the signal probe decides only "gone"
// (no such process); a process that exists (the probe succeeds, or is
// denied) and a probe that fails otherwise are unknown, each saying why.
func TestJudgeStartUnreadable(t *testing.T) {
	base := procTable{boot: goodBoot, ns: initialNS}
	for _, tc := range []struct {
		err    error
		want   State
		reason string
	}{
		{unix.ESRCH, Gone, "no process 4100"},
		{nil, Unknown, "pid 4100 exists but its start time is unreadable"},
		{unix.EPERM, Unknown, "pid 4100 exists but its start time is unreadable"},
		{unix.EINVAL, Unknown, "cannot read pid 4100"},
	} {
		got, reason := Judge(probeErr{base, tc.err}, Owner{4100, "500", goodBoot, initialNS})
		if got != tc.want || !strings.Contains(reason, tc.reason) {
			t.Errorf("probe %v: Judge = %s (%s), want %s (%s)", tc.err, got, reason, tc.want, tc.reason)
		}
	}
}

// Linux allocates pids below pid_max, which is at most 2^22: a recorded pid
// of 2^22 or more names no process that could ever exist, and is invalid.
func TestJudgePIDBounds(t *testing.T) {
	h := procTable{boot: goodBoot, ns: initialNS}
	for pid, want := range map[int]State{0: Invalid, -1: Invalid, 1 << 22: Invalid, 1<<22 + 1: Invalid, 1<<22 - 1: Gone} {
		if got, reason := Judge(h, Owner{pid, "500", goodBoot, initialNS}); got != want {
			t.Errorf("pid %d: Judge = %s (%s), want %s", pid, got, reason, want)
		}
	}
}
