package claimstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// Prune's walk keeps of each key what the decision needs (slimForPrune),
// and a removal reads its head whole again when its batch comes
// (rereadHeads): what is archived, tombstoned and removed is the head the
// walk decided on, byte for byte, or the key is kept.

// The walk prune makes pairs exactly as a whole walk does, and keeps of no
// head its record's members or its bytes: a free head keeps its date,
// claim and tombstone flag, and the SHA-256 of the bytes it dropped.
func TestPruneWalkIsSlim(t *testing.T) {
	ctx := context.Background()
	root, clk, seats, sessions := twoSessions(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	mustAcquire(t, s, seatKey(t, "held"), sessionKey(t, "held"))
	full, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	slim, err := openStore(t, root, nil).Walk(ctx, &WalkOptions{KeepIdle: true, slim: slimForPrune})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(summarizeWalk(full), summarizeWalk(slim)); d != "" {
		t.Fatalf("the slim walk pairs otherwise (-full +slim):\n%s", d)
	}
	free := 0
	for _, p := range slim.Pairs {
		for _, in := range []*KeyInfo{p.SeatInfo, p.SessionInfo} {
			h := in.Head
			switch {
			case h.raw != nil || h.Record.Fields != nil:
				t.Errorf("%s: the slim walk kept the head's bytes or members", in.Key)
			case h.Record.held():
				if h.Record != slimHeld || h.digest != nil {
					t.Errorf("%s: a held head is not the shared held record", in.Key)
				}
			default:
				free++
				data, err := os.ReadFile(s.RevisionPath(*in.Key, h.N))
				if err != nil {
					t.Fatal(err)
				}
				want, err := DecodeRecord(data, *in.Key, h.N)
				if err != nil {
					t.Fatal(err)
				}
				got := Record{ClaimID: h.Record.ClaimID, WrittenAt: h.Record.WrittenAt, Tombstone: h.Record.Tombstone}
				if d := cmp.Diff(Record{ClaimID: want.ClaimID, WrittenAt: want.WrittenAt}, got, cmp.AllowUnexported(Record{}, Host{})); d != "" {
					t.Errorf("%s: what the slim head keeps (-want +got):\n%s", in.Key, d)
				}
				if h.digest == nil || *h.digest != sha256.Sum256(data) {
					t.Errorf("%s: the slim head's digest is not its bytes'", in.Key)
				}
			}
		}
	}
	if want := len(seats) + len(sessions); free != want {
		t.Errorf("%d free heads in the slim walk, want %d", free, want)
	}
}

// A session written to after the walk and before its batch is kept: one
// whose head moved on, and one removed and written again to the same
// number (another prune removed it, a new claim came and went), whose
// head is young and not the one the walk judged old, and one whose head is
// now a planted revision that does not validate (damaged: fsck's). Nothing of it is
// archived, tombstoned or removed; the other session is. So is one whose
// head was replaced in place by bytes that are no revision: damaged, with
// the reason.
func TestPruneReadsTheHeadAgainForItsBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, acq *Store, session Key)
		head  uint64
		held  bool
		// damaged: kept as damaged now (else as written to).
		damaged bool
	}{
		{"moved", func(t *testing.T, acq *Store, session Key) {
			mustAcquire(t, acq, seatKey(t, "other"), session)
		}, 5, true, false},
		{"same-number", func(t *testing.T, acq *Store, session Key) {
			if err := os.RemoveAll(acq.KeyDir(session)); err != nil {
				t.Fatal(err)
			}
			runLifecycle(t, acq, seatKey(t, "other"), session)
		}, 4, false, false},
		{"damaged", func(t *testing.T, acq *Store, session Key) {
			data, err := os.ReadFile(acq.RevisionPath(session, 4))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(acq.RevisionPath(session, 5), data, 0o400); err != nil {
				t.Fatal(err)
			}
		}, 5, true, false},
		{"damaged-in-place", func(t *testing.T, acq *Store, session Key) {
			path := acq.RevisionPath(session, 4)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("no revision\n"), 0o400); err != nil {
				t.Fatal(err)
			}
		}, 4, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root, clk, seats, sessions := twoSessions(t)
			acq := openStore(t, root, &TOpts{Now: clk.now})
			s := openStore(t, root, &TOpts{Now: clk.now})
			wrote := false
			o := &PruneOptions{OlderThan: 30 * day, Workers: 1, Progress: func(phase string, done, total int) {
				if phase == "read" && done == total && !wrote {
					wrote = true
					tc.write(t, acq, sessions[0])
				}
			}}
			rep, archives, got := mustPrune(t, s, o)
			if !wrote {
				t.Fatal("the walk never reported its last key")
			}
			h, err := s.Head(ctx, sessions[0])
			if err != nil || h.N != tc.head || h.Held() != tc.held || h.Record != nil && h.Record.Tombstone {
				t.Fatalf("%s: head %d held=%v %v; want r%d held=%v, no tombstone", sessions[0], h.N, h.Held(), err, tc.head, tc.held)
			}
			// Even the damaged revision: the head is read again at the
			// number the walk found (storage.HeadAtReader), and anything
			// linked above it is a write, whatever it holds; its damage
			// is the next walk's, and fsck's, to report.
			why := "written to since it was read"
			if tc.damaged {
				if h.Damage == nil {
					t.Fatalf("%s reads undamaged", sessions[0])
				}
				why = "its head is damaged now: " + h.Damage.Error() + "; run claimctl fsck"
			}
			want := sortedLines("kept "+sessions[0].String()+": "+why, "removed "+sessions[1].String()+" 1-5",
				"compacted "+seats[0].String()+" 1-3", "compacted "+seats[1].String()+" 1-3")
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(&PruneReport{Keys: 4, Removed: 1, Compacted: 2, Revisions: 11, Kept: 1}, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			if revs, err := s.Archived(ctx, sessions[0]); err != nil || len(revs) != 0 {
				t.Errorf("%s: archived %d revisions (%v), want none", sessions[0], len(revs), err)
			}
			if revs, err := s.Archived(ctx, sessions[1]); archives != 1 || err != nil || len(revs) != 4 {
				t.Errorf("%s: archived %d revisions in %d segments (%v), want its 4 in one", sessions[1], len(revs), archives, err)
			}
		})
	}
}

