//go:build linux

package systemdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/claimstore/claimstore/unitprobe"
)

// SystemdPath is the systemd binary that runs the manager.
const SystemdPath = "/lib/systemd/systemd"

// StartTimeout bounds how long StartManager waits for the manager's bus.
var StartTimeout = 30 * time.Second

// stopTimeout bounds how long Stop waits for an orderly exit after SIGTERM.
const stopTimeout = 15 * time.Second

// Manager is a running systemd user manager. Its methods are safe for
// concurrent use.
type Manager struct {
	// PID is the manager's pid (unshare, then sh, exec themselves into it).
	PID int
	// RuntimeDir is the manager's XDG_RUNTIME_DIR (mode 0700).
	RuntimeDir string
	// Address is the D-Bus address of the manager's bus,
	// "unix:path=<RuntimeDir>/bus".
	Address string

	base    string   // holds RuntimeDir, the home directory and the log
	cgroups []string // the manager's own cgroup directories, removed by Stop
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the manager has been reaped
	waitErr error         // set before exited is closed
	stop    sync.Once
	stopErr error
	seq     atomic.Int64
}

// StartManager starts a systemd user manager and waits, for at most
// StartTimeout, until its bus answers and it has finished starting up. The
// error says why it could not start; call Stop when done. It logs one line
// to stderr naming the pid and the bus, so CI logs show the manager ran.
func StartManager() (*Manager, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root for a private mount namespace (euid %d)", os.Geteuid())
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("no unshare: %w", err)
	}
	if _, err := os.Stat(SystemdPath); err != nil {
		return nil, fmt.Errorf("no systemd binary: %w", err)
	}
	// A short base path: the bus socket path must fit in sun_path.
	base, err := os.MkdirTemp("", "sdt-")
	if err != nil {
		return nil, err
	}
	m := &Manager{
		base:       base,
		RuntimeDir: filepath.Join(base, "run"),
		logPath:    filepath.Join(base, "manager.log"),
		exited:     make(chan struct{}),
	}
	m.Address = "unix:path=" + filepath.Join(m.RuntimeDir, "bus")
	home := filepath.Join(base, "home")
	for _, d := range []string{m.RuntimeDir, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(base)
			return nil, err
		}
	}
	logf, err := os.Create(m.logPath)
	if err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	defer logf.Close()

	m.cgroups, err = makeCgroups(filepath.Base(base))
	if err != nil {
		fmt.Fprintf(os.Stderr, "systemdtest: warning: no cgroup of its own for the manager (%v); "+
			"managers of concurrent test processes may interfere\n", err)
	}
	// The shell moves itself (and so the manager it becomes) into the
	// manager's cgroups, given as arguments, before anything starts.
	cmd := exec.Command(unshare, "-m", "sh", "-c",
		`for d in "$@"; do echo $$ > "$d/cgroup.procs" || exit 1; done && `+
			"mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && exec "+SystemdPath+" --user",
		"sh")
	cmd.Args = append(cmd.Args, m.cgroups...)
	cmd.Env = []string{
		"PATH=" + envOr("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
		"HOME=" + home,
		"XDG_RUNTIME_DIR=" + m.RuntimeDir,
		"LANG=C.UTF-8",
	}
	cmd.Dir = base
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary dies without calling Stop, so does the
		// manager (and it stops its units on the way out). The signal is
		// tied to the forking OS thread, which Go only ends for goroutines
		// that exit while locked to it; nothing here does that.
		Pdeathsig: syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		removeCgroups(m.cgroups)
		os.RemoveAll(base)
		return nil, fmt.Errorf("start %s: %w", unshare, err)
	}
	m.cmd = cmd
	m.PID = cmd.Process.Pid
	go func() {
		m.waitErr = cmd.Wait()
		close(m.exited)
	}()
	if err := m.waitReady(); err != nil {
		m.Stop()
		return nil, fmt.Errorf("systemd --user (pid %d) did not come up: %w\n%s", m.PID, err, m.logTail())
	}
	fmt.Fprintf(os.Stderr, "systemdtest: started systemd --user pid %d, bus %s\n", m.PID, m.Address)
	return m, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// waitReady polls the bus until the manager answers and reports that it
