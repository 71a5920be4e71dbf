package claimstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
	"github.com/google/go-cmp/cmp"
)

// gapHistory acquires seat and session, steps the claim to four revisions
// on each key (the last a release when release is set) and removes
// revision 3 of the seat by hand: a seat whose history has a gap below its
// top revision 4, which the probe finds (it doubles past the gap: 1, 2, 4).
// It returns the claim as it was before the gap.
func gapHistory(t *testing.T, s *Store, seat, session Key, release bool) *Claim {
	t.Helper()
	ctx := context.Background()
	c := mustAcquire(t, s, seat, session)
	for _, st := range []State{Active, Stopping} {
		if err := s.Advance(ctx, c, Patch{State: st}); err != nil {
			t.Fatal(err)
		}
	}
	if release {
		if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
	} else if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	if c.SeatRev != 4 {
		t.Fatalf("the claim is at seat revision %d, want 4", c.SeatRev)
	}
	removeRev(t, s, seat, 3)
	return c
}

// seatGap is the gap gapHistory leaves, as s reports it.
func seatGap(s *Store, seat Key) *GapError {
	return &GapError{Key: seat, Top: 4, Gaps: []Gap{{From: 3, To: 3}}, Dir: s.KeyDir(seat), root: s.Root()}
}

// refusalOf returns err as a refusal, failing the test if it is not one.
func refusalOf(t *testing.T, what string, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("%s: %v, want a refusal", what, err)
	}
	return r
}

// An acquire over a key whose history has a gap is refused by naming the
// gap, with the gap's own hint (fsck, the log, a restore by hand), not as
// a mere damaged head.
func TestAcquireOverAGapNamesTheGap(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		gapHistory(t, openStore(t, root, nil), seat, session, true)

		s := openStore(t, root, nil)
		p, err := s.Pair(context.Background(), seat, session)
		if err != nil {
			t.Fatal(err)
		}
		var gap *GapError
		if p.Seat.Record != nil || !errors.As(p.Seat.Damage, &gap) {
			t.Fatalf("the seat's head: %+v; want it damaged by the gap", p.Seat)
		}
		want := seatGap(s, seat)
		got := s.Refusal(p)
		wantRefusal := &Refusal{Code: UnsafeReplacement, Keys: []Key{seat, session}, Reason: want.Error(), Hint: want.Hint()}
		if diff := cmp.Diff(wantRefusal, got); diff != "" {
			t.Errorf("Refusal of the pair (-want +got):\n%s", diff)
		}
		_, err = s.Acquire(context.Background(), seat, session, fields(t, s))
		if diff := cmp.Diff(wantRefusal, refusalOf(t, "Acquire over the gap", err)); diff != "" {
			t.Errorf("Acquire over the gap (-want +got):\n%s", diff)
		}
	})
}

// A step of a claim whose seat's history lost a revision under it is
// refused by naming the gap, with the gap's hint, before anything is
// published.
func TestStepOverAGapNamesTheGap(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		root := newRoot(t)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := gapHistory(t, openStore(t, root, nil), seat, session, false)

		// A fresh store: the claim's own-revision fast path does not apply,
		// the seat's head is read to publish on.
		s := openStore(t, root, nil)
		before := dirNames(t, s, seat)
		err := s.Advance(context.Background(), c, Patch{State: Stopping})
		want := seatGap(s, seat)
		wantRefusal := &Refusal{Code: UnsafeReplacement, Keys: []Key{seat, session}, ClaimID: c.ID, Reason: want.Error(), Hint: want.Hint()}
		if diff := cmp.Diff(wantRefusal, refusalOf(t, "Advance over the gap", err)); diff != "" {
			t.Errorf("Advance over the gap (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(before, dirNames(t, s, seat)); diff != "" {
			t.Errorf("the seat's revisions after the refused step (-before +after):\n%s", diff)
		}
		if c.SeatRev != 4 || c.SessionRev != 4 {
			t.Errorf("the claim is at %d/%d after the refused step, want 4/4", c.SeatRev, c.SessionRev)
		}
	})
}

