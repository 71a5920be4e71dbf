package unitprobe_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/internal/systemdtest"
	"github.com/claimstore/claimstore/unitprobe"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMain(m *testing.M) { systemdtest.Main(m) }

// manager returns the package's real systemd user manager (skipping, or
// failing under CI, when it could not start) and options that reach it.
func manager(t *testing.T) (*systemdtest.Manager, *unitprobe.Options) {
	t.Helper()
	m := systemdtest.Shared(t)
	return m, &unitprobe.Options{User: true, Address: m.Address, Timeout: 10 * time.Second}
}

func lookup(t *testing.T, name string, opts *unitprobe.Options) unitprobe.Result {
	t.Helper()
	r, err := unitprobe.Lookup(context.Background(), name, opts)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", name, err)
	}
	return r
}

// waitFor looks name up until cond holds, for at most 10s, and returns the
// last result.
func waitFor(t *testing.T, name string, opts *unitprobe.Options, cond func(unitprobe.Result) bool) unitprobe.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := lookup(t, name, opts)
		if cond(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// summary is what the tests compare: the answer without the free text.
type summary struct {
	State                            unitprobe.State
	LoadState, ActiveState, SubState string
	HasMainPID, HasErr               bool
}

func sum(r unitprobe.Result) summary {
	return summary{r.State, r.LoadState, r.ActiveState, r.SubState, r.MainPID != 0, r.Err != nil}
}

func TestRunningUnit(t *testing.T) {
	m, opts := manager(t)
	name := m.UnitName("running")
	if err := m.Run(name, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", name) })
	r := lookup(t, name, opts)
	want := summary{unitprobe.Present, "loaded", "active", "running", true, false}
	if diff := cmp.Diff(want, sum(r)); diff != "" {
		t.Fatalf("Lookup(%s) (-want +got):\n%s\n%+v", name, diff, r)
	}
	// The main pid is systemd's fork, named "(sleep)" until it execs
	// sleep: wait (bounded) for the exec.
	var comm []byte
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		comm, err = os.ReadFile(fmt.Sprintf("/proc/%d/comm", r.MainPID))
		if err == nil && strings.TrimSpace(string(comm)) == "sleep" || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
		t.Errorf("MainPID %d is not the unit's sleep: comm %q, %v", r.MainPID, comm, err)
	}
	if r.Name != name || !strings.Contains(r.Reason, name) {
		t.Errorf("Result names %q, reason %q: want both to name %s", r.Name, r.Reason, name)
	}
	t.Logf("%+v", r)

	// Stopped, the transient unit is collected and reads as absent.
	if _, err := m.Systemctl("stop", name); err != nil {
		t.Fatal(err)
	}
	r = waitFor(t, name, opts, func(r unitprobe.Result) bool { return r.State != unitprobe.Present })
	if diff := cmp.Diff(summary{unitprobe.Absent, "not-found", "inactive", "dead", false, false}, sum(r)); diff != "" {
		t.Errorf("after stop (-want +got):\n%s\n%+v", diff, r)
	}
}

// A unit that ran to success is collected: the manager forgets it.
func TestExitedUnitIsCollected(t *testing.T) {
	m, opts := manager(t)
	name := m.UnitName("exited")
	marker := filepath.Join(t.TempDir(), "ran")
	if err := m.Run(name, "touch", marker); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, name, opts, func(r unitprobe.Result) bool { return r.State == unitprobe.Absent })
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the unit never ran: %v", err)
	}
	if diff := cmp.Diff(summary{unitprobe.Absent, "not-found", "inactive", "dead", false, false}, sum(r)); diff != "" {
		t.Fatalf("Lookup(%s) (-want +got):\n%s\n%+v", name, diff, r)
	}
}

