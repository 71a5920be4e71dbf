package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// compactionOf: where a seat's base falls. The base is the seat's newest
// free revision written before the cutoff, found by bisection over the
// dates (which rise with the revisions) and then, down from the newest old
// revision, at most 16 revisions searched for a free one; a seat whose
// head is old is compacted to its head; one compacted already is only
// finished (what a cut-short compaction left below its base removed,
// nothing reported). Each case pins the seat's actions, head and base.

// seatOnly keeps the actions about k.
func seatOnly(lines []string, k Key) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, " "+k.String()) {
			out = append(out, l)
		}
	}
	return out
}

// heldRun acquires seat (with session), advances it n times (a seat
// revision each) and returns the claim, held.
func heldRun(t *testing.T, s *Store, seat, session Key, n int) *Claim {
	t.Helper()
	c := mustAcquire(t, s, seat, session)
	for i := range n {
		if err := s.Advance(context.Background(), c, Patch{Fields: map[string]any{"step": i}}); err != nil {
			t.Fatalf("Advance: %v", err)
		}
	}
	return c
}

// heldThenReleased builds a seat's history for TestPruneSeatBase: one
// whole lifecycle (r1-r4, free and old), then a claim advanced n times and
// held while the clock moves 40 days, released only then (young).
func heldThenReleased(n int) func(t *testing.T, s *Store, clk *clock, seat Key) {
	return func(t *testing.T, s *Store, clk *clock, seat Key) {
		runLifecycle(t, s, seat, sessionKey(t, "one"))
		c := heldRun(t, s, seat, sessionKey(t, "two"), n)
		clk.add(40 * day)
		if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPruneSeatBase(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// build writes the seat's history on the clock, which starts 40
		// days before the prune (at its end, it is moved to the prune).
		build      func(t *testing.T, s *Store, clk *clock, seat Key)
		wantAction []string
		wantHead   uint64
		wantBase   uint64
	}{
		{
			// Old free r4; r5, r6 held and old; r7 released young: the
			// walk down from r6 passes the held revisions to r4.
			name:       "below a held run",
			build:      heldThenReleased(1),
			wantAction: []string{"compacted " + seatKey(t, "s").String() + " 1-3"},
			wantHead:   7, wantBase: 4,
		},
		{
			// Fifteen held revisions above r4 (r5-r19): r4 is the 16th
			// revision down from r19, still searched.
			name:       "fifteen held",
			build:      heldThenReleased(14),
			wantAction: []string{"compacted " + seatKey(t, "s").String() + " 1-3"},
			wantHead:   20, wantBase: 4,
		},
		{
			// Sixteen held revisions (r5-r20): r4 is the 17th down, not
			// searched; the seat waits for a later free revision.
			name:     "sixteen held",
			build:    heldThenReleased(15),
			wantHead: 21, wantBase: 1,
		},
		{
			// r6 cannot be decoded: the bisection's first probe (of
			// r1-r12) stops there, with why.
			name: "an undated revision",
			build: func(t *testing.T, s *Store, clk *clock, seat Key) {
				runLifecycle(t, s, seat, sessionKey(t, "one"))
				runLifecycle(t, s, seat, sessionKey(t, "two"))
				clk.add(20 * day)
				runLifecycle(t, s, seat, sessionKey(t, "three"))
				clk.add(20 * day)
				replaceRev(t, s, seat, 6, []byte("{not json"))
			},
			wantAction: []string{"kept " + seatKey(t, "s").String() + ": revision 6 cannot be read or dated; run claimctl fsck"},
			wantHead:   12, wantBase: 1,
		},
		{
			// r1 cannot be decoded: the seat's lowest revision gives no
			// date, so nothing is known old; the seat is left whole.
			name: "an undated lowest revision",
			build: func(t *testing.T, s *Store, clk *clock, seat Key) {
				runLifecycle(t, s, seat, sessionKey(t, "one"))
				runLifecycle(t, s, seat, sessionKey(t, "two"))
				clk.add(20 * day)
				runLifecycle(t, s, seat, sessionKey(t, "three"))
				clk.add(20 * day)
				replaceRev(t, s, seat, 1, []byte("{not json"))
			},
			wantHead: 12, wantBase: 1,
		},
		{
			// A seat compacted to r4, then a young claim (r5-r8): the
			// newest old revision is the base itself; nothing to do.
			name: "compacted, then young",
			build: func(t *testing.T, s *Store, clk *clock, seat Key) {
				runLifecycle(t, s, seat, sessionKey(t, "one"))
				clk.add(40 * day)
				if _, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true}); err != nil {
					t.Fatal(err)
				}
				runLifecycle(t, s, seat, sessionKey(t, "two"))
			},
			wantHead: 8, wantBase: 4,
		},
		{
			// One old free revision: its own base, nothing below it.
			name: "one revision",
			build: func(t *testing.T, s *Store, clk *clock, seat Key) {
				writeRev(t, s, seat, 1, refRecord(seat, 1, testClaimID, "stopped").set("proof", `{"kind":"cohortProof","detail":"done"}`).bytes())
				clk.add(40 * day)
			},
			wantHead: 1, wantBase: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			root := newRoot(t)
			s := openStore(t, root, &TOpts{Now: clk.now})
			seat := seatKey(t, "s")
			tc.build(t, s, clk, seat)
			var pruneCalls []int
			var met []Point
			p := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(pt Point) error {
				if pt.Key == seat {
					met = append(met, pt)
				}
				return nil
			}})
			o := &PruneOptions{OlderThan: 30 * day, NoArchive: true, Progress: func(phase string, done, total int) {
				if phase == "prune" {
					pruneCalls = append(pruneCalls, done, total)
				}
			}}
			_, _, got := mustPrune(t, p, o)
			if d := cmp.Diff(tc.wantAction, seatOnly(got, seat)); d != "" {
				t.Errorf("the seat's actions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(prunedKey{tc.wantHead, tc.wantBase}, statesOf(t, p, seat)[seat.String()]); d != "" {
				t.Errorf("the seat (-want +got):\n%s", d)
			}
			// Nothing to do on the seat: it is not touched (no barrier
			// of a compaction), and counted in no batch.
			if tc.wantAction == nil || strings.HasPrefix(tc.wantAction[0], "kept") {
				if len(met) != 0 {
					t.Errorf("barriers met on a seat prune leaves alone: %+v", met)
				}
			}
			if tc.name == "one revision" && pruneCalls != nil {
				t.Errorf("progress of a prune with nothing to do: %v", pruneCalls)
			}
		})
	}
}

