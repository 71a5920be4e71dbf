package claimstore

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// A classification that loses a number after it published on the seat
// starts over, and its result still reports the seat revision it
// published: the one that goes on finds the seat at the outcome already
// and publishes only the session. Here the owner's advance published its
// seat revision before the classification read the pair and its session
// revision after; the owner is gone, and an active claim without a spawn
// marker is uncertain: the classification publishes that on the seat
// (r3), loses the session's r2 to the advance, and publishes it on the
// session at r3. A result
// reporting only the session (as it did) hides a seat revision it wrote
// from the operator and from every check that follows the seat.
func TestClassifyReportsWhatItPublishedBeforeItRaced(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		owner := openOn(t, root, liveHost())
		seat, session := testKeys(t)
		c := claim4100(t, owner, seat, session)
		between, resume := make(chan struct{}), make(chan struct{})
		owner.barrier = func(p Point) error {
			if p.Barrier == BarrierBetweenKeys {
				close(between)
				<-resume
			}
			return nil
		}
		advanced := make(chan error, 1)
		go func() { advanced <- owner.Advance(ctx, c, Patch{State: Active}) }()
		<-between
		// The owner's process is gone (same boot, no such pid).
		cl := openOn(t, root, &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{}})
		let := false
		cl.barrier = func(p Point) error {
			if p.Barrier == BarrierBetweenKeys && !let {
				let = true
				close(resume)
				if err := <-advanced; err != nil {
					t.Errorf("the owner's advance: %v", err)
				}
			}
			return nil
		}
		res, err := cl.Classify(ctx, seat, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !let {
			t.Fatal("the classification never published on the seat")
		}
		want := []Published{{Key: seat, Revision: 3, State: Uncertain}, {Key: session, Revision: 3, State: Uncertain}}
		if d := cmp.Diff(want, res.Published); d != "" {
			t.Errorf("published (-want +got):\n%s", d)
		}
		for _, k := range []Key{seat, session} {
			if h, err := cl.Head(ctx, k); err != nil || h.N != 3 || h.State() != Uncertain {
				t.Errorf("%s: head r%d %s %v, want r3 uncertain", k, h.N, h.State(), err)
			}
		}
	})
}