// A unit that failed stays loaded (CollectMode=inactive, the default) until
// it is reset; with --collect it is forgotten like a successful one.
func TestFailedUnit(t *testing.T) {
	m, opts := manager(t)
	name := m.UnitName("failed")
	if err := m.Run(name, "false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("reset-failed", name) })
	r := waitFor(t, name, opts, func(r unitprobe.Result) bool { return r.ActiveState == "failed" })
	if diff := cmp.Diff(summary{unitprobe.Present, "loaded", "failed", "failed", false, false}, sum(r)); diff != "" {
		t.Fatalf("Lookup(%s) (-want +got):\n%s\n%+v", name, diff, r)
	}
	// Still there a while later: nothing collects it on its own.
	time.Sleep(300 * time.Millisecond)
	if r := lookup(t, name, opts); r.State != unitprobe.Present || r.ActiveState != "failed" {
		t.Fatalf("failed unit after 300ms: %+v", r)
	}
	if _, err := m.Systemctl("reset-failed", name); err != nil {
		t.Fatal(err)
	}
	r = waitFor(t, name, opts, func(r unitprobe.Result) bool { return r.State == unitprobe.Absent })
	if r.State != unitprobe.Absent {
		t.Fatalf("after reset-failed: %+v, want absent", r)
	}

	collected := m.UnitName("failed-collect")
	marker := filepath.Join(t.TempDir(), "ran")
	if err := m.Run(collected, "--collect", "sh", "-c", "touch "+marker+"; exit 3"); err != nil {
		t.Fatal(err)
	}
	r = waitFor(t, collected, opts, func(r unitprobe.Result) bool { return r.State == unitprobe.Absent })
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the collected unit never ran: %v", err)
	}
	if r.State != unitprobe.Absent {
		t.Fatalf("failed unit with --collect: %+v, want absent", r)
	}
}

// A unit that keeps running after its main process exited stays present.
func TestRemainAfterExitUnit(t *testing.T) {
	m, opts := manager(t)
	name := m.UnitName("remain")
	if err := m.Run(name, "-p", "RemainAfterExit=yes", "true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", name) })
	r := waitFor(t, name, opts, func(r unitprobe.Result) bool { return r.SubState == "exited" })
	if diff := cmp.Diff(summary{unitprobe.Present, "loaded", "active", "exited", false, false}, sum(r)); diff != "" {
		t.Fatalf("Lookup(%s) (-want +got):\n%s\n%+v", name, diff, r)
	}
}

func TestNeverStarted(t *testing.T) {
	m, opts := manager(t)
	for _, name := range []string{
		m.UnitName("never"),
		"sdt-never@" + strconv.Itoa(os.Getpid()) + ".service",
		"sdt-never-" + strconv.Itoa(os.Getpid()) + ".scope",
	} {
		r := lookup(t, name, opts)
		if diff := cmp.Diff(summary{unitprobe.Absent, "not-found", "inactive", "dead", false, false}, sum(r)); diff != "" {
			t.Errorf("Lookup(%s) (-want +got):\n%s\n%+v", name, diff, r)
		}
	}
}

// A Prober answers many names over one connection, in order.
func TestProberMany(t *testing.T) {
	m, opts := manager(t)
	running := m.UnitName("many-running")
	if err := m.Run(running, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", running) })
	p := unitprobe.NewProber(opts)
	defer p.Close()

	// More names than one batch, the running one in the middle.
	names := make([]string, 600)
	for i := range names {
		names[i] = m.UnitName(fmt.Sprintf("many-%d", i))
	}
	names[300] = running
	rs, err := p.LookupMany(context.Background(), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(names) {
		t.Fatalf("%d results for %d names", len(rs), len(names))
	}
	for i, r := range rs {
		want := unitprobe.Absent
		if i == 300 {
			want = unitprobe.Present
		}
		if r.Name != names[i] || r.State != want {
			t.Fatalf("result %d = %+v, want %s for %s", i, r, want, names[i])
		}
	}

	// Concurrent lookups share the connection.
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Lookup(context.Background(), running)
			if err != nil || r.State != unitprobe.Present || r.MainPID == 0 {
				bad.Add(1)
				t.Errorf("concurrent Lookup = %+v, %v", r, err)
			}
		}()
	}
	wg.Wait()
}

