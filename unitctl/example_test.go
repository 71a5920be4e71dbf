package unitctl_test

import (
	"context"
	"fmt"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/lifecycle"
	"github.com/claimstore/claimstore/unitctl"
	"github.com/claimstore/claimstore/unitprobe"
)

// A supervisor running its writer as a transient systemd service: the
// lifecycle package orders the steps, a Manager starts and follows the
// unit. (Not run as a test: it needs a user manager; TestLifecycleOnSystemd
// runs the same steps on a real one.)
func ExampleManager() {
	ctx := context.Background()
	be, _ := dirbackend.Open("/var/lib/claimstore", nil)
	s, _ := claimstore.New(be, nil)
	seat, _ := claimstore.SeatKey("s1", "demo", "/srv/ws")
	session, _ := claimstore.SessionKey("sess-42")
	owner, _ := s.Self(1)

	units, err := unitctl.Dial(ctx, &unitprobe.Options{User: true})
	if err != nil {
		fmt.Println(err) // no manager: nothing taken, nothing started
		return
	}
	defer units.Close()
	run, err := lifecycle.Acquire(context.Background(), s, seat, session, claimstore.AcquireFields{Owner: owner})
	if err != nil {
		fmt.Println(err)
		return
	}
	// mosaic-chat-<claim id>.service; invocationId recorded with active.
	if err := run.Spawn(ctx, units, lifecycle.Spec{Argv: []string{"my-writer", "--flag"}}); err != nil {
		fmt.Println(err)
	}
	x, err := run.Wait(ctx)
	if err != nil {
		fmt.Println("claim stays held:", err)
		return
	}
	if err := run.Release(context.Background()); err != nil { // cohortProof "unit … invocation … result …"
		fmt.Println(err)
	}
	fmt.Println("writer exit status", x.Status)
}
