package claimstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// A step checks its claim's heads while its temporaries are fsynced, not
// before it writes them; what it reports is unchanged. A claim whose seat
// or session moved is refused as before, even when the session's
// temporary could not be written either (a full disk): the refusal says
// what the caller must act on, and nothing is published.
func TestStepRefusalOutranksAFailedTemporary(t *testing.T) {
	for _, moved := range []Kind{KindSeat, KindSession} {
		for _, sequential := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s moved, sequential=%v", moved, sequential), func(t *testing.T) {
				efs := errorfs.Wrap(vfs.OS)
				root := newRoot(t)
				var synced []Point
				barrier := func(p Point) error {
					if p.Barrier == BarrierTempSynced {
						synced = append(synced, p)
					}
					return nil
				}
				s := openStore(t, root, &TOpts{FS: efs, Sequential: sequential, Barrier: barrier})
				seat, session := seatKey(t, "s"), sessionKey(t, "x")
				c := mustAcquire(t, s, seat, session)
				k := seat
				if moved == KindSession {
					k = session
				}
				writeRev(t, s, k, 2, []byte("another writer's\n"))
				efs.Add(&errorfs.Rule{Op: errorfs.OpCreateTemp, Path: errorfs.Contains(session.Hash()), Kind: errorfs.Fail, Err: syscall.ENOSPC})
				synced = nil
				err := s.Advance(context.Background(), c, Patch{State: Active})
				var ref *Refusal
				if !errors.As(err, &ref) || ref.Code != UnsafeReplacement {
					t.Errorf("a step whose %s moved, on a full disk: %v; want an unsafe-replacement refusal", moved, err)
				}
				// Nothing of the moved key's revision is reported synced: its
				// temporary is discarded when its check fails (if it was
				// made at all).
				for _, p := range synced {
					if p.Key == k {
						t.Errorf("the moved key's temporary reported synced: %+v", p)
					}
				}
				if c.SeatRev != 1 || c.SessionRev != 1 {
					t.Errorf("the claim's revisions %d/%d after a refused step, want 1/1", c.SeatRev, c.SessionRev)
				}
				other := openStore(t, root, nil)
				for _, x := range []Key{seat, session} {
					want := uint64(1)
					if x == k {
						want = 2
					}
					if nums, err := other.RevisionNumbers(context.Background(), x); err != nil || uint64(len(nums)) != want {
						t.Errorf("%s's revisions after a refused step: %v, %v; want 1..%d", x.Kind, nums, err, want)
					}
				}
			})
		}
	}
}

// plainBackend is a backend with its required methods only: no batches,
// no own-head check (as a backend written for another store might be).
type plainBackend struct{ storage.Backend }

// tempCounter counts the temporaries made on the OS filesystem.
type tempCounter struct {
	vfs.OSFS
	n *atomic.Int32
}

func (f tempCounter) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	f.n.Add(1)
	return f.OSFS.CreateTemp(dir, perm)
}

// On a backend that prepares one revision at a time, a step checks its
// claim's heads before it prepares anything: a claim whose seat or session
// moved makes no temporary, and is refused.
func TestStepWithoutBatchesFencesFirst(t *testing.T) {
	for _, moved := range []Kind{KindSeat, KindSession} {
		t.Run(string(moved)+" moved", func(t *testing.T) {
			root := newRoot(t)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			c := mustAcquire(t, openStore(t, root, nil), seat, session)
			temps := new(atomic.Int32)
			be := plainBackend{dirbackend.New(root, &dirbackend.Options{FS: tempCounter{n: temps}})}
			s := openStore(t, root, &TOpts{Backend: be})
			if err := s.Advance(context.Background(), c, Patch{State: Active}); err != nil {
				t.Fatalf("a step on a plain backend: %v", err)
			}
			if n := temps.Load(); n != 2 {
				t.Errorf("a step made %d temporaries, want 2", n)
			}
			k := seat
			if moved == KindSession {
				k = session
			}
			writeRev(t, s, k, 3, []byte("another writer's\n"))
			temps.Store(0)
			err := s.Advance(context.Background(), c, Patch{State: Stopping})
			var ref *Refusal
			if !errors.As(err, &ref) || ref.Code != UnsafeReplacement {
				t.Errorf("a step whose %s moved: %v; want an unsafe-replacement refusal", moved, err)
			}
			if n := temps.Load(); n != 0 {
				t.Errorf("a refused step made %d temporaries, want none", n)
			}
		})
	}
}