// A manager that stops answering (SIGSTOP) while its bus still accepts the
// call: the lookup is Unknown by the deadline, and the Prober recovers
// once the manager answers again.
func TestHungManager(t *testing.T) {
	m, opts := manager(t)
	name := m.UnitName("hung")
	if err := m.Run(name, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", name) })
	p := unitprobe.NewProber(opts)
	defer p.Close()
	if r, _ := p.Lookup(context.Background(), name); r.State != unitprobe.Present {
		t.Fatalf("before stopping the manager: %+v", r)
	}

	if err := m.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			m.Signal(syscall.SIGCONT)
		}
	}
	defer cont()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := p.Lookup(ctx, name)
	took := time.Since(start)
	cont()
	if err != nil {
		t.Fatal(err)
	}
	if r.State != unitprobe.Unknown || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("Lookup on a stopped manager = %+v, want unknown with a deadline error", r)
	}
	if took > 2*time.Second {
		t.Errorf("Lookup took %v with a 200ms deadline", took)
	}
	t.Logf("hung manager: %s after %v", r.Reason, took)

	r = waitForProber(t, p, name, func(r unitprobe.Result) bool { return r.State == unitprobe.Present })
	if r.State != unitprobe.Present {
		t.Errorf("after SIGCONT: %+v, want present", r)
	}
}

func waitForProber(t *testing.T, p *unitprobe.Prober, name string, cond func(unitprobe.Result) bool) unitprobe.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := p.Lookup(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if cond(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A bus with no systemd on it: the manager's bus, asked as if it were the
// bus of a manager that is not there, is modelled by a socket nobody
// listens on, a path with no socket, and a socket that is not D-Bus.
func TestDeadBus(t *testing.T) {
	dir := t.TempDir()
	refused := filepath.Join(dir, "refused.sock")
	l, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the socket file stays; connecting is refused

	garbage := filepath.Join(dir, "garbage.sock")
	serve(t, garbage, func(c net.Conn) { c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n")); c.Close() })

	for _, tt := range []struct{ name, addr string }{
		{"no socket", "unix:path=" + filepath.Join(dir, "missing.sock")},
		{"refused", "unix:path=" + refused},
		{"not dbus", "unix:path=" + garbage},
		{"bad address", "nonsense"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r, err := unitprobe.Lookup(context.Background(), "x.service", &unitprobe.Options{User: true, Address: tt.addr, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			want := unitprobe.Result{Name: "x.service", State: unitprobe.Unknown}
			if diff := cmp.Diff(want, r, cmpopts.IgnoreFields(unitprobe.Result{}, "Reason", "Err")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if r.Err == nil || r.Reason == "" {
				t.Errorf("Result %+v: want the cause kept in Err and a Reason", r)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v", took)
			}
			t.Logf("%s: %s", tt.name, r.Reason)
		})
	}
}

// A peer that accepts and then never answers: at every stage of the
// connection (handshake, Hello) the lookup ends at the deadline.
func TestDeadlineOnSilentPeer(t *testing.T) {
	dir := t.TempDir()
	silent := filepath.Join(dir, "silent.sock")
	serve(t, silent, func(c net.Conn) { hold(t, c) })
	authOnly := filepath.Join(dir, "auth-only.sock")
	var begun atomic.Int32
	serve(t, authOnly, func(c net.Conn) { authThenHold(t, c, &begun) })

	for _, tt := range []struct{ name, addr string }{
		{"silent", "unix:path=" + silent},
		{"answers auth, not Hello", "unix:path=" + authOnly},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := unitprobe.NewProber(&unitprobe.Options{User: true, Address: tt.addr})
			defer p.Close()
			for i := 0; i < 2; i++ { // again on the same Prober
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				start := time.Now()
				r, err := p.Lookup(ctx, "x.service")
				took := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != unitprobe.Unknown || !errors.Is(r.Err, context.DeadlineExceeded) {
					t.Errorf("Lookup = %+v, want unknown with a deadline error", r)
				}
				if took > time.Second {
					t.Errorf("Lookup took %v with a 200ms deadline", took)
				}
				if took < 150*time.Millisecond {
					t.Errorf("Lookup answered after %v, before the 200ms deadline: %+v", took, r)
				}
				t.Logf("%s after %v", r.Reason, took)
			}
		})
	}
	if n := begun.Load(); n < 2 {
		t.Errorf("the auth-only peer saw BEGIN %d times, want 2: the hang was not after the handshake", n)
	}

	// Options.Timeout bounds a lookup without a context deadline.
	start := time.Now()
	r, _ := unitprobe.Lookup(context.Background(), "x.service", &unitprobe.Options{Address: "unix:path=" + silent, Timeout: 200 * time.Millisecond})
	if took := time.Since(start); r.State != unitprobe.Unknown || took > time.Second {
		t.Errorf("Lookup with Options.Timeout 200ms = %+v after %v", r, took)
	}
}

// serve listens on path and runs handle for every connection until the
// test ends.
func serve(t *testing.T, path string, handle func(net.Conn)) *atomic.Int32 {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				go func() { <-done; c.Close() }()
				handle(c)
			}()
		}
	}()
	return &conns
}

// hold reads and discards whatever the peer sends and never answers.
func hold(t *testing.T, c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// authThenHold completes the D-Bus authentication exchange (EXTERNAL,
// unix fd negotiation) and then goes silent.
func authThenHold(t *testing.T, c net.Conn, begun *atomic.Int32) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(strings.TrimLeft(line, "\x00"), "\r\n")
		switch {
		case line == "AUTH":
			c.Write([]byte("REJECTED EXTERNAL\r\n"))
		case strings.HasPrefix(line, "AUTH EXTERNAL"):
			c.Write([]byte("OK 0123456789abcdef0123456789abcdef\r\n"))
		case line == "NEGOTIATE_UNIX_FD":
			c.Write([]byte("AGREE_UNIX_FD\r\n"))
		case line == "BEGIN":
			begun.Add(1)
			hold(t, c)
			return
		default:
			c.Write([]byte("ERROR\r\n"))
		}
	}
}

