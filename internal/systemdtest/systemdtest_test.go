package systemdtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// The shared manager is one per test binary: every call returns the
// manager the first one started, running.
func TestSharedIsStartedOnce(t *testing.T) {
	a, b := Shared(t), Shared(t)
	if a != b {
		t.Fatalf("Shared started two managers, pids %d and %d", a.PID, b.PID)
	}
	if err := syscall.Kill(a.PID, 0); err != nil {
		t.Fatalf("the shared manager pid %d: %v", a.PID, err)
	}
}

func TestManagerRunsUnits(t *testing.T) {
	m := Shared(t)
	if fi, err := os.Stat(m.RuntimeDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("runtime dir %s: %v, mode %v; want 0700", m.RuntimeDir, err, fi.Mode())
	}
	unit := m.UnitName("sleep")
	if err := m.Run(unit, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", unit) })
	out, err := m.Systemctl("is-active", unit)
	if err != nil || strings.TrimSpace(out) != "active" {
		t.Fatalf("systemctl is-active %s = %q, %v; want active", unit, out, err)
	}

	// The bus reaches the same manager.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := m.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sts, err := c.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil || len(sts) != 1 || sts[0].ActiveState != "active" {
		t.Fatalf("ListUnitsByNames(%s) = %+v, %v; want one active unit", unit, sts, err)
	}
}

func TestStopEndsManagerAndUnits(t *testing.T) {
	m := Start(t)
	unit := m.UnitName("stop")
	if err := m.Run(unit, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	out, err := m.Systemctl("show", "-p", "MainPID", "--value", unit)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(out)
	if pid == "" || pid == "0" {
		t.Fatalf("unit %s has no main pid: %q", unit, out)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit's main process %s still there after Stop (stat: %v)", pid, err)
	}
	if _, err := os.Stat(m.base); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("manager directory %s still there after Stop", m.base)
	}
	if err := m.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// recorder stands in for a test to see whether unavailable skips or fails.
type recorder struct {
	testing.TB
	fatal, skip bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.fatal = true }
func (r *recorder) Skipf(string, ...any)  { r.skip = true }
func (r *recorder) Logf(string, ...any)   {}

func TestUnavailableFailsInCI(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{}
		Require(r, nil, errors.New("no systemd here"))
		if want := ci != ""; r.fatal != want || r.skip == want {
			t.Errorf("CI=%q: fatal=%v skip=%v; want fatal=%v and skip=%v", ci, r.fatal, r.skip, want, !want)
		}
	}
}

// Two managers at once (as when go test runs packages in parallel) must not
// touch each other: stopping one leaves the other's bus and units alone,
// even a unit of the same name.
func TestManagersAreIsolated(t *testing.T) {
	a, b := Start(t), Start(t)
	unit := a.UnitName("shared")
	for _, m := range []*Manager{a, b} {
		if err := m.Run(unit, "sleep", "60"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { b.Systemctl("stop", unit) })
	cg, err := b.Systemctl("show", "-p", "ControlGroup", "--value", unit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unit %s of manager %d is in cgroup %s", unit, b.PID, strings.TrimSpace(cg))
	if err := a.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.Connect(ctx)
	if err != nil {
		t.Fatalf("the other manager's bus after Stop: %v", err)
	}
	defer c.Close()
	sts, err := c.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil || len(sts) != 1 || sts[0].SubState != "running" {
		t.Fatalf("the other manager's unit after Stop: %+v, %v; want running", sts, err)
	}
}
