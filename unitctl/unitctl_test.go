package unitctl_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
	"github.com/claimstore/claimstore/internal/systemdtest"
	"github.com/claimstore/claimstore/lifecycle"
	"github.com/claimstore/claimstore/unitctl"
	"github.com/claimstore/claimstore/unitprobe"
)

func TestMain(m *testing.M) { systemdtest.Main(m) }

// shared is the connection of the tests that can share one: they use the
// package's manager and leave the connection open. A test that closes its
// connection (a supervisor's death, the references it drops) dials its own.
var shared struct {
	once sync.Once
	um   *unitctl.Manager
	err  error
}

// share returns the package's real systemd user manager (skipping, or
// failing under CI, when it could not start) and the shared connection to
// it, dialed by the first test that asks; it ends when Main stops the
// manager.
func share(t *testing.T) (*systemdtest.Manager, *unitctl.Manager) {
	t.Helper()
	m := systemdtest.Shared(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shared.um, shared.err = unitctl.Dial(ctx, &unitprobe.Options{User: true, Address: m.Address})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return m, shared.um
}

// dial returns a connection of the test's own (closed at its end) to the
// package's real systemd user manager (skipping, or failing under CI, when
// it could not start).
func dial(t *testing.T) (*systemdtest.Manager, *unitctl.Manager) {
	t.Helper()
	m := systemdtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	um, err := unitctl.Dial(ctx, &unitprobe.Options{User: true, Address: m.Address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { um.Close() })
	return m, um
}

type fixture struct {
	s             *claimstore.Store
	seat, session claimstore.Key
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	s, err := storetest.Open(filepath.Join(t.TempDir(), "claims"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seat, err := claimstore.SeatKey("s1", "demo", "/srv/ws")
	if err != nil {
		t.Fatal(err)
	}
	session, err := claimstore.SessionKey("sess-" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return fixture{s, seat, session}
}

// history returns the key's revisions as "state[+marker] proof-ref".
func history(t *testing.T, s *claimstore.Store, k claimstore.Key) []string {
	t.Helper()
	revs, err := s.Revisions(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range revs {
		if r.Record == nil {
			t.Fatalf("%s r%d damaged: %v", k, r.N, r.Damage)
		}
		line := string(r.Record.State)
		if r.Record.SpawnMarker() {
			line += "+marker"
		}
		if r.Record.Proof != nil {
			line += " " + string(r.Record.Proof.Kind) + ":" + r.Record.Proof.Ref
		}
		out = append(out, line)
	}
	return out
}

func invocationOf(t *testing.T, s *claimstore.Store, k claimstore.Key) string {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil || h.Record == nil {
		t.Fatalf("head of %s: %v %v", k, err, h)
	}
	raw, _ := h.Record.Fields.Get("invocationId")
	return strings.Trim(string(raw), `"`)
}

// The whole lifecycle on a real systemd: the writer runs as the claim's
// transient unit with the claim in its environment and its output passed
// through; its exit status comes back; the history reads reserved →
// marked → active (with the unit's InvocationID) → stopped with a
// cohortProof naming the unit, that invocation and the result.
func TestLifecycleOnSystemd(t *testing.T) {
	m, um := dial(t)
	f := newFixture(t)
	owner, err := f.s.Self(1)
	if err != nil {
		t.Fatal(err)
	}
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run.Spawn(ctx, um, lifecycle.Spec{
		Argv:   []string{"sh", "-c", `echo "$CLAIMSTORE_CLAIM_ID $CLAIMSTORE_SESSION $CLAIMSTORE_UNIT"; exit 3`},
		Stdout: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	inv := run.Process().ID()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(inv) {
		t.Fatalf("invocation id %q is not 32 hex digits", inv)
	}
	x, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != 3 || x.Result != "exit-code" {
		t.Errorf("exit %+v, want status 3, result exit-code", x)
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out.Name())
	if want := run.Claim.ID + " " + f.session.Session + " " + unit + "\n"; string(data) != want {
		t.Errorf("the writer printed %q, want %q", data, want)
	}
	name := strings.TrimSuffix(unit, ".service")
	want := []string{"reserved", "reserved+marker", "active+marker",
		"stopped+marker cohortProof:unit " + name + " invocation " + inv + " result exit-code status 3"}
	for _, k := range []claimstore.Key{f.seat, f.session} {
		if diff := cmp.Diff(want, history(t, f.s, k)); diff != "" {
			t.Errorf("%s history (-want +got):\n%s", k, diff)
		}
	}
	revs, _ := f.s.Revisions(context.Background(), f.seat)
	if raw, _ := revs[2].Record.Fields.Get("invocationId"); string(raw) != `"`+inv+`"` {
		t.Errorf("active revision's invocationId %s, want %q", raw, inv)
	}
	// Once the Manager's reference is dropped the unit is collected.
	um.Close()
	waitUnit(t, m, unit, "inactive")
}

// waitUnit waits (bounded) until systemctl shows the unit's ActiveState.
func waitUnit(t *testing.T, m *systemdtest.Manager, unit, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := m.Systemctl("show", "-p", "ActiveState", "--value", unit)
		if strings.TrimSpace(out) == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit %s is %q after 10s, want %s", unit, strings.TrimSpace(out), state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop: the stop request is recorded (stopping), the unit and every
// process of its control group are stopped, and the claim is released
// with the proof.
func TestStopOnSystemd(t *testing.T) {
	m, um := share(t)
	f := newFixture(t)
	owner, _ := f.s.Self(1)
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A grandchild in the background: KillMode=control-group stops it too.
	if err := run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"sh", "-c", "sleep 300 & exec sleep 301"}}); err != nil {
		t.Fatal(err)
	}
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	waitUnit(t, m, unit, "active")
	waited := make(chan *lifecycle.Exit, 1)
	go func() {
		x, err := run.Wait(ctx)
		if err != nil {
			t.Error(err)
		}
		waited <- x
	}()
	if err := run.Stop(ctx, "test stop"); err != nil {
		t.Fatal(err)
	}
	x := <-waited
	if x == nil {
		t.FailNow()
	}
	if x.Status != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %+v, want status %d", x, 128+int(syscall.SIGTERM))
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := history(t, f.s, f.seat)
	if len(got) != 5 || got[3] != "stopping+marker" || !strings.HasPrefix(got[4], "stopped+marker cohortProof:unit ") {
		t.Errorf("history %q; want reserved, marked, active, stopping, stopped", got)
	}
	// KillMode=control-group: the background sleep went with the unit.
	cg, _ := run.Process().(interface{ ControlGroup() string })
	for _, base := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/systemd"} {
		if procs, err := os.ReadFile(filepath.Join(base, cg.ControlGroup(), "cgroup.procs")); err == nil && len(procs) > 0 {
			t.Errorf("processes of the stopped unit remain in %s: %s", cg.ControlGroup(), procs)
		}
	}
}

// Adopt: the supervisor dies (its connection and its reference on the
// unit go with it), the unit runs on; a new supervisor adopts the claim
// through classify, re-attaches to the same invocation, waits for its end
// and releases with the proof. An adoption after the run ended unobserved
// (the unit collected) proves it over from its control group, gone.
func TestAdoptOnSystemd(t *testing.T) {
	m, um := dial(t)
	f := newFixture(t)
	// The first supervisor's identity is a process we kill.
	sup := exec.Command("sleep", "300")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := f.s.Host().StartTime(sup.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := f.s.Host().BootID()
	ns, _ := f.s.Host().PIDNamespace(sup.Process.Pid)
	owner := claimstore.Owner{PID: sup.Process.Pid, Start: start, Boot: boot, PIDNS: ns}
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopFile := filepath.Join(t.TempDir(), "stop")
	if err := run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"sh", "-c", "while [ ! -e " + stopFile + " ]; do sleep 0.05; done; exit 7"}}); err != nil {
		t.Fatal(err)
	}
	inv := run.Process().ID()
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	um.Close()
	sup.Process.Kill()
	sup.Wait()

	// While the owner lives nobody adopts; here it is gone.
	_, um2 := dial(t)
	me, _ := f.s.Self(2)
	units := unitLookup{um2}
	run2, res, err := lifecycle.Adopt(ctx, f.s, f.seat, f.session, me, &lifecycle.AdoptOptions{Units: units, Attacher: um2})
	if err != nil {
		t.Fatalf("Adopt: %v (result %+v)", err, res)
	}
	if got := run2.Process().ID(); got != inv {
		t.Errorf("re-attached to invocation %s, want %s", got, inv)
	}
	if run2.Claim.Record.State != claimstore.Active {
		t.Errorf("adopted claim is %s, want active again", run2.Claim.Record.State)
	}
	if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := run2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != 7 || !strings.Contains(x.Ref, inv) {
		t.Errorf("exit %+v, want status 7 and a ref naming %s", x, inv)
	}
	if err := run2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"reserved", "reserved+marker", "active+marker", "uncertain+marker", "active+marker",
		"stopped+marker cohortProof:unit " + strings.TrimSuffix(unit, ".service") + " invocation " + inv + " result exit-code status 7"}
	if diff := cmp.Diff(want, history(t, f.s, f.session)); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	_ = m
}

// A run that ended while nobody watched: the unit is collected, and its
// recorded control group is gone: provably over.
func TestAdoptAfterUnobservedEnd(t *testing.T) {
	m, um := dial(t)
	f := newFixture(t)
	sup := exec.Command("sleep", "300")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	start, _ := f.s.Host().StartTime(sup.Process.Pid)
	boot, _ := f.s.Host().BootID()
	ns, _ := f.s.Host().PIDNamespace(sup.Process.Pid)
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: sup.Process.Pid, Start: start, Boot: boot, PIDNS: ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Long enough to be running when Spawn records its control group
	// (under load, a writer that ends at once leaves none to record, and
	// its adoption then rightly stays held).
	if err := run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"sleep", "1.5"}}); err != nil {
		t.Fatal(err)
	}
	inv := run.Process().ID()
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	um.Close()
	sup.Process.Kill()
	sup.Wait()
	// Collected: the manager no longer knows it.
	waitUnit(t, m, unit, "inactive")
	_, um2 := dial(t)
	me, _ := f.s.Self(2)
	run2, _, err := lifecycle.Adopt(ctx, f.s, f.seat, f.session, me, &lifecycle.AdoptOptions{Units: unitLookup{um2}, Attacher: um2})
	if err != nil {
		t.Fatal(err)
	}
	x, err := run2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x.Ref, inv) || !strings.Contains(x.Ref, "control group") {
		t.Errorf("proof %q: want the invocation %s and the control group", x.Ref, inv)
	}
	if err := run2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, _ := f.s.Pair(context.Background(), f.seat, f.session)
	if p.Held() {
		t.Errorf("pair still held after release")
	}
}

