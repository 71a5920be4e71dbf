package claimstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// resumeView is what a caller of Resume acts on: the revisions the claim is
// fenced at, the states of its record and of its session's, and whether the
// last step was cut.
type resumeView struct {
	SeatRev, SessionRev      uint64
	State, SessionState      State
	Cut                      bool
	RecordKey, SessionRecKey Key
}

func viewOfResumed(r *Resumed) resumeView {
	return resumeView{
		SeatRev: r.Claim.SeatRev, SessionRev: r.Claim.SessionRev,
		State: r.Claim.Record.State, SessionState: r.SessionRecord.State,
		Cut:       r.Cut,
		RecordKey: r.Claim.Record.Key, SessionRecKey: r.SessionRecord.Key,
	}
}

// resumeRefusal is the refusal Resume words for claim id on seat and
// session.
func resumeRefusal(id string, seat, session Key, reason string) *Refusal {
	return &Refusal{
		Code: UnsafeReplacement, Keys: []Key{seat, session}, ClaimID: id, Reason: reason,
		Hint: "read the heads with `claimctl show` and the history with `claimctl log`; name the claim's own last revisions with --seat-rev and --session-rev",
	}
}

// wantResumeRefusal checks that err is exactly want.
func wantResumeRefusal(t *testing.T, what string, r *Resumed, err error, want *Refusal) {
	t.Helper()
	var ref *Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("%s: %+v, %v; want the refusal %v", what, r, err, want)
	}
	if d := cmp.Diff(want, ref); d != "" {
		t.Errorf("%s: refusal (-want +got):\n%s", what, d)
	}
	if r != nil {
		t.Errorf("%s: a refusal with a result: %+v", what, r)
	}
}

// Resume takes the pair in the order a pair is named, seat then session:
// the keys the other way round, or an invalid one, are the caller's error,
// before anything is read.
func TestResumeChecksTheKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)
		r, err := s.Resume(ctx, c.ID, session, seat, nil)
		var ke *KeyError
		if !errors.As(err, &ke) || r != nil {
			t.Fatalf("Resume with the keys swapped: %+v, %v; want a *KeyError", r, err)
		}
		want := &KeyError{Field: "kind", Value: string(KindSession), Reason: "the first key of a pair must be a seat key"}
		if d := cmp.Diff(want, ke); d != "" {
			t.Errorf("Resume with the keys swapped: (-want +got):\n%s", d)
		}
		if r, err := s.Resume(ctx, c.ID, seat, seat, &Fence{Seat: 1, Session: 1}); !errors.As(err, &ke) || r != nil || ke.Reason != "the second key of a pair must be a session key" {
			t.Errorf("Resume with two seats: %+v, %v; want a *KeyError on the second key", r, err)
		}
	})
}

// A key with no revision at all: the claim is not found when neither key
// has a revision of it, and refused when the other key has (an acquire cut
// between the keys leaves the session empty).
func TestResumeOnAnEmptyKey(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)
		mustAcquire(t, s, seatKey(t, "other"), sessionKey(t, "other")) // the root exists
		seat, session := seatKey(t, "fresh"), sessionKey(t, "fresh")
		id := NewClaimID()

		r, err := s.Resume(ctx, id, seat, session, nil)
		var nf *ClaimNotFoundError
		if !errors.As(err, &nf) || r != nil {
			t.Fatalf("Resume on two empty keys: %+v, %v; want *ClaimNotFoundError", r, err)
		}
		want := &ClaimNotFoundError{ID: id, Seat: seat, Session: session, SeatDir: s.KeyDir(seat), SessionDir: s.KeyDir(session)}
		if d := cmp.Diff(want, nf); d != "" {
			t.Errorf("Resume on two empty keys: (-want +got):\n%s", d)
		}

		cut := errors.New("cut between the keys")
		cs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
			if pt.Barrier == BarrierBetweenKeys {
				return cut
			}
			return nil
		}})
		f := fields(t, cs)
		f.ClaimID = id
		if _, err := cs.Acquire(ctx, seat, session, f); !errors.Is(err, cut) {
			t.Fatalf("cut Acquire: %v, want the cut", err)
		}
		r, err = s.Resume(ctx, id, seat, session, nil)
		wantResumeRefusal(t, "Resume of an acquire cut before the session", r, err,
			resumeRefusal(id, seat, session, fmt.Sprintf("%s has no revisions, so claim %s does not hold it", session, id)))
	})
}

// A damaged revision, fenced on or at the head, is refused: it says nothing
// about whose it is.
func TestResumeRefusesADamagedRevision(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		s := openStore(t, newRoot(t), nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)
		if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		writeRev(t, s, seat, 3, []byte("not a record\n"))

		rev, err := s.ReadRevision(ctx, seat, 3)
		if err != nil || rev.Damage == nil || rev.Record != nil {
			t.Fatalf("ReadRevision of the damaged revision: %+v, %v; want it damaged", rev, err)
		}
		r, err := s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 3, Session: 2})
		wantResumeRefusal(t, "Resume fenced on a damaged revision", r, err,
			resumeRefusal(c.ID, seat, session, fmt.Sprintf("revision 3 of %s is damaged: %v", seat, rev.Damage)))

		h, err := s.Head(ctx, seat)
		if err != nil || h.N != 3 || h.Damage == nil {
			t.Fatalf("the seat's head: %+v, %v; want r3, damaged", h, err)
		}
		r, err = s.Resume(ctx, c.ID, seat, session, nil)
		wantResumeRefusal(t, "Resume on a damaged head", r, err,
			resumeRefusal(c.ID, seat, session, fmt.Sprintf("revision 3 of %s is damaged: %v", seat, h.Damage)))
	})
}

