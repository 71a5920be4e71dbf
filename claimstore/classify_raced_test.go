package claimstore

import (
	"context"
	"errors"
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
		between, resume := pauseBetweenKeys(owner)
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

// An acquire whose session revision was taken while it stood between the
// keys finishes the session only while its seat revision is still the
// seat's head. Here the acquirer's machine is decommissioned between its
// seat's link and its session's, and a classification frees the pair
// (seat r2 and session r1, stopped): the acquire's session r1 is lost, and
// the session is free at r1. Publishing above it, as the acquire did over
// any free session head, held the session for a claim whose seat revision
// was already freed: the pair held by nothing that could run, until a
// classification published its proof on a seat another claim had freed
// (TestEtcdFaultsLinearizable caught that, once in many runs, after a
// reply lost to an etcd fault stretched an acquire over seven revisions of
// its seat). It is refused, and the pair stays free.
func TestAcquireDoesNotFinishTheSessionOnceItsSeatMoved(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		here := openStore(t, root, nil) // the operator's machine
		dead := openStore(t, root, &TOpts{Host: foreignHost})
		seat, session := testKeys(t)
		between, resume := pauseBetweenKeys(dead)
		acquired := make(chan error, 1)
		go func() {
			_, err := dead.Acquire(ctx, seat, session, AcquireFields{Owner: owner4100})
			acquired <- err
		}()
		select {
		case <-between:
		case err := <-acquired:
			t.Fatalf("the acquire ended before its session's publish: %v", err)
		}
		if _, err := here.Decommission(ctx, DecommissionOptions{Machine: otherMachine, Evidence: EvidencePoweredOff, Reason: "gone"}); err != nil {
			t.Fatal(err)
		}
		res, err := here.Classify(ctx, seat, session, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []Published{{Key: seat, Revision: 2, State: Stopped}, {Key: session, Revision: 1, State: Stopped}}
		if d := cmp.Diff(want, res.Published); d != "" {
			t.Fatalf("the classification published (-want +got):\n%s", d)
		}
		close(resume)
		err = <-acquired
		var r *Refusal
		if !errors.As(err, &r) {
			t.Errorf("the acquire whose seat was freed under it: %v, want a refusal", err)
		}
		for k, n := range map[Key]uint64{seat: 2, session: 1} {
			if h, err := here.Head(ctx, k); err != nil || h.N != n || h.Held() {
				t.Errorf("%s: head r%d held=%v %v, want r%d free", k, h.N, h.Held(), err, n)
			}
		}
	})
}

// pauseBetweenKeys stops s's next operation between its keys: between is
// closed when it gets there, and it goes on once resume is closed.
func pauseBetweenKeys(s *Store) (between, resume chan struct{}) {
	between, resume = make(chan struct{}), make(chan struct{})
	s.barrier = func(p Point) error {
		if p.Barrier == BarrierBetweenKeys {
			close(between)
			<-resume
		}
		return nil
	}
	return between, resume
}
