package lifecycle_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/internal/storetest"
	"github.com/claimstore/claimstore/lifecycle"
)

// failingAttacher cannot judge any run.
type failingAttacher struct{ got *lifecycle.Recorded }

func (a *failingAttacher) Attach(_ context.Context, rec lifecycle.Recorded) (lifecycle.Process, error) {
	*a.got = rec
	return nil, errors.New("no answer")
}

// An adopter that cannot judge the recorded run takes the claim over (its
// owner is gone) but leaves it held: uncertain, and Release refuses. The
// attacher is given what the claim recorded.
func TestAdoptUnjudgedStaysHeld(t *testing.T) {
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
	start, _ := s.Host().StartTime(sup.Process.Pid)
	boot, _ := s.Host().BootID()
	ns, _ := s.Host().PIDNamespace(sup.Process.Pid)
	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: sup.Process.Pid, Start: start, Boot: boot, PIDNS: ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run.Spawn(ctx, lifecycle.GroupStarter{}, lifecycle.Spec{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	inv := run.Process().ID()
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// While the owner lives, adoption is refused and publishes nothing.
	me, _ := s.Self(2)
	var got lifecycle.Recorded
	_, res, err := lifecycle.Adopt(ctx, s, seat, session, me, &lifecycle.AdoptOptions{Attacher: &failingAttacher{&got}})
	var ref *claimstore.Refusal
	if !errors.As(err, &ref) || ref.Code != claimstore.AlreadyActive || len(res.Published) != 0 {
		t.Fatalf("Adopt with the owner alive: %v, published %v; want already-active, nothing", err, res.Published)
	}

	sup.Process.Kill()
	sup.Wait()
	run2, _, err := lifecycle.Adopt(ctx, s, seat, session, me, &lifecycle.AdoptOptions{Attacher: &failingAttacher{&got}, Groups: &failingAttacher{&got}})
	if err == nil || !strings.Contains(err.Error(), "stays held") {
		t.Fatalf("Adopt: %v; want the claim adopted but held", err)
	}
	if got.ProcessGroup <= 0 {
		t.Errorf("attacher got no process group: %+v", got)
	}
	if got.InvocationID != inv || got.Unit != lifecycle.UnitFile(run.Claim.Record.UnitName()) {
		t.Errorf("attacher got %+v; want unit %s, invocation %s", got, lifecycle.UnitFile(run.Claim.Record.UnitName()), inv)
	}
	if err := run2.Release(context.Background()); err == nil {
		t.Fatal("Release of an unjudged run succeeded")
	}
	p, _ := s.Pair(context.Background(), seat, session)
	if !p.Held() || p.State() != claimstore.Uncertain {
		t.Errorf("pair %s, held %v; want uncertain, held", p.State(), p.Held())
	}
}