// A prune canceled after its walk and its checks, before a batch's heads
// are read again, stops there with the cancellation: nothing archived,
// tombstoned, compacted or removed, nothing reported done.
// plainRemover is the directory backend without its Sweeper and without
// tombstones (no RemovalMarker): nothing a prune does after its batches
// asks the context, so a cancellation swallowed on the way shows.
type plainRemover struct {
	storage.Backend
	storage.Compacter
	storage.ArchiveLocator
	storage.GuardedPublisher
	storage.KeyRemover
	storage.KeyBatchRemover
}

func TestPruneCanceledBeforeItReadsTheHeadsAgain(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seatLists := 0
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.locs = func(ctx context.Context, kind Kind) ([]Loc, error) {
					locs, err := h.Backend.Locs(ctx, kind)
					if kind == KindSeat {
						// The walk lists the seats first; the second listing
						// is the check for an acquire between its keys, the
						// last step before the batch.
						if seatLists++; seatLists == 2 {
							cancel()
						}
					}
					return locs, err
				}
			})
			if plain {
				h := s.be.(*hookedBackend)
				s = openStore(t, root, &TOpts{Now: clk.now, Backend: &plainRemover{Backend: h, Compacter: h, ArchiveLocator: h, GuardedPublisher: h, KeyRemover: h, KeyBatchRemover: h}})
			}
			var got []string
			rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Workers: 1, Each: func(a PruneAction) {
				got = append(got, fmt.Sprintf("%s %s", a.Action, a.Key))
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Prune: %v, want the cancellation", err)
			}
			if seatLists != 2 {
				t.Fatalf("the seats were listed %d times, want 2 (the walk, the check)", seatLists)
			}
			if len(got) != 0 || rep == nil || rep.Removed+rep.Compacted+rep.Kept != 0 || len(rep.Archives) != 0 {
				t.Errorf("after the cancellation: actions %q, report %+v; want none", got, rep)
			}
			keys := append(append([]Key{}, seats...), sessions...)
			want := map[string]prunedKey{}
			for _, k := range keys {
				want[k.String()] = prunedKey{4, 1}
			}
			if d := cmp.Diff(want, statesOf(t, openStore(t, root, &TOpts{Now: clk.now}), keys...)); d != "" {
				t.Errorf("keys after the cancellation (-want +got):\n%s", d)
			}
		})
	}
}
