package hostid

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/claimstore/claimstore/internal/testbin"
)

const (
	helperEnv    = "HOSTID_HELPER"
	helperTarget = "HOSTID_HELPER_TARGET" // JSON Owner to probe
	otherBoot    = "00000000-0000-4000-8000-000000000000"
	nobodyID     = 65534
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "1":
		os.Exit(helperMain())
	case pidnsHelper:
		os.Exit(pidnsHelperMain())
	}
	os.Exit(m.Run())
}

// helperReport is what the unprivileged helper process prints.
type helperReport struct {
	UID         int
	Signal0     string // errno name, or "" for success
	Judge       State  // Judge on System
	JudgeHidden State  // Judge with /proc hiding the pid (hidepid)
	Reason      string
}

// helperMain runs in a copy of the test binary started as another user: it
// probes the owner given in its environment and reports what it saw.
func helperMain() int {
	var o Owner
	if err := json.Unmarshal([]byte(os.Getenv(helperTarget)), &o); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	r := helperReport{UID: os.Getuid()}
	if err := System.Signal0(o.PID); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Signal0 = unix.ErrnoName(errno)
		} else {
			r.Signal0 = err.Error()
		}
	}
	r.Judge, _ = Judge(System, o)
	r.JudgeHidden, r.Reason = Judge(hiddenProc{System}, o)
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 2
	}
	return 0
}

// hiddenProc is a Host whose /proc shows no process, as with hidepid=2 for
// another user's process: Judge must fall back to the signal probe.
type hiddenProc struct{ Host }

func (hiddenProc) StartTime(pid int) (string, error) {
	return "", &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrNotExist}
}

// deniedProc is a Host whose /proc refuses to be read.
type deniedProc struct{ Host }

func (deniedProc) StartTime(pid int) (string, error) {
	return "", &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: fs.ErrPermission}
}

// startSleeper starts a child that runs until the test ends, and returns
// its recorded identity.
func startSleeper(t *testing.T, path string) (*exec.Cmd, Owner) {
	t.Helper()
	cmd := exec.Command(path, "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, recordOwner(t, cmd.Process.Pid)
}

func recordOwner(t *testing.T, pid int) Owner {
	t.Helper()
	start, err := System.StartTime(pid)
	if err != nil {
		t.Fatalf("StartTime(%d): %v", pid, err)
	}
	boot, err := System.BootID()
	if err != nil {
		t.Fatalf("BootID: %v", err)
	}
	ns, err := System.PIDNamespace(pid)
	if err != nil {
		t.Fatalf("PIDNamespace(%d): %v", pid, err)
	}
	return Owner{PID: pid, Start: start, Boot: boot, PIDNS: ns}
}

func sleepPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary: %v", err)
	}
	return p
}

func self(t *testing.T) Owner {
	t.Helper()
	o, err := Self(System)
	if err != nil {
		t.Fatalf("Self: %v", err)
	}
	return o
}

func TestSelf(t *testing.T) {
	o := self(t)
	if o.PID != os.Getpid() || !canonicalUint(o.Start) || !isBootID(o.Boot) {
		t.Fatalf("Self = %+v: want this pid, a decimal start and a boot id", o)
	}
	if got, reason := Judge(System, o); got != Live {
		t.Fatalf("Judge(Self) = %s (%s), want live", got, reason)
	}
}

func TestJudgeLiveChild(t *testing.T) {
	_, o := startSleeper(t, sleepPath(t))
	if got, reason := Judge(System, o); got != Live {
		t.Fatalf("Judge(running child %+v) = %s (%s), want live", o, got, reason)
	}
}

func TestJudgeReapedChild(t *testing.T) {
	cmd, o := startSleeper(t, sleepPath(t))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // reaped: the pid is free
	got, reason := Judge(System, o)
	if got != Gone {
		t.Fatalf("Judge(reaped child %+v) = %s (%s), want gone", o, got, reason)
	}
	t.Logf("reaped child: %s", reason)
}