// Only the seat revision right after the fenced one, the claim's own, with
// the session where the fence says, is a cut step: a fence on another
// claim's revision is refused even when the claim's revision follows it, a
// fence further behind is kept as given, and a step that completed (the
// session moved on too) leaves the fence as it is, for the step to refuse.
func TestResumeTakesOnlyTheNextSeatRevisionAsCut(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)

		// Another claim's revision, fenced on: the seat's next revision is
		// the claim's and the session is at the fence, but revision 2 is
		// not the claim's.
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c1 := mustAcquire(t, s, seat, session)
		if err := s.Release(ctx, c1, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
		c2 := mustAcquire(t, s, seat, session)
		if c2.SeatRev != 3 || c2.SessionRev != 3 {
			t.Fatalf("second claim at %d/%d, want 3/3", c2.SeatRev, c2.SessionRev)
		}
		r, err := s.Resume(ctx, c2.ID, seat, session, &Fence{Seat: 2, Session: 3})
		wantResumeRefusal(t, "Resume fenced on the previous claim's seat revision", r, err,
			resumeRefusal(c2.ID, seat, session, fmt.Sprintf("revision 2 of %s belongs to claim %s, not %s", seat, c1.ID, c2.ID)))

		// A step that completed: the seat's next revision is the claim's,
		// and so is the session's.
		seat, session = seatKey(t, "done"), sessionKey(t, "done")
		c := mustAcquire(t, s, seat, session)
		if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		r, err = s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 1, Session: 1})
		if err != nil {
			t.Fatalf("Resume on a stale fence of a completed step: %v", err)
		}
		want := resumeView{SeatRev: 1, SessionRev: 1, State: Reserved, SessionState: Reserved, RecordKey: seat, SessionRecKey: session}
		if d := cmp.Diff(want, viewOfResumed(r)); d != "" {
			t.Errorf("Resume on a stale fence of a completed step (-want +got):\n%s", d)
		}

		// A fence two seat revisions behind, the session's at the fence: the
		// seat's head is the claim's, but not the next revision.
		seat, session = seatKey(t, "behind"), sessionKey(t, "behind")
		c = mustAcquire(t, s, seat, session)
		if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
			t.Fatal(err)
		}
		cutAdvance(t, root, c, Patch{State: Uncertain})
		s = openStore(t, root, nil)
		if h, err := s.Head(ctx, seat); err != nil || h.N != 3 || h.Record == nil || h.Record.ClaimID != c.ID {
			t.Fatalf("the seat after the cut: %+v, %v; want the claim's r3", h, err)
		}
		r, err = s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 1, Session: 2})
		if err != nil {
			t.Fatalf("Resume two seat revisions behind: %v", err)
		}
		want = resumeView{SeatRev: 1, SessionRev: 2, State: Reserved, SessionState: Active, Cut: true, RecordKey: seat, SessionRecKey: session}
		if d := cmp.Diff(want, viewOfResumed(r)); d != "" {
			t.Errorf("Resume two seat revisions behind (-want +got):\n%s", d)
		}
		// The fence one behind is the cut step.
		r, err = s.Resume(ctx, c.ID, seat, session, &Fence{Seat: 2, Session: 2})
		if err != nil {
			t.Fatalf("Resume one seat revision behind: %v", err)
		}
		want = resumeView{SeatRev: 3, SessionRev: 2, State: Uncertain, SessionState: Active, Cut: true, RecordKey: seat, SessionRecKey: session}
		if d := cmp.Diff(want, viewOfResumed(r)); d != "" {
			t.Errorf("Resume one seat revision behind (-want +got):\n%s", d)
		}
	})
}

// Resume returns what it could not read: a head it cannot read (here a
// cancelled context), or this machine's id.
func TestResumeReadErrors(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		s := openStore(t, root, nil)
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		c := mustAcquire(t, s, seat, session)

		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		r, err := s.Resume(cancelled, c.ID, seat, session, nil)
		if !errors.Is(err, context.Canceled) || r != nil {
			t.Fatalf("Resume with a cancelled context: %+v, %v; want context.Canceled", r, err)
		}
		// The backend's own error (the directory backend's is the
		// context's, etcd's names what it read), behind the key.
		if want := fmt.Sprintf("reading the head of %s in %s: ", seat, s.KeyDir(seat)); !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Resume with a cancelled context: %q, want it to begin %q", err, want)
		}

		bad := errors.New("no machine id")
		broken := openStore(t, root, &TOpts{Host: brokenHost{thisHost, bad, nil}})
		r, err = broken.Resume(ctx, c.ID, seat, session, nil)
		if !errors.Is(err, bad) || r != nil {
			t.Fatalf("Resume without a machine id: %+v, %v; want the error", r, err)
		}
		if want := "cannot read this machine's id: no machine id"; err.Error() != want {
			t.Errorf("Resume without a machine id: %q, want %q", err, want)
		}
	})
}
