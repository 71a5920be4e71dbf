package claimstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// The session key races: after an acquire or a step published its seat
// revision, another writer publishes on the session before the session
// revision is linked. The link arbitrates; what follows depends on what
// the other writer left there.
func TestSessionRacedAfterTheSeat(t *testing.T) {
	forBackends(t, func(t *testing.T, newRoot func(testing.TB) string) {
		seat, session := seatKey(t, "s"), sessionKey(t, "x")
		otherSeat := seatKey(t, "other")

		// A claim on another seat takes the session and releases it: the
		// session is free again, above the number the acquire prepared,
		// so the acquire publishes above it.
		t.Run("acquire-session-freed", func(t *testing.T) {
			root := newRoot(t)
			rival := openStore(t, root, nil)
			s := openStore(t, root, &TOpts{Sequential: true, Barrier: once(BarrierBetweenKeys, func() error {
				c, err := rival.Acquire(context.Background(), otherSeat, session, fields(t, rival))
				if err != nil {
					return err
				}
				return rival.Release(context.Background(), c, NewProof(ProofCohort, "done"))
			})})
			c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
			if err != nil {
				t.Fatalf("acquire whose session was taken and freed meanwhile: %v", err)
			}
			if c.SeatRev != 1 || c.SessionRev != 3 {
				t.Errorf("claim at seat r%d, session r%d; want r1, r3", c.SeatRev, c.SessionRev)
			}
			p, err := s.Pair(context.Background(), seat, session)
			if err != nil || !p.Held() || p.Session.N != 3 || p.Session.Record.ClaimID != c.ID || p.Seat.Record.ClaimID != c.ID {
				t.Fatalf("pair after the acquire = %+v, %v; want both heads this claim's", p, err)
			}
		})

		// The session is free again but the publish above it fails: the
		// error is returned, not a claim.
		t.Run("acquire-session-freed-publish-fails", func(t *testing.T) {
			root := newRoot(t)
			rival := openStore(t, root, nil)
			stop := errors.New("stopped")
			raced := false
			s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
				switch {
				case p.Barrier == BarrierBetweenKeys && !raced:
					raced = true
					c, err := rival.Acquire(context.Background(), otherSeat, session, fields(t, rival))
					if err != nil {
						return err
					}
					return rival.Release(context.Background(), c, NewProof(ProofCohort, "done"))
				case raced && p.Key == session && p.Revision == 3 && p.Barrier == BarrierTempWritten:
					return stop
				}
				return nil
			}})
			if c, err := s.Acquire(context.Background(), seat, session, fields(t, s)); !errors.Is(err, stop) || c != nil {
				t.Fatalf("acquire whose publish above the freed session failed = %+v, %v; want the failure", c, err)
			}
		})

		// The session was taken and freed again only after the acquire saw
		// it held and closed its seat revision: the acquire refuses,
		// saying the session changed.
		t.Run("acquire-session-taken-then-freed", func(t *testing.T) {
			root := newRoot(t)
			rival := openStore(t, root, nil)
			var rc *Claim
			s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
				switch {
				case p.Barrier == BarrierBetweenKeys && rc == nil:
					c, err := rival.Acquire(context.Background(), otherSeat, session, fields(t, rival))
					if err != nil {
						return err
					}
					rc = c
				case rc != nil && p.Key == seat && p.Revision == 2 && p.Barrier == BarrierDirSynced:
					// The acquire's seat revision 2 closes its claim.
					return rival.Release(context.Background(), rc, NewProof(ProofCohort, "done"))
				}
				return nil
			}})
			c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
			var r *Refusal
			if c != nil || !errors.As(err, &r) || r.Code != UnsafeReplacement || !strings.Contains(r.Reason, "changed while it was being claimed") {
				t.Fatalf("acquire = %+v, %v; want a refusal saying the session changed", c, err)
			}
			if p, err := s.Pair(context.Background(), seat, session); err != nil || p.Held() {
				t.Errorf("pair after the refused acquire = %+v, %v; want both keys free", p, err)
			}
		})

		// A step whose session number another writer took between the
		// keys refuses, its seat revision published, its session not.
		t.Run("advance-session-taken", func(t *testing.T) {
			root := newRoot(t)
			other := openStore(t, root, nil)
			var armed bool
			s := openStore(t, root, &TOpts{Sequential: true, Barrier: func(p Point) error {
				if armed && p.Barrier == BarrierBetweenKeys {
					armed = false
					rec := refRecord(session, 2, testClaimID, "uncertain").bytes()
					return other.Backend().Publish(context.Background(), session.Loc(), 2, rec, nil)
				}
				return nil
			}})
			c := mustAcquire(t, s, seat, session)
			armed = true
			err := s.Advance(context.Background(), c, Patch{State: Active})
			var r *Refusal
			if !errors.As(err, &r) || r.Code != UnsafeReplacement || !strings.Contains(r.Reason, "another writer published revision 2 of "+session.String()) {
				t.Fatalf("Advance whose session number was taken: %v; want a refusal naming session revision 2", err)
			}
			if c.SeatRev != 2 || c.SessionRev != 1 {
				t.Errorf("claim at seat r%d, session r%d after the cut step; want r2, r1", c.SeatRev, c.SessionRev)
			}
		})
	})
}

// once returns a barrier that runs f the first time b is met.
func once(b Barrier, f func() error) BarrierFunc {
	done := false
	return func(p Point) error {
		if p.Barrier == b && !done {
			done = true
			return f()
		}
		return nil
	}
}

// A step by a store that cannot read a key's head (an I/O error) fails
// with the error and publishes nothing: no fence is passed on a guess.
func TestStepHeadUnreadable(t *testing.T) {
	root := newRoot(t)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, openStore(t, root, nil), seat, session)
	dir := openStore(t, root, nil).KeyDir(seat)
	s := openStore(t, root, &TOpts{FS: pathLstatFailFS{path: dir, nth: 1, calls: new(int)}})
	if err := s.Advance(context.Background(), c, Patch{State: Active}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Advance with the seat's head unreadable: %v, want EIO", err)
	}
	if names := dirNames(t, s, seat); len(names) != 1 {
		t.Errorf("seat entries after the failed step: %v", names)
	}
}

// Bad keys are reported before anything is read: an acquire with the keys
// in the wrong order fails as such even where the machine id cannot be
// read.
func TestAcquireChecksKeysFirst(t *testing.T) {
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	s := openStore(t, newRoot(t), &TOpts{Host: brokenHost{Host: thisHost, machine: errors.New("no machine id")}})
	_, err := s.Acquire(context.Background(), session, seat, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}})
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Field != "kind" {
		t.Fatalf("acquire with the keys swapped: %v, want a KeyError on the kind", err)
	}
}

// pathLstatFailFS is the OS filesystem whose nth Lstat of path fails with
// EIO.
type pathLstatFailFS struct {
	vfs.OSFS
	path  string
	nth   int
	calls *int
}

func (f pathLstatFailFS) Lstat(name string) (os.FileInfo, error) {
	if name == f.path {
		*f.calls++
		if *f.calls == f.nth {
			return nil, &os.PathError{Op: "lstat", Path: name, Err: syscall.EIO}
		}
	}
	return f.OSFS.Lstat(name)
}
