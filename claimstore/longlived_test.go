package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Long-lived stores: whatever a Store remembers (listings, hints, the
// directories it made durable, the revisions it synced) must stay true
// across its lifetime, while other stores publish on the same keys.

// A long-lived store follows every revision other stores publish: it is
// refused while another claim holds the pair, and claims it at the right
// numbers once that claim is released, cycle after cycle, with releases
// through the same store in between.
func TestLongLivedStoreFollowsOtherStores(t *testing.T) {
	root := newRoot(t)
	a := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	var want uint64 // the revision count on each key
	for cycle := range 6 {
		// Another process's store, new each cycle, takes and releases
		// the pair; on even cycles it leaves it held while a tries.
		b := openStore(t, root, nil)
		cb := mustAcquire(t, b, seat, session)
		want++
		if err := b.Advance(context.Background(), cb, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		want++
		if _, err := a.Acquire(context.Background(), seat, session, fields(t, a)); !isRefusal(err, AlreadyActive) {
			t.Fatalf("cycle %d: a's acquire while b holds: %v, want already-active", cycle, err)
		}
		if err := b.Release(context.Background(), cb, NewProof(ProofCohort, "b")); err != nil {
			t.Fatal(err)
		}
		want++
		ca, err := a.Acquire(context.Background(), seat, session, fields(t, a))
		if err != nil {
			t.Fatalf("cycle %d: a's acquire after b released: %v", cycle, err)
		}
		want++
		if ca.SeatRev != want || ca.SessionRev != want {
			t.Fatalf("cycle %d: a claimed at %d/%d, want %d", cycle, ca.SeatRev, ca.SessionRev, want)
		}
		if err := a.Release(context.Background(), ca, NewProof(ProofCohort, "a")); err != nil {
			t.Fatal(err)
		}
		want++
		for _, k := range []Key{seat, session} {
			if diff := revNames(want); !equalStrings(diff, dirNames(t, a, k)) {
				t.Fatalf("cycle %d: %v holds %v, want %v", cycle, k, dirNames(t, a, k), diff)
			}
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A store that listed a key while it had a gap must go on reading it as
// damaged, and never publish into the gap, even after revisions were added
// above it; once an operator restores the missing revision, a new store
// reads the key whole.
func TestLongLivedStoreGapAtListing(t *testing.T) {
	root, s, seat, session := releasedPair(t)
	// r1 is lost (a restored root): the free head r2 sits above a gap.
	r1 := filepath.Join(s.KeyDir(session), RevisionName(1))
	saved := readRev(t, s, session, 1)
	if err := os.Remove(r1); err != nil {
		t.Fatal(err)
	}
	long := openStore(t, root, nil)
	for range 2 {
		h, err := long.Head(context.Background(), session)
		if err != nil || !h.Held() || h.Damage == nil {
			t.Fatalf("Head over a gap = %+v, %v; want damaged", h, err)
		}
		if _, err := long.Acquire(context.Background(), seat, session, fields(t, long)); !isRefusal(err, UnsafeReplacement) {
			t.Fatalf("acquire over a gap: %v, want unsafe-replacement", err)
		}
	}
	if _, err := os.Lstat(filepath.Join(s.KeyDir(session), RevisionName(3))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a revision was published above the gap: %v", err)
	}
	// Restored: a new store and the long-lived one read it free again.
	writeRev(t, s, session, 1, saved)
	for _, st := range []*Store{openStore(t, root, nil), long} {
		if h, err := st.Head(context.Background(), session); err != nil || h.Held() {
			t.Fatalf("after the restore: Head = %+v, %v; want free", h, err)
		}
	}
}

// Fencing is on revision numbers, not only claim ids: a key moved under a
// claim by another revision of the same claim (another process stepping
// it, classify adopting it) refuses the stale holder's next step before
// anything is published on either key.
func TestFenceOnRevisionNumbersSameClaim(t *testing.T) {
	for _, moved := range []Kind{KindSeat, KindSession} {
		t.Run(string(moved), func(t *testing.T) {
			root := newRoot(t)
			a := openStore(t, root, nil)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			stale := mustAcquire(t, a, seat, session)
			// A copy of the claim in another process steps one key.
			b := openStore(t, root, nil)
			other := *stale
			other.Record = stale.Record.clone()
			k := seat
			if moved == KindSession {
				k = session
			}
			next := other.Record.clone()
			next.State = Active
			if won, err := b.publish(context.Background(), k, 2, next); err != nil || !won {
				t.Fatalf("publish under the same claim: %v, %v", won, err)
			}
			before := map[Kind][]string{KindSeat: dirNames(t, a, seat), KindSession: dirNames(t, a, session)}
			err := a.Advance(context.Background(), stale, Patch{State: Stopping})
			if !isRefusal(err, UnsafeReplacement) {
				t.Fatalf("advance of a claim whose %s moved under it: %v, want unsafe-replacement", moved, err)
			}
			if err := a.Release(context.Background(), stale, NewProof(ProofCohort, "x")); !isRefusal(err, UnsafeReplacement) {
				t.Fatalf("release of a claim whose %s moved under it: %v, want unsafe-replacement", moved, err)
			}
			for kind, k := range map[Kind]Key{KindSeat: seat, KindSession: session} {
				if got := dirNames(t, a, k); !equalStrings(got, before[kind]) {
					t.Errorf("%s after the refused steps: %v, want %v (nothing published)", kind, got, before[kind])
				}
			}
		})
	}
}

// Releases and new claims through the same store, cycle after cycle: the
// store's hints and listings follow its own appends, and every number
// lands densely after the last.
func TestLongLivedStoreOwnCycles(t *testing.T) {
	_, s, seat, session := releasedPair(t)
	// The same store publishes again on both keys: the history grows
	// densely, each revision landing where the store's hint says.
	for i := range 3 {
		c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
	}
	if got := dirNames(t, s, seat); !equalStrings(got, revNames(8)) {
		t.Fatalf("seat history %v, want 8 dense revisions", got)
	}
}