// finished starting up (running or degraded).
func (m *Manager) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	last := errors.New("bus socket not there yet")
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			return fmt.Errorf("manager exited: %v", m.waitErr)
		default:
		}
		if _, err := os.Stat(filepath.Join(m.RuntimeDir, "bus")); err == nil {
			state, err := m.systemState()
			switch {
			case err != nil:
				last = err
			case state == "running" || state == "degraded":
				return nil
			default:
				last = fmt.Errorf("system state %s", state)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("after %v: %w", StartTimeout, last)
}

func (m *Manager) systemState() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := m.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	p, err := c.SystemStateContext(ctx)
	if err != nil {
		return "", err
	}
	s, _ := p.Value.Value().(string)
	return s, nil
}

// Connect returns a go-systemd connection to the manager over its bus. The
// connection is closed when ctx ends; tests use it to inspect or drive the
// manager directly. The bus is dialed as the code under test dials it
// (unitprobe.DialBus), so a test sees the handshake production makes.
func (m *Manager) Connect(ctx context.Context) (*sdbus.Conn, error) {
	return sdbus.NewConnection(func() (*dbus.Conn, error) { return unitprobe.DialBus(ctx, m.Address) })
}

// Env is the environment under which systemctl --user and systemd-run
// --user reach this manager.
func (m *Manager) Env() []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	return append(env, "DBUS_SESSION_BUS_ADDRESS="+m.Address, "XDG_RUNTIME_DIR="+m.RuntimeDir)
}

// UnitName returns a service name, built from prefix, that no other unit of
// this or any other test process uses.
func (m *Manager) UnitName(prefix string) string {
	return fmt.Sprintf("sdt-%d-%d-%s.service", os.Getpid(), m.seq.Add(1), prefix)
}

// Run runs "systemd-run --user --unit=unit args..." against the manager and
// returns once systemd-run does (after the unit was started). args may
// begin with systemd-run options (e.g. "-p", "RemainAfterExit=yes",
// "--collect") before the command. The error holds systemd-run's output.
func (m *Manager) Run(unit string, args ...string) error {
	out, err := m.command("systemd-run", append([]string{"--user", "--unit=" + unit}, args...)...)
	if err != nil {
		return fmt.Errorf("systemd-run --user --unit=%s %s: %w\n%s", unit, strings.Join(args, " "), err, out)
	}
	return nil
}

