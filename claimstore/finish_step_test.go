package claimstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cutClaim acquires seat/session on a fresh directory root, advances to
// active and cuts an advance to uncertain between the keys (seat r3,
// session r2), and returns the store and the claim as Resume rebuilds it.
func cutClaim(t *testing.T) (root string, s *Store, seat, session Key, c *Claim) {
	t.Helper()
	ctx := context.Background()
	root = newRoot(t)
	s = openStore(t, root, nil)
	seat, session = seatKey(t, "s"), sessionKey(t, "x")
	c = mustAcquire(t, s, seat, session)
	if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	cutAdvance(t, root, c, Patch{State: Uncertain})
	r, err := s.Resume(ctx, c.ID, seat, session, nil)
	if err != nil || !r.Cut || r.Claim.SeatRev != 3 || r.Claim.SessionRev != 2 {
		t.Fatalf("Resume after the cut: %+v, %v; want cut at 3/2", r, err)
	}
	return root, s, seat, session, r.Claim
}

// CutSince tells a step cut between the keys from one that published on
// neither key or on both, from the numbers the claim stood at before it.
func TestCutSince(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	c := mustAcquire(t, s, seatKey(t, "s"), sessionKey(t, "x"))
	seatRev, sessionRev := c.SeatRev, c.SessionRev
	if c.CutSince(seatRev, sessionRev) {
		t.Error("CutSince before any step: true")
	}
	if err := s.Advance(ctx, c, Patch{State: Active}); err != nil {
		t.Fatal(err)
	}
	if c.CutSince(seatRev, sessionRev) {
		t.Errorf("CutSince(%d, %d) after a whole step (now %d/%d): true", seatRev, sessionRev, c.SeatRev, c.SessionRev)
	}
	seatRev, sessionRev = c.SeatRev, c.SessionRev
	cutAt(s, BarrierBetweenKeys)
	if err := s.Advance(ctx, c, Patch{State: Stopping}); !errors.Is(err, errCrash) {
		t.Fatalf("Advance cut between the keys: %v", err)
	}
	if !c.CutSince(seatRev, sessionRev) {
		t.Errorf("CutSince(%d, %d) after a step cut between the keys (now %d/%d): false", seatRev, sessionRev, c.SeatRev, c.SessionRev)
	}
}

// sessionHeadAt checks that the session's head is still revision n.
func sessionHeadAt(t *testing.T, s *Store, session Key, n uint64) {
	t.Helper()
	nums, err := s.RevisionNumbers(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := uint64(1); i <= n; i++ {
		want = append(want, i)
	}
	if d := cmp.Diff(want, nums); d != "" {
		t.Errorf("the session's revisions (-want +got):\n%s", d)
	}
}

// finishRefusal is the refusal FinishStep words when the session moved.
func finishRefusal(c *Claim, reason string) *Refusal {
	return &Refusal{Code: UnsafeReplacement, Keys: []Key{c.Seat, c.Session}, ClaimID: c.ID, Reason: reason,
		Hint: "read the heads with `claimctl show` and the history with `claimctl log`"}
}

func wantFinishRefusal(t *testing.T, what string, err error, want *Refusal) {
	t.Helper()
	var ref *Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("%s: %v; want the refusal %v", what, err, want)
	}
	if d := cmp.Diff(want, ref); d != "" {
		t.Errorf("%s: refusal (-want +got):\n%s", what, d)
	}
}

// FinishStep on what is not a claim is ErrNotOwned, before anything is
// read.
func TestFinishStepNotAClaim(t *testing.T) {
	_, s, seat, session, c := cutClaim(t)
	ctx := context.Background()
	if err := s.FinishStep(ctx, nil); !errors.Is(err, ErrNotOwned) {
		t.Errorf("FinishStep(nil): %v, want ErrNotOwned", err)
	}
	noRecord := *c
	noRecord.Record = nil
	swapped := *c
	swapped.Seat, swapped.Session = session, seat
	for _, bad := range []*Claim{&noRecord, &swapped} {
		if err := s.FinishStep(ctx, bad); !errors.Is(err, ErrNotOwned) {
			t.Errorf("FinishStep(%+v): %v, want ErrNotOwned", bad, err)
		}
	}
	sessionHeadAt(t, s, session, 2)
}

// A session that cannot be read, one with a gap in its history, or one
// whose head is damaged is not finished on: the error or the refusal says
// why, and nothing is published.
func TestFinishStepOnAnUnreadableSession(t *testing.T) {
	ctx := context.Background()
	t.Run("cancelled", func(t *testing.T) {
		_, s, _, session, c := cutClaim(t)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.FinishStep(cancelled, c); !errors.Is(err, context.Canceled) {
			t.Errorf("FinishStep with a cancelled context: %v, want context.Canceled", err)
		}
		if c.SessionRev != 2 {
			t.Errorf("session revision %d after a failed FinishStep, want 2", c.SessionRev)
		}
		sessionHeadAt(t, s, session, 2)
	})
	t.Run("gap", func(t *testing.T) {
		root, s, _, session, c := cutClaim(t)
		writeRev(t, s, session, 4, []byte("planted\n"))
		// A store that has not listed the session: s trusts its own
		// listing and the appends since, and a planted revision is neither.
		s = openStore(t, root, nil)
		err := s.FinishStep(ctx, c)
		var gap *GapError
		if h, herr := s.head(ctx, session, true); herr != nil || !errors.As(h.Damage, &gap) {
			t.Fatalf("the session's head for a write: %+v, %v; want a gap", h, herr)
		}
		if gap.Top != 4 || len(gap.Gaps) != 1 {
			t.Fatalf("the gap: %+v, want revision 3 missing below 4", gap)
		}
		want := &Refusal{Code: UnsafeReplacement, Keys: []Key{c.Seat, session}, ClaimID: c.ID, Reason: gap.Error(), Hint: gap.Hint()}
		wantFinishRefusal(t, "FinishStep over a gap", err, want)
		if c.SessionRev != 2 {
			t.Errorf("session revision %d after a refused FinishStep, want 2", c.SessionRev)
		}
	})
	t.Run("damaged", func(t *testing.T) {
		_, s, _, session, c := cutClaim(t)
		writeRev(t, s, session, 3, []byte("not a record\n"))
		err := s.FinishStep(ctx, c)
		wantFinishRefusal(t, "FinishStep on a damaged head", err,
			finishRefusal(c, fmt.Sprintf("%s moved under claim %s while its cut step was being finished: its head is revision 3, not the claim's revision 2", session, c.ID)))
		if c.SessionRev != 2 {
			t.Errorf("session revision %d after a refused FinishStep, want 2", c.SessionRev)
		}
	})
}