// What a compaction cut short left below the base (the base pointer was
// durable, the unlinks were not done) is removed by the next prune,
// silently: it was archived and reported by the prune that was cut, and
// the next one writes no archive segment for it.
func TestPruneFinishesACutShortCompaction(t *testing.T) {
	root, clk, seat, _ := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	left := filepath.Join(s.KeyDir(seat), RevisionName(2))
	if err := os.WriteFile(left, []byte("left below the base\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	clk.add(day)
	rep, archives, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	if len(got) != 0 || rep.Compacted != 0 || rep.Revisions != 0 || archives != 0 {
		t.Errorf("finishing a compaction reported %q, %+v, %d archive segments", got, rep, archives)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the revision left below the base is still there: %v", err)
	}
	if d := cmp.Diff(prunedKey{4, 4}, statesOf(t, s, seat)[seat.String()]); d != "" {
		t.Errorf("the seat (-want +got):\n%s", d)
	}
}

// A seat's base that cannot be read stops the prune with that error.
func TestPruneStopsWhenABaseCannotBeRead(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	s := openHooked(t, root, clk, func(h *hookedBackend) {
		h.base = func(ctx context.Context, loc Loc) (uint64, error) {
			if loc == seat.Loc() {
				return 0, syscall.EIO
			}
			return h.Backend.Base(ctx, loc)
		}
	})
	if _, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Prune: %v (actions %q), want the base's EIO", err, got)
	}
	if n := headN(t, s, session); n != 4 {
		t.Errorf("session head %d, want 4: nothing removed", n)
	}
}