// Systemctl runs "systemctl --user args..." against the manager and returns
// its combined output.
func (m *Manager) Systemctl(args ...string) (string, error) {
	out, err := m.command("systemctl", append([]string{"--user"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("systemctl --user %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (m *Manager) command(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = m.Env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Signal sends sig to the manager process, e.g. SIGSTOP to make its bus
// name stop answering and SIGCONT to resume it.
func (m *Manager) Signal(sig syscall.Signal) error {
	return syscall.Kill(m.PID, sig)
}

// Stop stops the manager: SIGTERM (it then stops its units and exits),
// and SIGKILL to its process group if it has not exited within a bound.
// It removes the manager's directories. Calling Stop (or Kill) again
// returns the first result.
func (m *Manager) Stop() error {
	return m.end(false)
}

// Kill stops the manager with SIGKILL, without asking it first, then
// kills what is left in its units' cgroups and removes its directories,
// as Stop does. It is for a test that has left the manager wedged on
// purpose: systemd 252, once the bus it is connected to is killed, can
// block for 90 s in a synchronous call to a reactivated bus that never
// answers (seen in TestWaitBusLost, two runs in six), and neither
// systemctl nor SIGTERM gets through to it meanwhile. Calling Kill (or
// Stop) again returns the first result.
func (m *Manager) Kill() error {
	return m.end(true)
}

func (m *Manager) end(kill bool) error {
	m.stop.Do(func() {
		if kill {
			syscall.Kill(-m.PID, syscall.SIGKILL)
			<-m.exited
		} else {
			// A stopped manager ignores SIGTERM until continued.
			syscall.Kill(m.PID, syscall.SIGCONT)
			syscall.Kill(m.PID, syscall.SIGTERM)
			select {
			case <-m.exited:
			case <-time.After(stopTimeout):
				syscall.Kill(-m.PID, syscall.SIGKILL)
				<-m.exited
				m.stopErr = fmt.Errorf("systemd --user pid %d ignored SIGTERM for %v; killed", m.PID, stopTimeout)
			}
		}
		if err := removeCgroups(m.cgroups); err != nil && m.stopErr == nil {
			m.stopErr = err
		}
		if err := os.RemoveAll(m.base); err != nil && m.stopErr == nil {
			m.stopErr = err
		}
	})
	return m.stopErr
}

// makeCgroups creates an empty cgroup called name under the calling
// process's cgroup in the hierarchies systemd places units by: name=systemd
// (cgroup v1 and hybrid) and the unified one (v2 or hybrid).
func makeCgroups(name string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var mnt string
		switch {
		case f[1] == "name=systemd":
			mnt = "/sys/fs/cgroup/systemd"
		case f[0] == "0" && f[1] == "":
			for _, c := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				if _, err := os.Stat(filepath.Join(c, "cgroup.controllers")); err == nil {
					mnt = c
					break
				}
			}
		}
		if mnt == "" {
			continue
		}
		dir := filepath.Join(mnt, f[2], name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			removeCgroups(dirs)
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	if len(dirs) == 0 {
		return nil, errors.New("no name=systemd or unified cgroup hierarchy found")
	}
	return dirs, nil
}

// removeCgroups removes the manager's cgroup trees, first killing whatever
// is still in them: after the manager has gone, anything left there is a
// process of one of its units, and nobody else's.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		var tree []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		var err error
		for try := 0; try < 50; try++ {
			err = nil
			for i := len(tree) - 1; i >= 0; i-- { // children first
				procs, _ := os.ReadFile(filepath.Join(tree[i], "cgroup.procs"))
				for _, f := range strings.Fields(string(procs)) {
					if pid, perr := strconv.Atoi(f); perr == nil && pid > 0 {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				if rerr := os.Remove(tree[i]); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
					err = rerr
				}
			}
			if err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// logTail returns the end of the manager's log, for error messages.
func (m *Manager) logTail() string {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return ""
	}
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// unavailable reports a manager that could not start: a skip, or a failure
// when CI is set.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("real systemd unavailable, and CI is set so this is a failure: %v", err)
		return
	}
	t.Skipf("real systemd unavailable: %v", err)
}

// Start starts a manager for one test (or benchmark) and stops it in
// t.Cleanup. Where it cannot start, the test skips; with CI set, it fails.
func Start(t testing.TB) *Manager {
	t.Helper()
	m, err := StartManager()
	if err != nil {
		unavailable(t, err)
		return nil // only reached when t does not stop the test
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("stopping systemd --user: %v", err)
		}
	})
	t.Logf("systemdtest: started systemd --user pid %d, bus %s", m.PID, m.Address)
	return m
}

// shared is the manager of Main and Shared: started by the first test
// that asks for it, stopped by Main after the last.
var shared struct {
	once sync.Once
	m    *Manager
	err  error
}

// Main runs a package's tests and then stops the manager Shared started,
// if any; a failure to stop fails the binary. Call it as the package's
// TestMain:
//
//	func TestMain(m *testing.M) { systemdtest.Main(m) }
//
// A test binary whose tests never ask for the manager (run with -run, or
// -short where they skip) never starts one.
func Main(m *testing.M) {
	code := m.Run()
	if shared.m != nil {
		if err := shared.m.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping systemd --user:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shared returns the one manager of the test binary, starting it on the
// first call; where it cannot start, every test that asks skips with the
// reason (fails with CI set), and the start is not retried. Tests sharing
// it must leave it running and answering (stopping a unit of their own is
// fine); a test that kills, stops or replaces its manager uses Start.
// The package's TestMain must be Main, which stops it.
func Shared(t testing.TB) *Manager {
	t.Helper()
	shared.once.Do(func() { shared.m, shared.err = StartManager() })
	return Require(t, shared.m, shared.err)
}

// Require returns m, a manager a test did not start itself (Shared's),
// failing the test when it has exited, or skips (fails with CI set) with
// startErr when m is nil because the start failed.
func Require(t testing.TB, m *Manager, startErr error) *Manager {
	t.Helper()
	if m == nil {
		if startErr == nil {
			startErr = errors.New("no manager was started")
		}
		unavailable(t, startErr)
		return nil // only reached when t does not stop the test
	}
	select {
	case <-m.exited:
		t.Fatalf("systemd --user pid %d has exited: %v\n%s", m.PID, m.waitErr, m.logTail())
	default:
	}
	t.Logf("systemdtest: using systemd --user pid %d, bus %s", m.PID, m.Address)
	return m
}
