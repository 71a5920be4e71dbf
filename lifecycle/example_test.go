package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/lifecycle"
)

// A supervisor's whole lifecycle: acquire the pair, mark the spawn, start
// the writer through a Starter, advance to active, wait for the writer,
// release with the proof. A systemd supervisor passes a *unitctl.Manager
// (unitctl.Dial) as the Starter; this example runs the writer as a direct
// child in its own process group (GroupStarter), which needs no service
// manager.
func Example() {
	dir, _ := os.MkdirTemp("", "lifecycle-example")
	defer os.RemoveAll(dir)
	be, err := dirbackend.Open(filepath.Join(dir, "claims"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := claimstore.New(be, nil)
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-42")
	owner, _ := s.Self(1)

	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		fmt.Println(err) // a *claimstore.Refusal when the pair is held
		return
	}
	ctx := context.Background()
	// Spawn publishes the spawn marker, starts the writer, then publishes
	// active with the run's id. The writer finds its claim in CLAIMSTORE_*.
	err = run.Spawn(ctx, lifecycle.GroupStarter{}, lifecycle.Spec{
		Argv:   []string{"sh", "-c", `test -n "$CLAIMSTORE_CLAIM_ID" && exit 3`},
		Stdout: os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	x, err := run.Wait(ctx) // nil error: the writer is provably over
	if err != nil {
		fmt.Println("held:", err)
		return
	}
	fmt.Println("writer exit status:", x.Status)
	if err := run.Release(context.Background()); err != nil { // stopped, cohortProof naming the run
		fmt.Println(err)
		return
	}
	revs, _ := s.Revisions(context.Background(), seat)
	for _, r := range revs {
		fmt.Println(r.N, r.Record.State, r.Record.SpawnMarker(), r.Record.Proof != nil)
	}
	// Output:
	// writer exit status: 3
	// 1 reserved false false
	// 2 reserved true false
	// 3 active true false
	// 4 stopped true true
}
