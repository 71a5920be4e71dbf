package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// sessionBlock: which seats stop every session's removal (a held seat in
// the reference's format, no pair member, whose claim no session holds and
// whose owner is not gone) and which it passes over on its way to one. The
// seats are read in an order the test sets (Locs), with every seat it
// passes over before the one that blocks: a check that stopped reading at
// any of them ("break" for "continue"), or took one of them for a blocker,
// would change what is removed.

const (
	liveRefClaim = "c111111111111111111111111"
	goneRefClaim = "c222222222222222222222222"
	heldRefClaim = "c333333333333333333333333"
)

// blockRoot is a root with an old free pair (seat "a", session "a") and,
// on seats read before the blocker in this order, every seat sessionBlock
// passes over: an empty key directory, a seat whose head cannot be read,
// one whose head names no key, the old pair's free seat, our own held pair
// (its record names its session), a reference seat whose claim its session
// holds, and a reference seat whose owner is gone. With blocker, a
// reference seat whose owner (pid 4242) is alive comes last. It returns the
// store to prune with, on a host where pid 4242 runs.
func blockRoot(t *testing.T, blocker bool) (s *Store, clk *clock, oldSeat, oldSession, live Key) {
	t.Helper()
	clk = newClock()
	root := newRoot(t)
	w := openStore(t, root, &TOpts{Now: clk.now})
	oldSeat, oldSession = seatKey(t, "a"), sessionKey(t, "a")
	runLifecycle(t, w, oldSeat, oldSession)
	mustAcquire(t, w, seatKey(t, "held"), sessionKey(t, "held"))

	empty := seatKey(t, "empty")
	if err := os.MkdirAll(w.KeyDir(empty), 0o700); err != nil {
		t.Fatal(err)
	}
	unreadable := seatKey(t, "unreadable")
	if err := os.MkdirAll(w.KeyDir(unreadable), 0o700); err != nil {
		t.Fatal(err)
	}
	// A symlink is never read as a revision: Head fails on it (ReadError).
	if err := os.Symlink("/dev/null", filepath.Join(w.KeyDir(unreadable), RevisionName(1))); err != nil {
		t.Fatal(err)
	}
	garbage := seatKey(t, "garbage")
	writeRev(t, w, garbage, 1, []byte("{not json"))

	heldRefSeat, heldRefSession := seatKey(t, "ref-held"), sessionKey(t, "ref-held")
	writeRev(t, w, heldRefSeat, 1, refRecord(heldRefSeat, 1, heldRefClaim, "active").bytes())
	writeRev(t, w, heldRefSession, 1, refRecord(heldRefSession, 1, heldRefClaim, "active").bytes())
	gone := seatKey(t, "ref-gone")
	writeRev(t, w, gone, 1, refRecord(gone, 1, goneRefClaim, "active").set("owner", `{"pid":4243,"start":"123456","boot":"`+testBoot+`","incarnation":3}`).bytes())
	live = seatKey(t, "ref-live")
	order := []Key{empty, unreadable, garbage, oldSeat, seatKey(t, "held"), heldRefSeat, gone}
	if blocker {
		writeRev(t, w, live, 1, refRecord(live, 1, liveRefClaim, "active").bytes())
		order = append(order, live)
	}
	clk.add(40 * day)

	host := hostidTestHost()
	be := openHooked(t, root, clk, func(h *hookedBackend) {
		h.locs = func(ctx context.Context, kind Kind) ([]Loc, error) {
			if kind != KindSeat {
				return h.Backend.Locs(ctx, kind)
			}
			var out []Loc
			for _, k := range order {
				out = append(out, k.Loc())
			}
			return out, nil
		}
	}).be
	s = openStore(t, root, &TOpts{Backend: be, Host: host, Now: clk.now})
	return s, clk, oldSeat, oldSession, live
}