func TestValidateName(t *testing.T) {
	long := strings.Repeat("a", unitprobe.MaxNameLen-len(".service")) + ".service"
	valid := []string{
		"a.service", "writer-7.service", "foo@bar.service", "foo@bar@baz.service",
		"a:b_c-d.e\\x2df.scope", "session-1.scope", "x.socket", "x.target", "x.timer",
		"x.mount", "x.slice", "x.path", "x.swap", "x.device", "x.automount", long,
	}
	invalid := []string{
		"", "foo", "foo.", ".service", "foo.bogus", "foo.Service", "@x.service",
		"foo@.service", "foo bar.service", "foo/bar.service", "föö.service",
		"foo.service\n", "foo\x00.service", "foo*.service", "a" + long,
	}
	for _, n := range valid {
		if err := unitprobe.ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range invalid {
		err := unitprobe.ValidateName(n)
		if !errors.Is(err, unitprobe.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
}

// An invalid name is an error, and nothing is asked.
func TestInvalidNameAsksNothing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus.sock")
	conns := serve(t, sock, func(c net.Conn) { hold(t, c) })
	opts := &unitprobe.Options{User: true, Address: "unix:path=" + sock, Timeout: time.Second}
	for _, n := range []string{"", "foo@.service", "../x.service"} {
		start := time.Now()
		r, err := unitprobe.Lookup(context.Background(), n, opts)
		if !errors.Is(err, unitprobe.ErrInvalidName) {
			t.Errorf("Lookup(%q) = %+v, %v; want ErrInvalidName", n, r, err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("Lookup(%q) took %v: it must not ask anything", n, took)
		}
	}
	p := unitprobe.NewProber(opts)
	defer p.Close()
	if rs, err := p.LookupMany(context.Background(), []string{"ok.service", "bad"}); err == nil || rs != nil {
		t.Errorf("LookupMany with one bad name = %v, %v; want an error and no results", rs, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections were made for invalid names", n)
	}
}

// A nil *Options means the system manager; where there is none (this
// test's machine may or may not have one) the answer is never an error.
func TestSystemManagerDefault(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "none"))
	r, err := unitprobe.Lookup(context.Background(), "x.service", nil)
	if err != nil || r.State != unitprobe.Unknown || !strings.Contains(r.Reason, "system manager") {
		t.Errorf("Lookup with nil options and no system bus = %+v, %v; want unknown naming the system manager", r, err)
	}
	if got := unitprobe.NewProber(nil).Address(); !strings.Contains(got, "/none") {
		t.Errorf("Address = %q, want the one from DBUS_SYSTEM_BUS_ADDRESS", got)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/4242")
	if got, want := unitprobe.NewProber(&unitprobe.Options{User: true}).Address(), "unix:path=/run/user/4242/bus"; got != want {
		t.Errorf("user Address = %q, want %q", got, want)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "autolaunch:")
	r, _ = unitprobe.Lookup(context.Background(), "x.service", &unitprobe.Options{User: true})
	if r.State != unitprobe.Unknown || r.Err == nil {
		t.Errorf("Lookup with an autolaunch address = %+v, want unknown", r)
	}
}
