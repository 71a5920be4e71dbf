package claimstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// headSummary is what a walk's head says, in a form cmp can compare: the
// key, the number, whether a record was read, and the damage as text (the
// empty string for none).
type headSummary struct {
	Key    Key
	N      uint64
	Record bool
	Held   bool
	Damage string
}

// summarizeWalkHead summarizes h (see headSummary). A damage whose text
// cannot be had (an error wrapping nothing where a cause belongs) fails
// the test.
func summarizeWalkHead(t *testing.T, h *Head) headSummary {
	t.Helper()
	if h == nil {
		t.Fatal("no head")
	}
	out := headSummary{Key: h.Key, N: h.N, Record: h.Record != nil, Held: h.Held()}
	if h.Damage != nil {
		var pe *fs.PathError
		if errors.As(h.Damage, &pe) && pe.Err == nil {
			t.Fatalf("damage %#v names no cause", pe)
		}
		out.Damage = h.Damage.Error()
	}
	return out
}

// walkPairOf walks root with a fresh store and returns the pair of seat
// and session; the test fails when the walk has no such pair.
func walkPairOf(t *testing.T, root string, seat, session Key) WalkPair {
	t.Helper()
	w, err := openStore(t, root, nil).Walk(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range w.Pairs {
		if p.Seat == seat && p.Session == session {
			return p
		}
	}
	t.Fatalf("the walk has no pair %v + %v: %+v", seat, session, w.Pairs)
	return WalkPair{}
}

// replaceRevByHand puts data in place of revision n of k, as an operator
// or a failing disk might, restoring the key directory's mode after.
func replaceRevByHand(t *testing.T, s *Store, k Key, n uint64, data []byte) {
	t.Helper()
	dir := s.KeyDir(k)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, RevisionName(n))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// A pair member naming a session whose directory exists but holds no
// revision (a writer stopped before its first one) pairs with a session
// that reads free and undamaged at revision 0, as an absent one does: an
// empty directory is not a damaged key.
func TestWalkPairWithEmptySessionDirectory(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	cut := errors.New("cut")
	cs := openStore(t, root, &TOpts{Barrier: func(pt Point) error {
		if pt.Barrier == BarrierBetweenKeys {
			return cut
		}
		return nil
	}})
	if _, err := cs.Acquire(ctx, seat, session, fields(t, cs)); !errors.Is(err, cut) {
		t.Fatalf("cut Acquire: %v", err)
	}
	if err := os.MkdirAll(cs.KeyDir(session), 0o700); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, cs, session); len(names) != 0 {
		t.Fatalf("the session directory holds %v, want nothing", names)
	}

	p := walkPairOf(t, root, seat, session)
	want := headSummary{Key: session}
	if diff := cmp.Diff(want, summarizeWalkHead(t, p.SessionInfo.Head)); diff != "" {
		t.Errorf("the empty session's head (-want +got):\n%s", diff)
	}
	if p.SessionInfo.Held() {
		t.Errorf("the empty session reads held")
	}
	if !p.SeatInfo.Held() {
		t.Errorf("the cut acquire's seat reads free")
	}
}

// A pair member naming a session none of whose revisions can be read
// pairs with that session damaged at its top revision: "no readable
// revision names the key", a head that holds.
func TestWalkPairWithUnreadableSession(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	mustAcquire(t, s, seat, session)
	replaceRevByHand(t, s, session, 1, []byte("{not json"))

	p := walkPairOf(t, root, seat, session)
	want := headSummary{
		Key: session, N: 1, Held: true,
		Damage: (&fs.PathError{Op: "read head", Path: s.RevisionPath(session, 1), Err: &DamageError{Reason: "no readable revision names the key"}}).Error(),
	}
	if diff := cmp.Diff(want, summarizeWalkHead(t, p.SessionInfo.Head)); diff != "" {
		t.Errorf("the unreadable session's head (-want +got):\n%s", diff)
	}
	if p.SessionInfo.Key == nil || *p.SessionInfo.Key != session {
		t.Errorf("the unreadable session's key: %v, want %v", p.SessionInfo.Key, session)
	}
}

// A key whose newest revision is damaged, over a readable one, is paired
// by the readable one's claim and reads damaged at the top revision, the
// damage naming why that revision cannot be read: unreadable (too large),
// not naming the key of its directory, or not a valid record of that
// number.
func TestWalkTopRevisionDamage(t *testing.T) {
	for _, tc := range []struct {
		name string
		// top is what replaces revision 2, given revision 1's bytes.
		top func(r1 []byte) []byte
		// damage is the cause the head must name, given the store, the
		// key and the bytes of revision 2.
		damage func(t *testing.T, s *Store, k Key, r2 []byte) error
	}{
		{
			name: "unreadable",
			top:  func([]byte) []byte { return []byte(strings.Repeat(" ", MaxFileSize+1)) },
			damage: func(t *testing.T, s *Store, k Key, _ []byte) error {
				_, err := s.be.Read(context.Background(), k.Loc(), 2)
				if err == nil {
					t.Fatal("the oversize revision reads")
				}
				return err
			},
		},
		{
			name: "not naming its key",
			top:  func([]byte) []byte { return []byte("{not json") },
			damage: func(*testing.T, *Store, Key, []byte) error {
				return &DamageError{Reason: "it does not name the key its directory is named after"}
			},
		},
		{
			name: "not a record of its number",
			top:  func(r1 []byte) []byte { return r1 },
			damage: func(t *testing.T, _ *Store, k Key, r2 []byte) error {
				_, err := DecodeRecord(r2, k, 2)
				if err == nil {
					t.Fatal("revision 1's bytes decode as revision 2")
				}
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			s := openStore(t, root, nil)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			c := mustAcquire(t, s, seat, session)
			if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
				t.Fatal(err)
			}
			r2 := tc.top(readRev(t, s, seat, 1))
			replaceRevByHand(t, s, seat, 2, r2)
			cause := tc.damage(t, s, seat, r2)

			p := walkPairOf(t, root, seat, session)
			want := headSummary{
				Key: seat, N: 2, Held: true,
				Damage: (&fs.PathError{Op: "read head", Path: s.RevisionPath(seat, 2), Err: cause}).Error(),
			}
			if diff := cmp.Diff(want, summarizeWalkHead(t, p.SeatInfo.Head)); diff != "" {
				t.Errorf("the seat's head (-want +got):\n%s", diff)
			}
			if p.SeatInfo.ClaimID != c.ID || p.SeatInfo.Top != 2 || p.SeatInfo.Revisions != 2 {
				t.Errorf("the seat: claim %q, top %d, %d revisions; want %q, 2, 2", p.SeatInfo.ClaimID, p.SeatInfo.Top, p.SeatInfo.Revisions, c.ID)
			}
			if got := fmt.Sprint(errors.Unwrap(p.SeatInfo.Head.Damage)); got != cause.Error() {
				t.Errorf("the damage's cause: %s, want %s", got, cause)
			}
		})
	}
}