// The publish of the missing half fails as a publish does: an I/O error is
// returned, a writer that took the number first refuses it, and neither
// moves the claim's session revision.
func TestFinishStepPublishFails(t *testing.T) {
	ctx := context.Background()
	t.Run("error", func(t *testing.T) {
		root, s, _, session, c := cutClaim(t)
		boom := errors.New("write failed")
		fs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
			if pt.Key == session && pt.Revision == 3 && pt.Barrier == BarrierTempWritten {
				return boom
			}
			return nil
		}})
		if err := fs.FinishStep(ctx, c); !errors.Is(err, boom) {
			t.Errorf("FinishStep with a failing write: %v, want it", err)
		}
		if c.SessionRev != 2 {
			t.Errorf("session revision %d after a failed FinishStep, want 2", c.SessionRev)
		}
		sessionHeadAt(t, s, session, 2)
	})
	t.Run("lost", func(t *testing.T) {
		root, s, _, session, c := cutClaim(t)
		other := readRev(t, s, session, 2)
		var wrote bool
		fs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
			if pt.Key == session && pt.Revision == 3 && pt.Barrier == BarrierTempSynced && !wrote {
				wrote = true
				writeRev(t, s, session, 3, other)
			}
			return nil
		}})
		err := fs.FinishStep(ctx, c)
		if !wrote {
			t.Fatal("the publish never reached the synced temporary file")
		}
		wantFinishRefusal(t, "FinishStep that lost the revision", err,
			finishRefusal(c, fmt.Sprintf("another writer published revision 3 of %s while claim %s's cut step was being finished", session, c.ID)))
		if c.SessionRev != 2 {
			t.Errorf("session revision %d after a lost FinishStep, want 2", c.SessionRev)
		}
		if got := readRev(t, s, session, 3); string(got) != string(other) {
			t.Errorf("revision 3 of the session: %q, want the other writer's", got)
		}
	})
}

// FinishStep refuses a record too large for the session at any revision
// number, before publishing: one that would fit at revision 3, but not at
// the widest number, is refused and not published, as a step refuses it.
func TestFinishStepRecordTooLarge(t *testing.T) {
	ctx := context.Background()
	_, s, _, session, c := cutClaim(t)
	sizeAt := func(n uint64) int {
		t.Helper()
		r := c.Record.clone()
		r.Key, r.Revision, r.WrittenAt = session, n, timestamp(s.now())
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return len(data)
	}
	pad := 0
	for {
		c.Record.Fields.Set("pad", json.RawMessage(`"`+strings.Repeat("a", pad)+`"`))
		size := sizeAt(MaxRevision)
		if size == MaxFileSize+1 {
			break
		}
		pad += MaxFileSize + 1 - size
	}
	if n := sizeAt(3); n > MaxFileSize {
		t.Fatalf("the record at revision 3 is %d bytes, more than %d: the test needs one that fits there", n, MaxFileSize)
	}
	if err := s.FinishStep(ctx, c); !errors.Is(err, ErrRecordTooLarge) {
		t.Errorf("FinishStep of a record too large at the widest revision: %v, want ErrRecordTooLarge", err)
	}
	if c.SessionRev != 2 {
		t.Errorf("session revision %d after a refused FinishStep, want 2", c.SessionRev)
	}
	sessionHeadAt(t, s, session, 2)
}

// A finished step publishes the seat's record on the session, stamped with
// the session's key and its next revision.
func TestFinishStepPublishesTheSeatRecord(t *testing.T) {
	ctx := context.Background()
	_, s, seat, session, c := cutClaim(t)
	if err := s.FinishStep(ctx, c); err != nil {
		t.Fatalf("FinishStep: %v", err)
	}
	if c.SessionRev != 3 || c.SeatRev != 3 {
		t.Errorf("after FinishStep the claim is at %d/%d, want 3/3", c.SeatRev, c.SessionRev)
	}
	seatRec, err := DecodeRecord(readRev(t, s, seat, 3), seat, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRecord(readRev(t, s, session, 3), session, 3)
	if err != nil {
		t.Fatalf("the published revision: %v", err)
	}
	want := seatRec.clone()
	want.Key, want.Revision = session, 3
	wantData, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	gotData, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(wantData), string(gotData)); d != "" {
		t.Errorf("the session's revision 3 (-want +got):\n%s", d)
	}
}