// A process whose command name holds parentheses and spaces must still be
// parsed from the real /proc line.
func TestJudgeWeirdComm(t *testing.T) {
	dir := t.TempDir()
	weird := filepath.Join(dir, "x) (y) z)) 1 2")
	copyFile(t, sleepPath(t), weird, 0o755)
	cmd, o := startSleeper(t, weird)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stat), "(x) (y) z)) 1 2)") {
		t.Fatalf("child's comm is not the weird name: %q", stat)
	}
	want := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))[19]
	if diff := cmp.Diff(want, o.Start); diff != "" {
		t.Fatalf("start time (-want +got):\n%s", diff)
	}
	if got, reason := Judge(System, o); got != Live {
		t.Fatalf("Judge = %s (%s), want live", got, reason)
	}
}

func TestJudge(t *testing.T) {
	me := self(t)
	start, _ := strconv.ParseUint(me.Start, 10, 64)
	tests := []struct {
		name string
		host Host
		o    Owner
		want State
	}{
		{"self", System, me, Live},
		{"pid reused", System, Owner{me.PID, strconv.FormatUint(start+1, 10), me.Boot, me.PIDNS}, Gone},
		{"another boot", System, Owner{me.PID, me.Start, otherBoot, me.PIDNS}, Gone},
		{"host moved to another boot", Override{Host: System, Boot: otherBoot}, me, Gone},
		{"no start recorded", System, Owner{me.PID, "", me.Boot, me.PIDNS}, Unknown},
		{"no boot recorded", System, Owner{me.PID, me.Start, "", me.PIDNS}, Unknown},
		{"no boot recorded, pid reused", System, Owner{me.PID, strconv.FormatUint(start+1, 10), "", me.PIDNS}, Gone},
		{"proc unreadable", deniedProc{System}, me, Unknown},
		{"proc hides live pid", hiddenProc{System}, me, Unknown},
		{"boot id unreadable", FromFiles(nil, filepath.Join(t.TempDir(), "missing")), me, Unknown},
		{"pid zero", System, Owner{0, me.Start, me.Boot, me.PIDNS}, Invalid},
		{"pid negative", System, Owner{-1, me.Start, me.Boot, me.PIDNS}, Invalid},
		{"pid beyond limit", System, Owner{1 << 23, me.Start, me.Boot, me.PIDNS}, Invalid},
		{"start not decimal", System, Owner{me.PID, "12a", me.Boot, me.PIDNS}, Invalid},
		{"start negative", System, Owner{me.PID, "-5", me.Boot, me.PIDNS}, Invalid},
		{"start signed", System, Owner{me.PID, "+" + me.Start, me.Boot, me.PIDNS}, Invalid},
		{"start leading zero", System, Owner{me.PID, "0" + me.Start, me.Boot, me.PIDNS}, Invalid},
		{"start padded", System, Owner{me.PID, " " + me.Start, me.Boot, me.PIDNS}, Invalid},
		{"boot uppercase", System, Owner{me.PID, me.Start, strings.ToUpper(me.Boot), me.PIDNS}, Invalid},
		{"boot malformed", System, Owner{me.PID, me.Start, "not-a-boot", me.PIDNS}, Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Judge(tt.host, tt.o)
			if reason == "" {
				t.Errorf("Judge(%+v) gave no reason", tt.o)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Judge(%+v) (-want +got):\n%s\nreason: %s", tt.o, diff, reason)
			}
		})
	}
}

// A pid that is free on this machine, found by starting and reaping a
// child, probed through a /proc that hides it: only the signal probe can
// answer, and ESRCH is proof.
func TestJudgeHiddenGonePid(t *testing.T) {
	cmd, o := startSleeper(t, sleepPath(t))
	cmd.Process.Kill()
	cmd.Wait()
	if got, reason := Judge(hiddenProc{System}, o); got != Gone {
		t.Fatalf("Judge = %s (%s), want gone", got, reason)
	}
	if got, reason := Judge(deniedProc{System}, o); got != Gone {
		t.Fatalf("Judge through unreadable /proc = %s (%s), want gone (ESRCH)", got, reason)
	}
}