// A head whose census shows a gap but whose listing, taken to name the
// gap, fails, reads damaged as the census saw it: the revision above a
// history that is not dense. The failed listing is not taken for a gap of
// its own.
func TestHeadOverAGapWhoseListingFails(t *testing.T) {
	root := newRoot(t)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	gapHistory(t, openStore(t, root, nil), seat, session, true)

	// Count the seat directory's listings (a census's scan among them)
	// in a fault-free read of the head, then fail the last of them: the
	// listing the second look takes to name the gap.
	var listings int
	count := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpReadDir, Kind: errorfs.Fail, Nth: 1 << 30, Path: func(p string) bool {
		if strings.HasSuffix(p, seat.Hash()) {
			listings++
		}
		return false
	}})
	if _, err := openStore(t, root, &TOpts{FS: count}).Head(context.Background(), seat); err != nil {
		t.Fatal(err)
	}
	if listings != 4 {
		t.Fatalf("a head over the gap lists the seat %d times, want 4 (census and listing, twice)", listings)
	}
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpReadDir, Kind: errorfs.Fail, Err: syscall.EIO, Nth: listings, Times: 1, Path: errorfs.Suffix(seat.Hash())})
	s := openStore(t, root, &TOpts{FS: efs})
	h, err := s.Head(context.Background(), seat)
	if err != nil {
		t.Fatal(err)
	}
	want := &fs.PathError{Op: "read head", Path: s.RevisionPath(seat, 4), Err: &DamageError{Reason: "revision 4 exists, but the history below it is not dense"}}
	got := headSummary{Key: h.Key, N: h.N, Record: h.Record != nil, Held: h.Held(), Damage: fmt.Sprint(h.Damage)}
	if diff := cmp.Diff(headSummary{Key: seat, N: 4, Held: true, Damage: want.Error()}, got); diff != "" {
		t.Errorf("the head (-want +got):\n%s", diff)
	}
	var gap *GapError
	if errors.As(h.Damage, &gap) {
		t.Errorf("the damage is a gap %+v, from a listing that failed", gap)
	}
}

// A seat with a long history (long enough for a backend to count it
// rather than read it, as etcd's Head and Census do from 32 revisions) is
// read free by a new store and acquired on, its free head confirmed with
// the census taken with it; the same history with a revision lost far
// below its head reads damaged by the gap, not free, and is not acquired.
func TestLongFreeHistoryAndAGapBelowIt(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		w := openStore(t, root, nil)
		const lifecycles = 10 // 40 seat revisions
		seats := []Key{seatKey(t, "whole"), seatKey(t, "gap")}
		for _, seat := range seats {
			for i := 0; i < lifecycles; i++ {
				c := mustAcquire(t, w, seat, sessionKey(t, fmt.Sprintf("%s-%d", seat.Seat, i)))
				for _, st := range []State{Active, Stopping} {
					if err := w.Advance(ctx, c, Patch{State: st}); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
					t.Fatal(err)
				}
			}
		}
		removeRev(t, w, seats[1], 17)

		s := openStore(t, root, nil)
		h, err := s.Head(ctx, seats[0])
		if err != nil || h.Held() || h.N != 4*lifecycles {
			t.Fatalf("the long free seat's head: %+v, %v; want free at %d", h, err, 4*lifecycles)
		}
		c, err := s.Acquire(ctx, seats[0], sessionKey(t, "whole-next"), fields(t, s))
		if err != nil || c.SeatRev != 4*lifecycles+1 {
			t.Fatalf("acquire on the long free seat: %+v, %v; want seat revision %d", c, err, 4*lifecycles+1)
		}

		h, err = s.Head(ctx, seats[1])
		var gap *GapError
		if err != nil || !h.Held() || !errors.As(h.Damage, &gap) || cmp.Diff([]Gap{{From: 17, To: 17}}, gap.Gaps) != "" {
			t.Fatalf("the long seat with a gap: %+v (damage %v), %v; want it damaged by the gap at 17", h, h.Damage, err)
		}
		if _, err := s.Acquire(ctx, seats[1], sessionKey(t, "gap-next"), fields(t, s)); !isRefusal(err, UnsafeReplacement) {
			t.Errorf("acquire over the gap: %v, want unsafe-replacement", err)
		}
	})
}
