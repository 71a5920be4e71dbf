package claimstore

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// cutAdvance advances c with p and cuts the step between the keys (an
// error at BarrierBetweenKeys, as an I/O error after the seat's link would
// leave it): the seat has the step, the session does not.
func cutAdvance(t *testing.T, root string, c *Claim, p Patch) {
	t.Helper()
	cut := errors.New("cut between the keys")
	s := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
		if pt.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	if err := s.Advance(context.Background(), c, p); !errors.Is(err, cut) {
		t.Fatalf("cut Advance: %v, want the cut", err)
	}
}

// Resume rebuilds a claim from its heads or from a fence, tells a cut step
// from a head that moved, and FinishStep publishes the cut step's missing
// half on the session, after which the claim steps on as usual.
func TestResumeAndFinishStep(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)

		r, err := s.Resume(ctx, c.ID, seat, session, nil)
		if err != nil {
			t.Fatalf("Resume on the heads: %v", err)
		}
		if r.Cut || r.Claim.SeatRev != 1 || r.Claim.SessionRev != 1 || r.Claim.Record.State != Reserved {
			t.Fatalf("Resume on the heads: cut %v, revisions %d/%d, state %s; want not cut, 1/1, reserved", r.Cut, r.Claim.SeatRev, r.Claim.SessionRev, r.Claim.Record.State)
		}

		p := Patch{State: Active, Fields: map[string]any{"generation": 2}}
		cutAdvance(t, root, c, p)
		s = openStore(t, root, nil)
		for _, at := range []*Fence{nil, {Seat: 1, Session: 1}} {
			r, err := s.Resume(ctx, c.ID, seat, session, at)
			if err != nil {
				t.Fatalf("Resume at %v after the cut: %v", at, err)
			}
			if !r.Cut || r.Claim.SeatRev != 2 || r.Claim.SessionRev != 1 || r.Claim.Record.State != Active || r.SessionRecord.State != Reserved {
				t.Fatalf("Resume at %v after the cut: cut %v, revisions %d/%d, state %s, session's %s; want cut, 2/1, active, reserved",
					at, r.Cut, r.Claim.SeatRev, r.Claim.SessionRev, r.Claim.Record.State, r.SessionRecord.State)
			}
			if !r.Claim.Record.Satisfies(p) {
				t.Errorf("the cut step's record does not satisfy its own patch")
			}
			for _, other := range []Patch{{State: Uncertain}, {Fields: map[string]any{"generation": 3}}, {State: Stopped, Proof: NewProof(ProofCohort, "x")}} {
				if r.Claim.Record.Satisfies(other) {
					t.Errorf("the cut step's record satisfies %+v, another step", other)
				}
			}
		}
		r, err = s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 1, Session: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishStep(ctx, r.Claim); err != nil {
			t.Fatalf("FinishStep: %v", err)
		}
		if r.Claim.SessionRev != 2 {
			t.Errorf("FinishStep: session revision %d, want 2", r.Claim.SessionRev)
		}
		h, err := s.Head(ctx, session)
		if err != nil || h.N != 2 || h.Record == nil || h.Record.State != Active || !sameContent(h.Record, r.Claim.Record) {
			t.Fatalf("the session after FinishStep: %+v, %v; want r2, the seat's record", h, err)
		}
		// A second FinishStep finds the session moved on (its own revision
		// now): refused, nothing published.
		again := *r.Claim
		again.SessionRev = 1
		var ref *Refusal
		if err := s.FinishStep(ctx, &again); !errors.As(err, &ref) || ref.Code != UnsafeReplacement || !strings.Contains(ref.Reason, "moved under claim") {
			t.Errorf("FinishStep on a session that moved: %v, want unsafe-replacement, moved", err)
		}
		r, err = s.Resume(ctx, c.ID, seat, session, nil)
		if err != nil || r.Cut || r.Claim.SeatRev != 2 || r.Claim.SessionRev != 2 {
			t.Fatalf("Resume after FinishStep: %+v, %v; want not cut, 2/2", r, err)
		}
		if err := s.Release(ctx, r.Claim, NewProof(ProofCohort, "done")); err != nil {
			t.Fatalf("Release after FinishStep: %v", err)
		}
		if !r.Claim.Record.Satisfies(Patch{State: Stopped, Proof: NewProof(ProofCohort, "done")}) {
			t.Errorf("a released record does not satisfy its release")
		}
		if r.Claim.Record.Satisfies(Patch{State: Stopped, Proof: NewProof(ProofCohort, "other")}) || r.Claim.Record.Satisfies(Patch{}) {
			t.Errorf("a released record satisfies another release, or an advance")
		}
	})
}