// A process owned by root, probed by an unprivileged process: kill(pid, 0)
// answers EPERM, which means the pid exists, so the owner is never gone.
func TestJudgeOtherUserEPERM(t *testing.T) {
	if os.Geteuid() != 0 {
		// CI runs as root: there, not being able to run this is a failure.
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to start a helper as another user, and CI is set")
		}
		t.Skip("needs root to start a helper as another user")
	}
	_, o := startSleeper(t, sleepPath(t))
	bin := testbin.ForOtherUser(t)
	target, _ := json.Marshal(o)
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperTarget+"="+string(target))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID, Groups: []uint32{}},
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("helper as uid %d: %v\n%s%s", nobodyID, err, out, stderr)
	}
	var got helperReport
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	t.Logf("helper report: %+v", got)
	if got.UID != nobodyID {
		t.Fatalf("helper ran as uid %d, want %d", got.UID, nobodyID)
	}
	if diff := cmp.Diff("EPERM", got.Signal0); diff != "" {
		t.Errorf("kill(root's pid, 0) as nobody (-want +got):\n%s", diff)
	}
	if got.Judge == Gone {
		t.Errorf("Judge as nobody = gone, want live or unknown")
	}
	if diff := cmp.Diff(Unknown, got.JudgeHidden); diff != "" {
		t.Errorf("Judge through EPERM (-want +got):\n%s\nreason: %s", diff, got.Reason)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	if err := testbin.Copy(from, to, mode); err != nil {
		t.Fatal(err)
	}
}

// statLine builds a /proc/<pid>/stat line with the given comm and start
// time in field 22, the other fields plausible.
func statLine(pid int, comm, start string) string {
	fields := []string{"S", "1", "100", "100", "0", "-1", "4194560", "120", "0", "0", "0",
		"0", "0", "0", "0", "20", "0", "1", "0", start, "8654848", "200", "18446744073709551615"}
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(fields, " "))
}

func TestParseStartTime(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    string
		wantErr bool
	}{
		{"plain", statLine(123, "sleep", "4567"), "4567", false},
		{"spaces", statLine(123, "a b c", "4567"), "4567", false},
		{"parens", statLine(123, "a) b))", "4567"), "4567", false},
		{"fake fields in comm", statLine(123, "x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 999", "4567"), "4567", false},
		{"open paren", statLine(123, "((", "4567"), "4567", false},
		{"empty comm", statLine(123, "", "4567"), "4567", false},
		{"newline in comm", statLine(123, "a\nb", "4567"), "4567", false},
		{"zero start", statLine(123, "init", "0"), "0", false},
		{"no trailing newline", strings.TrimSuffix(statLine(123, "sleep", "4567"), "\n"), "4567", false},
		{"wrong pid", statLine(124, "sleep", "4567"), "", true},
		{"no parens", "123 sleep S 1 2 3", "", true},
		{"no close paren", "123 (sleep S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", "", true},
		{"too few fields", "123 (sleep) S 1 2 3\n", "", true},
		{"start not numeric", statLine(123, "sleep", "12x"), "", true},
		{"start negative", statLine(123, "sleep", "-1"), "", true},
		{"start leading zero", statLine(123, "sleep", "0123"), "", true},
		{"start overflow", statLine(123, "sleep", "99999999999999999999"), "", true},
		{"empty", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const name = "/proc/123/stat"
			got, err := parseStartTime(name, 123, tt.stat)
			if tt.wantErr {
				var pe *fs.PathError
				if !errors.As(err, &pe) || pe.Path != name {
					t.Fatalf("parseStartTime(%q) = %q, %v: want a *fs.PathError for %s", tt.stat, got, err, name)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseStartTime(%q): %v", tt.stat, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseStartTime(%q) (-want +got):\n%s", tt.stat, diff)
			}
		})
	}
}