// A reference seat held by a live owner, its claim on no session, blocks
// every session's removal, and is the reason given: whatever seats are
// read before it.
func TestPruneBlockedBehindEverySeatItPasses(t *testing.T) {
	s, _, oldSeat, oldSession, live := blockRoot(t, true)
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	block := live.String() + " is held by claim " + liveRefClaim + ", whose record names no session (the reference implementation's) and no session holds: an acquire may be between its two keys; no session is removed until it completes or its owner is gone (claimctl classify)"
	want := sortedLines(
		"kept "+oldSession.String()+": "+block,
		"compacted "+oldSeat.String()+" 1-3",
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(block, rep.Blocked); d != "" {
		t.Errorf("Blocked (-want +got):\n%s", d)
	}
	if n := headN(t, s, oldSession); n != 4 {
		t.Errorf("blocked session head %d, want 4 (kept)", n)
	}
}

// Without that seat, the same seats block nothing: the old session is
// removed.
func TestPruneNotBlockedByTheSeatsItPasses(t *testing.T) {
	s, _, oldSeat, oldSession, _ := blockRoot(t, false)
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	want := sortedLines(
		"removed "+oldSession.String()+" 1-5",
		"compacted "+oldSeat.String()+" 1-3",
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if rep.Blocked != "" {
		t.Errorf("Blocked %q, want none", rep.Blocked)
	}
	if n := headN(t, s, oldSession); n != 0 {
		t.Errorf("session head %d, want it removed", n)
	}
}

// A failure to list the seats stops the prune before any session is
// removed: sessionBlock cannot say that none blocks.
func TestPruneStopsWhenSeatsCannotBeListed(t *testing.T) {
	for _, nth := range []int{2, 3} {
		// The walk lists the seats first (1), then the block check
		// before the tombstones (2), then the one after them (3).
		t.Run([]string{"", "", "before", "after"}[nth], func(t *testing.T) {
			root, clk, _, session := pruneFixture(t, newRoot)
			calls := 0
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.locs = func(ctx context.Context, kind Kind) ([]Loc, error) {
					if kind == KindSeat {
						calls++
						if calls == nth {
							return nil, syscall.EIO
						}
					}
					return h.Backend.Locs(ctx, kind)
				}
			})
			_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("Prune: %v, want the listing's EIO", err)
			}
			if n := headN(t, s, session); n == 0 {
				t.Errorf("the session was removed though the seats could not be read; actions %q", got)
			}
		})
	}
}

// hostidTestHost is this test machine with pid 4242 running, started at
// tick 123456: the owner refRecord gives a reference claim.
func hostidTestHost() *hostidtest.Host {
	return &hostidtest.Host{Machine: testMachine, Boot: testBoot, Procs: map[int]string{4242: "123456"}}
}

// Only a session that holds a reference seat's claim unblocks it: a free
// session naming the claim (here a released pair whose claim id a
// reference seat reuses, held by a live owner) does not, and every other
// session waits.
func TestPruneBlockedByAClaimNoSessionHolds(t *testing.T) {
	clk := newClock()
	root := newRoot(t)
	w := openStore(t, root, &TOpts{Now: clk.now})
	namedSeat, named := seatKey(t, "b"), sessionKey(t, "x")
	c := runLifecycle(t, w, namedSeat, named)
	ref := seatKey(t, "a")
	writeRev(t, w, ref, 1, refRecord(ref, 1, c.ID, "active").bytes())
	oldSeat, old := seatKey(t, "c"), sessionKey(t, "y")
	runLifecycle(t, w, oldSeat, old)
	clk.add(40 * day)
	s := openStore(t, root, &TOpts{Host: hostidTestHost(), Now: clk.now})
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	block := ref.String() + " is held by claim " + c.ID + ", whose record names no session (the reference implementation's) and no session holds: an acquire may be between its two keys; no session is removed until it completes or its owner is gone (claimctl classify)"
	why := ": it names claim " + c.ID + ", which another key still holds"
	want := sortedLines(
		"kept "+namedSeat.String()+why,
		"kept "+named.String()+why,
		"kept "+old.String()+": "+block,
		"compacted "+oldSeat.String()+" 1-3",
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(block, rep.Blocked); d != "" {
		t.Errorf("Blocked (-want +got):\n%s", d)
	}
}