// Resume refuses what is not the claim's, and says "not found" only when
// no revision of either key belongs to the claim.
func TestResumeRefusals(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)
		if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}

		var nf *ClaimNotFoundError
		if _, err := s.Resume(ctx, "c0000000000000000000000ff", seat, session, nil); !errors.As(err, &nf) || nf.ID != "c0000000000000000000000ff" {
			t.Errorf("Resume of an unknown claim: %v, want *ClaimNotFoundError", err)
		}
		if _, err := s.Resume(ctx, "c0000000000000000000000ff", seat, session, &Fence{Seat: 9, Session: 9}); !errors.As(err, &nf) {
			t.Errorf("Resume of an unknown claim at a fence: %v, want *ClaimNotFoundError", err)
		}
		var ref *Refusal
		if _, err := s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 9, Session: 2}); !errors.As(err, &ref) || ref.Code != UnsafeReplacement || !strings.Contains(ref.Reason, "has no revision 9") {
			t.Errorf("Resume at a revision that does not exist: %v, want unsafe-replacement, no revision 9", err)
		}
		// The claim's old revisions, fenced on, are the claim's: a stale
		// fence resumes, and the step it then takes is refused by the
		// fence, not by Resume.
		r, err := s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 1, Session: 1})
		if err != nil {
			t.Fatalf("Resume at the claim's older revisions: %v", err)
		}
		if err := s.Advance(ctx, r.Claim, Patch{State: Uncertain}); !errors.As(err, &ref) || ref.Code != UnsafeReplacement {
			t.Errorf("a step on a stale fence: %v, want unsafe-replacement", err)
		}
		// Another claim at the heads.
		if err := s.Release(ctx, c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
		c2 := mustAcquire(t, s, seat, session)
		if _, err := s.Resume(ctx, c.ID, seat, session, nil); !errors.As(err, &ref) || !strings.Contains(ref.Reason, "belongs to claim "+c2.ID) {
			t.Errorf("Resume of a claim whose keys another claim holds: %v, want a refusal naming %s", err, c2.ID)
		}
		// A claim of another machine is refused as foreign.
		other := openStore(t, root, &TOpts{Host: foreignHost})
		if _, err := other.Resume(ctx, c2.ID, seat, session, nil); !errors.As(err, &ref) || ref.Code != ForeignHost {
			t.Errorf("Resume on another machine: %v, want foreign-host", err)
		}
		if st, why := other.JudgeOwner(c2.Record); st != "unknown" || !strings.Contains(why, "another machine") {
			t.Errorf("JudgeOwner on another machine: %s (%s), want unknown", st, why)
		}
		if st, _ := s.JudgeOwner(c2.Record); st != "live" {
			t.Errorf("JudgeOwner of this live process: %s, want live", st)
		}
	})
}

// HeadsOfClaim and FindClaim find a claim's keys by their heads, and a
// partner by the pair member when only one key holds the claim.
func TestFindClaim(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		mustAcquire(t, s, seatKey(t, "other"), sessionKey(t, "y"))
		c := mustAcquire(t, s, seat, session)
		gotSeat, gotSession, err := s.FindClaim(ctx, c.ID)
		if err != nil || gotSeat == nil || *gotSeat != seat || gotSession == nil || *gotSession != session {
			t.Fatalf("FindClaim: %v, %v, %v; want %v, %v", gotSeat, gotSession, err, seat, session)
		}
		// The seat steps on alone (a cut): the session's head is still the
		// claim's, the seat's too; then another claim cannot take the seat
		// while it is held, so cut the acquire of a fresh pair instead: its
		// session never receives the claim, and the pair member names it.
		cut := errors.New("cut")
		cs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
			if pt.Barrier == BarrierBetweenKeys {
				return cut
			}
			return nil
		}})
		lone, loneSession := seatKey(t, "lone"), sessionKey(t, "never")
		f := fields(t, cs)
		f.ClaimID = "c0000000000000000000000b1"
		if _, err := cs.Acquire(ctx, lone, loneSession, f); !errors.Is(err, cut) {
			t.Fatalf("cut Acquire: %v", err)
		}
		gotSeat, gotSession, err = s.FindClaim(ctx, f.ClaimID)
		if err != nil || gotSeat == nil || *gotSeat != lone || gotSession == nil || *gotSession != loneSession {
			t.Fatalf("FindClaim of a cut acquire: %v, %v, %v; want %v and, by the pair member, %v", gotSeat, gotSession, err, lone, loneSession)
		}
		n := 0
		if err := s.HeadsOfClaim(ctx, f.ClaimID, func(k Key, rev uint64, rec *Record) bool { n++; return true }); err != nil || n != 1 {
			t.Errorf("HeadsOfClaim of a cut acquire: %d heads, %v; want the seat's alone", n, err)
		}
		if gotSeat, gotSession, err := s.FindClaim(ctx, "c0000000000000000000000ff"); err != nil || gotSeat != nil || gotSession != nil {
			t.Errorf("FindClaim of an unknown claim: %v, %v, %v; want nothing", gotSeat, gotSession, err)
		}
	})
}