func TestStartTimeNoProcess(t *testing.T) {
	cmd, o := startSleeper(t, sleepPath(t))
	cmd.Process.Kill()
	cmd.Wait()
	_, err := System.StartTime(o.PID)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("StartTime(reaped pid) error = %v, want fs.ErrNotExist", err)
	}
}

const (
	goodMachine = "0123456789abcdef0123456789abcdef"
	fallbackID  = "fedcba9876543210fedcba9876543210"
	goodBoot    = "01234567-89ab-cdef-0123-456789abcdef"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMachineID(t *testing.T) {
	tests := []struct {
		name    string
		primary *string // nil: file missing
		want    string
	}{
		{"good", ptr(goodMachine + "\n"), goodMachine},
		{"good without newline", ptr(goodMachine), goodMachine},
		{"uppercase", ptr(strings.ToUpper(goodMachine) + "\n"), fallbackID},
		{"short", ptr(goodMachine[:31] + "\n"), fallbackID},
		{"long", ptr(goodMachine + "0\n"), fallbackID},
		{"uninitialized", ptr("uninitialized\n"), fallbackID},
		{"padded", ptr(" " + goodMachine + "\n"), fallbackID},
		{"two newlines", ptr(goodMachine + "\n\n"), fallbackID},
		{"huge", ptr(strings.Repeat(goodMachine, 100)), fallbackID},
		{"empty", ptr(""), fallbackID},
		{"missing", nil, fallbackID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			primary := filepath.Join(dir, "machine-id")
			if tt.primary != nil {
				writeFile(t, dir, "machine-id", *tt.primary)
			}
			fallback := writeFile(t, dir, "dbus-machine-id", fallbackID+"\n")
			got, err := FromFiles([]string{primary, fallback}, "").MachineID()
			if err != nil {
				t.Fatalf("MachineID: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MachineID (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMachineIDErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "machine-id", "UNINITIALIZED\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name  string
		files []string
		paths []string // every path the error must name
	}{
		{"one malformed", []string{bad}, []string{bad}},
		{"one missing", []string{missing}, []string{missing}},
		{"malformed then missing", []string{bad, missing}, []string{bad, missing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := FromFiles(tt.files, "").MachineID()
			if err == nil || id != "" {
				t.Fatalf("MachineID = %q, %v: want an error and no id", id, err)
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != tt.paths[0] {
				t.Fatalf("MachineID error %v: want a *fs.PathError for %s", err, tt.paths[0])
			}
			for _, p := range tt.paths {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("MachineID error %q does not name %s", err, p)
				}
			}
		})
	}
	if _, err := FromFiles([]string{}, "").MachineID(); err == nil {
		t.Errorf("MachineID with no files: want an error")
	}
}

func TestBootID(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content *string
		want    string
		wantErr bool
	}{
		{"good", ptr(goodBoot + "\n"), goodBoot, false},
		{"uppercase", ptr(strings.ToUpper(goodBoot) + "\n"), "", true},
		{"no dashes", ptr(strings.ReplaceAll(goodBoot, "-", "") + "\n"), "", true},
		{"empty", ptr(""), "", true},
		{"missing", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if tt.content != nil {
				writeFile(t, dir, tt.name, *tt.content)
			}
			got, err := FromFiles(nil, p).BootID()
			if tt.wantErr {
				var pe *fs.PathError
				if !errors.As(err, &pe) || pe.Path != p || got != "" {
					t.Fatalf("BootID = %q, %v: want a *fs.PathError for %s", got, err, p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("BootID (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSystemIDs(t *testing.T) {
	boot, err := System.BootID()
	if err != nil {
		t.Fatalf("BootID: %v", err)
	}
	raw, err := os.ReadFile(BootIDFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(raw)), boot); diff != "" {
		t.Errorf("BootID (-want +got):\n%s", diff)
	}
	// The machine id may legitimately be absent in a container; when it is
	// there, System must read it.
	m, err := System.MachineID()
	if err != nil {
		t.Logf("MachineID: %v", err)
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Errorf("MachineID error %v is not a *fs.PathError", err)
		}
	} else if !isMachineID(m) {
		t.Errorf("MachineID = %q: not 32 lowercase hex digits", m)
	}
}

func TestOverride(t *testing.T) {
	sysBoot, err := System.BootID()
	if err != nil {
		t.Fatal(err)
	}
	o := Override{Host: FromFiles([]string{writeFile(t, t.TempDir(), "m", goodMachine+"\n")}, ""), Boot: otherBoot}
	type ids struct{ Machine, Boot string }
	m, _ := o.MachineID()
	b, _ := o.BootID()
	if diff := cmp.Diff(ids{goodMachine, otherBoot}, ids{m, b}); diff != "" {
		t.Errorf("Override boot only (-want +got):\n%s", diff)
	}
	o = Override{Host: System, Machine: fallbackID}
	m, _ = o.MachineID()
	b, _ = o.BootID()
	if diff := cmp.Diff(ids{fallbackID, sysBoot}, ids{m, b}); diff != "" {
		t.Errorf("Override machine only (-want +got):\n%s", diff)
	}
}

func ptr(s string) *string { return &s }

// FuzzIDForms: the hand-written id checks accept exactly what the regular
// expressions of the documented forms accept.
func FuzzIDForms(f *testing.F) {
	for _, s := range []string{"", "0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789abcdef", "11111111-2222-3333-4444-555555555555", "11111111-2222-3333-4444-55555555555g", "11111111_2222-3333-4444-555555555555", "11111111-2222-3333-4444-5555555555555"} {
		f.Add(s)
	}
	boot := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	machine := regexp.MustCompile(`^[0-9a-f]{32}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isBootID(s), boot.MatchString(s); got != want {
			t.Errorf("isBootID(%q) = %v, want %v", s, got, want)
		}
		if got, want := isMachineID(s), machine.MatchString(s); got != want {
			t.Errorf("isMachineID(%q) = %v, want %v", s, got, want)
		}
	})
}

// A FIFO where an id file belongs (a test's CLAIMCTL_TEST_MACHINE_ID_FILE,
// a damaged /etc) is refused at once: reading it would wait forever.
func TestIDFileNeverBlocks(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "machine-id")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := FromFiles([]string{fifo}, "").MachineID()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("MachineID from a FIFO: %v, want an error naming it as a FIFO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("MachineID blocks on a FIFO")
	}
}

// nsUnreadable is the real host with every PID namespace unreadable.
type nsUnreadable struct{ Host }

func (nsUnreadable) PIDNamespace(pid int) (string, error) {
	return "", &fs.PathError{Op: "stat", Path: "/proc/" + strconv.Itoa(pid) + "/ns/pid", Err: syscall.EACCES}
}

// TestIdentify: a process is identified as a judge will judge it (live,
// with its namespace); a reaped one is no process; and an owner whose PID
// namespace cannot be read is refused, never recorded without it.
func TestIdentify(t *testing.T) {
	cmd, want := startSleeper(t, sleepPath(t))
	got, err := Identify(System, cmd.Process.Pid)
	if err != nil || got != want {
		t.Fatalf("Identify(child) = %+v, %v; want %+v", got, err, want)
	}
	if st, reason := Judge(System, got); st != Live {
		t.Errorf("Judge(Identify(child)) = %s (%s), want live", st, reason)
	}
	if _, err := Identify(nsUnreadable{System}, cmd.Process.Pid); err == nil {
		t.Error("Identify with the namespace unreadable recorded an owner without it")
	} else if ie := (*IdentifyError)(nil); !errors.As(err, &ie) || ie.Part != PartPIDNS || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Identify with the namespace unreadable: %v; want an *IdentifyError of the PID namespace wrapping EACCES", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := Identify(System, cmd.Process.Pid); err == nil {
		t.Error("Identify of a reaped child succeeded")
	} else if ie := (*IdentifyError)(nil); !errors.As(err, &ie) || ie.Part != PartStart || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Identify of a reaped child: %v; want an *IdentifyError of the start time wrapping fs.ErrNotExist", err)
	}
}