// A recorded invocation the manager cannot account for (not loaded, no
// control group recorded) is not proven over: the claim stays held.
func TestAttachUnprovable(t *testing.T) {
	_, um := share(t)
	_, err := um.Attach(context.Background(), lifecycle.Recorded{Unit: "mosaic-chat-c0000000000000000000000ff.service", InvocationID: strings.Repeat("ab", 16)})
	if err == nil || !strings.Contains(err.Error(), "not proven over") {
		t.Fatalf("Attach: %v; want not proven over", err)
	}
}

// unitLookup adapts unitprobe to classify, on the same manager.
type unitLookup struct{ m *unitctl.Manager }

func (u unitLookup) LookupUnit(ctx context.Context, name string) claimstore.UnitObservation {
	return claimstore.UnitObservation{Name: name, State: claimstore.UnitUnknown, Detail: "adoption test: not looked up"}
}

// A supervisor that died while stopping (stopping recorded, the unit still
// running): adoption hands the claim back as stopping and resumes the stop;
// the claim is released once the unit has ended.
func TestAdoptResumesStop(t *testing.T) {
	m, um := dial(t)
	f := newFixture(t)
	sup := exec.Command("sleep", "300")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	start, _ := f.s.Host().StartTime(sup.Process.Pid)
	boot, _ := f.s.Host().BootID()
	ns, _ := f.s.Host().PIDNamespace(sup.Process.Pid)
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: sup.Process.Pid, Start: start, Boot: boot, PIDNS: ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	// The stop request is recorded; the supervisor dies before it stops
	// the unit.
	if err := f.s.Advance(context.Background(), run.Claim, claimstore.Patch{State: claimstore.Stopping, Fields: map[string]any{"stop": map[string]any{"reason": "test"}}}); err != nil {
		t.Fatal(err)
	}
	um.Close()
	sup.Process.Kill()
	sup.Wait()
	waitUnit(t, m, unit, "active")

	_, um2 := dial(t)
	me, _ := f.s.Self(2)
	run2, res, err := lifecycle.Adopt(ctx, f.s, f.seat, f.session, me, &lifecycle.AdoptOptions{Units: unitLookup{um2}, Attacher: um2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != claimstore.OutcomeStopping {
		t.Errorf("classify outcome %s, want stopping (the stop handed back)", res.Outcome)
	}
	x, err := run2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %+v, want the SIGTERM of the resumed stop", x)
	}
	if err := run2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := history(t, f.s, f.seat)
	if len(got) != 6 || got[3] != "stopping+marker" || got[4] != "stopping+marker" || !strings.HasPrefix(got[5], "stopped+marker cohortProof:unit ") {
		t.Errorf("history %q; want …, stopping, stopping (adopted), stopped", got)
	}
}

// The bus goes away while a run is waited for: Wait says the run is not
// proven over (the claim stays held) instead of waiting for signals that
// cannot come. A manager of its own: its bus is killed.
func TestWaitBusLost(t *testing.T) {
	m := systemdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	um, err := unitctl.Dial(ctx, &unitprobe.Options{User: true, Address: m.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer um.Close()
	p, err := um.Start(ctx, lifecycle.Spec{Unit: "mosaic-chat-c00000000000000000000bb01.service", Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := p.Wait(ctx)
		waited <- err
	}()
	t.Cleanup(func() {
		// Not Stop: a manager whose bus was killed can be blocked in a
		// synchronous call to the reactivated bus for 90 s, deaf to
		// systemctl and SIGTERM (systemdtest.Manager.Kill).
		if err := m.Kill(); err != nil {
			t.Errorf("killing systemd --user: %v", err)
		}
	})
	if out, err := m.Systemctl("kill", "--signal=KILL", "dbus.service"); err != nil {
		t.Fatalf("killing the bus: %v %s", err, out)
	}
	select {
	case err := <-waited:
		var no *unitctl.NotOverError
		if !errors.As(err, &no) || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("Wait: %v; want a NotOverError saying the connection was lost", err)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after the bus went away")
	}
}

// A unit by the claim's name that is already loaded (another's, or a
// leftover run) is found before the spawn marker: nothing is started, and
// the claim is released with a no-unit proof naming the unit in the way.
// Before, the start failed after the marker and the claim stayed held.
func TestUnitNameInUse(t *testing.T) {
	m, um := share(t)
	f := newFixture(t)
	owner, _ := f.s.Self(1)
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	if err := m.Run(unit, "sleep", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Systemctl("stop", unit) })
	waitUnit(t, m, unit, "active")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"true"}})
	var ns *lifecycle.NotStartedError
	var inUse *unitctl.UnitInUseError
	if !errors.As(err, &ns) || !errors.As(err, &inUse) || inUse.Unit != unit {
		t.Fatalf("Spawn with the unit's name taken: %v; want a NotStartedError for a UnitInUseError naming %s", err, unit)
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := history(t, f.s, f.seat)
	if len(got) != 2 || got[0] != "reserved" || !strings.HasPrefix(got[1], "stopped no-unit:nothing was started: unit "+unit+" is already loaded") {
		t.Errorf("history %q; want reserved, then stopped on a no-unit proof naming %s", got, unit)
	}
}

// Spec.KillAfter is the unit's stop timeout: a writer that ignores SIGTERM
// is killed by the manager once it has passed, and the stop ends.
func TestKillAfterOnSystemd(t *testing.T) {
	m, um := share(t)
	f := newFixture(t)
	owner, _ := f.s.Self(1)
	run, err := lifecycle.Acquire(context.Background(), f.s, f.seat, f.session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, um, lifecycle.Spec{Argv: []string{"sh", "-c", `trap "" TERM; sleep 300`}, KillAfter: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	unit := lifecycle.UnitFile(run.Claim.Record.UnitName())
	waitUnit(t, m, unit, "active")
	if out, _ := m.Systemctl("show", "-p", "TimeoutStopUSec", "--value", unit); strings.TrimSpace(out) != "500ms" {
		t.Errorf("TimeoutStopUSec %q; want 500ms", strings.TrimSpace(out))
	}
	if err := run.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	x, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Signal != syscall.SIGKILL && x.Result != "timeout" {
		t.Errorf("exit %+v; want the writer killed after the stop timeout", x)
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
