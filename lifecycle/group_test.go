package lifecycle_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
	"github.com/claimstore/claimstore/lifecycle"
)

func newRun(t *testing.T) *lifecycle.Run {
	t.Helper()
	s, err := storetest.Open(filepath.Join(t.TempDir(), "claims"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-42")
	owner, _ := s.Self(1)
	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// A grandchild left in the writer's process group keeps the claim held:
// Wait says the group is not verified empty, and Release refuses.
func TestGroupNotEmptyHolds(t *testing.T) {
	run := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, lifecycle.GroupStarter{Settle: 300 * time.Millisecond}, lifecycle.Spec{Argv: []string{"sh", "-c", "sleep 30 & exit 0"}}); err != nil {
		t.Fatal(err)
	}
	_, err := run.Wait(ctx)
	var ne *lifecycle.GroupNotEmptyError
	if !errors.As(err, &ne) {
		t.Fatalf("Wait: %v; want a GroupNotEmptyError", err)
	}
	t.Cleanup(func() { syscall.Kill(-ne.PGID, syscall.SIGKILL) })
	if err := run.Release(context.Background()); err == nil || !strings.Contains(err.Error(), "not proven over") {
		t.Fatalf("Release: %v; want a refusal to release", err)
	}
	p, _ := run.Store.Pair(context.Background(), run.Claim.Seat, run.Claim.Session)
	if !p.Held() || p.State() != claimstore.Active {
		t.Errorf("pair %s held %v; want active, held", p.State(), p.Held())
	}
}

// Stop on a process group: stopping recorded, the group signalled, and
// once it is empty the claim is released; the status is 128+SIGTERM.
func TestGroupStop(t *testing.T) {
	run := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, lifecycle.GroupStarter{}, lifecycle.Spec{Argv: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	if err := run.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	x, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != 128+int(syscall.SIGTERM) || x.Signal != syscall.SIGTERM {
		t.Errorf("exit %+v; want status 143 by SIGTERM", x)
	}
	if err := run.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	revs, _ := run.Store.Revisions(context.Background(), run.Claim.Seat)
	var states []string
	for _, r := range revs {
		states = append(states, string(r.Record.State))
	}
	if got := strings.Join(states, " "); got != "reserved reserved active stopping stopped" {
		t.Errorf("history %s", got)
	}
}

// Release before a Wait that proved the writer over refuses.
func TestReleaseNeedsWait(t *testing.T) {
	run := newRun(t)
	if err := run.Release(context.Background()); err == nil {
		t.Fatal("Release without Wait succeeded")
	}
}
