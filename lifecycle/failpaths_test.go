package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
	"github.com/claimstore/claimstore/lifecycle"
)

// released checks that the run's pair is free, stopped with a proof of
// the given kind whose reference contains ref.
func released(t *testing.T, run *lifecycle.Run, kind claimstore.ProofKind, ref string) {
	t.Helper()
	p, err := run.Store.Pair(context.Background(), run.Claim.Seat, run.Claim.Session)
	if err != nil {
		t.Fatal(err)
	}
	if p.Held() {
		t.Fatalf("pair held (%s) after the release", p.State())
	}
	pr := p.Seat.Record.Proof
	if pr.Kind != kind || !strings.Contains(pr.Ref, ref) {
		t.Errorf("proof %s:%s; want %s with %q", pr.Kind, pr.Ref, kind, ref)
	}
}

// A writer with a child, stopped by SIGTERM: the child is killed with it
// and is a zombie until it is reaped. Wait waits for the group to be gone
// (as a subreaper, reaping the orphan itself) and the claim is released.
// Before, the group was checked once, while the zombie still counted, and
// the claim stayed held in 10 of 10 tries.
func TestGroupStopWithAChildIsReleased(t *testing.T) {
	// Without a subreaper first: the orphan goes to PID 1 (or the nearest
	// subreaper), and Wait waits for it to be reaped there. Being a
	// subreaper cannot be undone, so that order.
	for _, subreaper := range []bool{false, true} {
		run := newRun(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := run.Spawn(ctx, lifecycle.GroupStarter{Subreaper: subreaper}, lifecycle.Spec{Argv: []string{"sh", "-c", "sleep 100; :"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let sh fork its sleep
		if err := run.Stop(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		x, err := run.Wait(ctx)
		if err != nil {
			t.Fatalf("subreaper %v: Wait: %v", subreaper, err)
		}
		if err := run.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		released(t, run, claimstore.ProofCohort, "is empty")
		if x.Status != 128+int(syscall.SIGTERM) {
			t.Errorf("status %d; want 143", x.Status)
		}
	}
}

// A command that cannot be executed ran none of its code: the run is over
// at once, with the shell's status (127 not found, 126 not executable), and
// the claim is released with a proof that says nothing was started.
func TestExecFailureIsReleased(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0  string
		status int
	}{
		{"/nonexistent/cmd", 127},
		{"no-such-command-anywhere", 127},
		{notExec, 126},
		{t.TempDir(), 126},
	} {
		run := newRun(t)
		ctx := context.Background()
		err := run.Spawn(ctx, lifecycle.GroupStarter{}, lifecycle.Spec{Argv: []string{tc.argv0, "x"}})
		var ee *lifecycle.ExecError
		if !errors.As(err, &ee) || ee.Status != tc.status {
			t.Fatalf("Spawn %s: %v; want an ExecError with status %d", tc.argv0, err, tc.status)
		}
		if run.Process() == nil {
			t.Fatalf("Spawn %s: no Process: the claim could not be released", tc.argv0)
		}
		x, err := run.Wait(ctx)
		if err != nil || x.Status != tc.status {
			t.Fatalf("Wait %s: %+v, %v; want status %d", tc.argv0, x, err, tc.status)
		}
		if err := run.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		released(t, run, claimstore.ProofCohort, "nothing was started")
		if !run.Claim.Record.SpawnMarker() {
			t.Errorf("%s: the marker was not published before the start", tc.argv0)
		}
	}
}

// A writer that ignores SIGTERM is killed once KillAfter has passed, and
// the claim is then released: a stop always ends.
func TestStopEscalatesToSIGKILL(t *testing.T) {
	run := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var logged []string
	g := lifecycle.GroupStarter{Subreaper: true, Log: func(m string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, m)
	}}
	spec := lifecycle.Spec{Argv: []string{"sh", "-c", `trap "" TERM; sleep 100`}, KillAfter: 300 * time.Millisecond}
	if err := run.Spawn(ctx, g, spec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := run.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	x, err := run.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v (after %v)", err, time.Since(start))
	}
	if x.Signal != syscall.SIGKILL {
		t.Errorf("exit %+v; want killed by SIGKILL", x)
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released(t, run, claimstore.ProofCohort, "is empty")
	mu.Lock()
	defer mu.Unlock()
	if len(logged) < 2 || !strings.Contains(logged[0], "SIGKILL in 300ms") || !strings.Contains(logged[len(logged)-1], "sent SIGKILL") {
		t.Errorf("log %q; want the SIGTERM with its bound, then the SIGKILL", logged)
	}
}

// checker refuses every start, as unitctl does for a unit name in use.
type checker struct {
	lifecycle.GroupStarter
	started *bool
}

func (c checker) CheckStart(context.Context, lifecycle.Spec) error {
	return errors.New("unit is in the way")
}

func (c checker) Start(ctx context.Context, spec lifecycle.Spec) (lifecycle.Process, error) {
	*c.started = true
	return c.GroupStarter.Start(ctx, spec)
}

// A StartChecker's refusal comes before the spawn marker: nothing is
// started, and the claim is released with a no-unit proof naming why.
func TestStartCheckerRefusesBeforeTheMarker(t *testing.T) {
	run := newRun(t)
	started := false
	err := run.Spawn(context.Background(), checker{started: &started}, lifecycle.Spec{Argv: []string{"true"}})
	var ns *lifecycle.NotStartedError
	if !errors.As(err, &ns) || started {
		t.Fatalf("Spawn: %v, started %v; want a NotStartedError and nothing started", err, started)
	}
	if run.Claim.Record.SpawnMarker() || run.Claim.SeatRev != 1 {
		t.Fatalf("the claim moved (seat r%d, marker %v) before a refused start", run.Claim.SeatRev, run.Claim.Record.SpawnMarker())
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released(t, run, claimstore.ProofNoUnit, "unit is in the way")
}

// A process-group run whose supervisor died is adopted: while its group
// lives the adopted run waits for it; once the group is gone it is proven
// over and released.
func TestAdoptAGroupRun(t *testing.T) {
	s, err := storetest.Open(filepath.Join(t.TempDir(), "claims"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-42")
	sup := exec.Command("sleep", "300")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer sup.Process.Kill()
	start, _ := s.Host().StartTime(sup.Process.Pid)
	boot, _ := s.Host().BootID()
	ns, _ := s.Host().PIDNamespace(sup.Process.Pid)
	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: sup.Process.Pid, Start: start, Boot: boot, PIDNS: ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, lifecycle.GroupStarter{}, lifecycle.Spec{Argv: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	pgid := lifecycle.ProcessGroupOf(run.Claim.Record)
	if pgid <= 0 {
		t.Fatalf("the claim recorded no process group: %s", run.Claim.Record.Fields)
	}
	defer syscall.Kill(-pgid, syscall.SIGKILL)
	sup.Process.Kill()
	sup.Wait()

	me, _ := s.Self(2)
	adopted, res, err := lifecycle.Adopt(ctx, s, seat, session, me, &lifecycle.AdoptOptions{Groups: lifecycle.GroupAttacher{PollEvery: 20 * time.Millisecond}})
	if err != nil {
		t.Fatalf("Adopt: %v (outcome %s)", err, res.Outcome)
	}
	if adopted.Claim.Record.State != claimstore.Active {
		t.Errorf("adopted claim %s; want active again while its group runs", adopted.Claim.Record.State)
	}
	done := make(chan error, 1)
	go func() {
		_, err := adopted.Wait(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Wait returned while the group runs: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := adopted.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	// The group's leader is this test's child: reap it, as its parent.
	run.Wait(ctx)
	if err := <-done; err != nil {
		t.Fatalf("Wait after the stop: %v", err)
	}
	if err := adopted.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released(t, adopted, claimstore.ProofCohort, "is gone")
}

// A claim taken with NoUnit names no unit: its writer finds CLAIMSTORE_UNIT
// empty (not "mosaic-chat-….service", which never existed), the starter is
// handed no unit, and the run records its process group instead.
func TestNoUnitClaimNamesNoUnit(t *testing.T) {
	s, err := storetest.Open(filepath.Join(t.TempDir(), "claims"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-nounit")
	owner, _ := s.Self(1)
	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: owner, NoUnit: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := lifecycle.UnitFile(run.Claim.Record.UnitName()); got != "" {
		t.Fatalf("UnitFile of a claim naming no unit = %q; want \"\"", got)
	}
	out := filepath.Join(t.TempDir(), "env")
	st := &specRecorder{Starter: lifecycle.GroupStarter{}}
	ctx := context.Background()
	if err := run.Spawn(ctx, st, lifecycle.Spec{Argv: []string{"sh", "-c", `printf '[%s]' "$CLAIMSTORE_UNIT" > "$0"`, out}}); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := run.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != "[]" {
		t.Errorf("CLAIMSTORE_UNIT in the writer = %s (%v); want empty", got, err)
	}
	if st.spec.Unit != "" {
		t.Errorf("Spec.Unit = %q; want \"\"", st.spec.Unit)
	}
	if lifecycle.ProcessGroupOf(run.Claim.Record) == 0 || run.Claim.Record.UnitName() != "" {
		t.Errorf("record: process group %d, unit %q; want a group and no unit", lifecycle.ProcessGroupOf(run.Claim.Record), run.Claim.Record.UnitName())
	}
}

// specRecorder remembers the Spec its Starter was handed.
type specRecorder struct {
	lifecycle.Starter
	spec lifecycle.Spec
}

func (r *specRecorder) Start(ctx context.Context, spec lifecycle.Spec) (lifecycle.Process, error) {
	r.spec = spec
	return r.Starter.Start(ctx, spec)
}
