package claimstore

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// The decision paths of Prune, each pinned by the exact actions it reports
// and the exact report: which keys are removed (and which revisions),
// compacted, kept with which reason, counted young, and on which backend
// capabilities. Written for the mutation run (internal/mutate): a report
// count or a reason that no test compares is a mistake no test catches.

// pruneRun runs s.Prune with o (its Each replaced) and returns the report,
// its Archives replaced by their number (segment names are random), and
// every action as a line, sorted: "removed K 1-5", "kept K: why".
func pruneRun(t *testing.T, s *Store, o *PruneOptions) (*PruneReport, int, []string, error) {
	t.Helper()
	var got []string
	if o == nil {
		o = &PruneOptions{}
	}
	o.Each = func(a PruneAction) {
		line := fmt.Sprintf("%s %s", a.Action, a.Key)
		if a.Action == PruneKept {
			line += ": " + a.Reason
		} else {
			line += fmt.Sprintf(" %d-%d", a.From, a.To)
		}
		got = append(got, line)
	}
	rep, err := s.Prune(context.Background(), o)
	sort.Strings(got)
	archives := 0
	if rep != nil {
		archives = len(rep.Archives)
		rep.Archives = nil
	}
	return rep, archives, got, err
}

// mustPrune is pruneRun that fails the test on an error.
func mustPrune(t *testing.T, s *Store, o *PruneOptions) (*PruneReport, int, []string) {
	t.Helper()
	rep, n, got, err := pruneRun(t, s, o)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	return rep, n, got
}

// sortedLines sorts a test's expected actions as pruneRun sorts its own.
func sortedLines(lines ...string) []string {
	out := append([]string(nil), lines...)
	sort.Strings(out)
	return out
}

// headN is k's head revision number on s, failing the test on an error.
func headN(t *testing.T, s *Store, k Key) uint64 {
	t.Helper()
	h, err := s.Head(context.Background(), k)
	if err != nil {
		t.Fatalf("Head(%s): %v", k, err)
	}
	return h.N
}

// hookedBackend is the directory backend with some of its calls replaced
// by a test's (a nil hook: the backend's own). Embedding the backend keeps
// every optional capability it has.
type hookedBackend struct {
	*dirbackend.Backend
	base       func(ctx context.Context, loc Loc) (uint64, error)
	compact    func(ctx context.Context, loc Loc, base uint64) error
	removeKeys func(ctx context.Context, rs []storage.Removal) ([]error, error)
	locs       func(ctx context.Context, kind Kind) ([]Loc, error)
	sweep      func(ctx context.Context) (int, error)
	read       func(ctx context.Context, loc Loc, n uint64) ([]byte, error)
}

func (h *hookedBackend) Read(ctx context.Context, loc Loc, n uint64) ([]byte, error) {
	if h.read != nil {
		return h.read(ctx, loc, n)
	}
	return h.Backend.Read(ctx, loc, n)
}

func (h *hookedBackend) Base(ctx context.Context, loc Loc) (uint64, error) {
	if h.base != nil {
		return h.base(ctx, loc)
	}
	return h.Backend.Base(ctx, loc)
}

func (h *hookedBackend) Compact(ctx context.Context, loc Loc, base uint64) error {
	if h.compact != nil {
		return h.compact(ctx, loc, base)
	}
	return h.Backend.Compact(ctx, loc, base)
}

func (h *hookedBackend) RemoveKeys(ctx context.Context, rs []storage.Removal) ([]error, error) {
	if h.removeKeys != nil {
		return h.removeKeys(ctx, rs)
	}
	return h.Backend.RemoveKeys(ctx, rs)
}

func (h *hookedBackend) Locs(ctx context.Context, kind Kind) ([]Loc, error) {
	if h.locs != nil {
		return h.locs(ctx, kind)
	}
	return h.Backend.Locs(ctx, kind)
}

func (h *hookedBackend) Sweep(ctx context.Context) (int, error) {
	if h.sweep != nil {
		return h.sweep(ctx)
	}
	return h.Backend.Sweep(ctx)
}

// openHooked opens a store on root over a hookedBackend that set
// configures (its Backend already set).
func openHooked(t *testing.T, root string, clk *clock, set func(h *hookedBackend)) *Store {
	t.Helper()
	be, err := dirbackend.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &hookedBackend{Backend: be}
	if set != nil {
		set(h)
	}
	return openStore(t, root, &TOpts{Backend: h, Now: clk.now})
}

// Every decision of one prune over a root that holds each kind of key: an
// old free pair (its session removed through its tombstone, its seat
// compacted below its head), a pair dated in the future (both kept, with
// why), a held pair (not acted on, not counted), a young pair (counted
// young), a free session whose head has no date (kept, with why).
func TestPruneEveryPath(t *testing.T) {
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	oldSeat, oldSession := seatKey(t, "a"), sessionKey(t, "a")
	runLifecycle(t, s, oldSeat, oldSession)
	clk.add(400 * day)
	futureSeat, futureSession := seatKey(t, "f"), sessionKey(t, "f")
	runLifecycle(t, s, futureSeat, futureSession)
	clk.add(-400 * day)
	heldSeat, heldSession := seatKey(t, "h"), sessionKey(t, "h")
	mustAcquire(t, s, heldSeat, heldSession)
	undated := sessionKey(t, "undated")
	c := runLifecycle(t, s, seatKey(t, "u"), undated)
	// The undated session's head, as another writer might leave it: a
	// free record whose writtenAt is no date.
	replaceRev(t, s, undated, 4, refRecord(undated, 4, c.ID, "stopped").
		set("proof", `{"kind":"cohortProof","detail":"done"}`).set("writtenAt", `"yesterday"`).bytes())
	clk.add(20 * day)
	youngSeat, youngSession := seatKey(t, "y"), sessionKey(t, "y")
	runLifecycle(t, s, youngSeat, youngSession)
	clk.add(20 * day)

	rep, archives, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	futureWhy := ": its head is dated 2025-06-10T07:08:09.010Z, in the future (a clock that jumped); it is kept until that date has passed"
	want := sortedLines(
		"removed "+oldSession.String()+" 1-5",
		"compacted "+oldSeat.String()+" 1-3",
		// The undated session's seat is dated: old, and compacted.
		"compacted "+seatKey(t, "u").String()+" 1-3",
		"kept "+futureSession.String()+futureWhy,
		"kept "+futureSeat.String()+futureWhy,
		"kept "+undated.String()+`: its head has no date prune can read (writtenAt "yesterday")`,
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	wantRep := &PruneReport{Keys: 10, Removed: 1, Compacted: 2, Revisions: 11, Kept: 3, Young: 2}
	if d := cmp.Diff(wantRep, rep); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	if archives != 1 {
		t.Errorf("%d archive segments, want 1", archives)
	}
	for k, n := range map[Key]uint64{oldSession: 0, oldSeat: 4, futureSession: 4, futureSeat: 4, heldSession: 1, heldSeat: 1, undated: 4, youngSession: 4, youngSeat: 4} {
		if got := headN(t, s, k); got != n {
			t.Errorf("%s: head %d after prune, want %d", k, got, n)
		}
	}
	mustCheckClean(t, s)
}

// An archive directory given is where the segments go, not the root's
// own archive.
func TestPruneArchivesWhereItIsTold(t *testing.T) {
	root, clk, _, _ := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	dir := filepath.Join(t.TempDir(), "elsewhere")
	rep, err := s.Prune(context.Background(), &PruneOptions{OlderThan: 30 * day, ArchiveDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Archives) != 1 || filepath.Dir(rep.Archives[0]) != dir {
		t.Errorf("archives %q, want one segment in %s", rep.Archives, dir)
	}
	if _, err := os.Lstat(filepath.Join(root, dirbackend.ArchiveDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root's own archive was made (%v) though another was given", err)
	}
}

// An archive whose segment cannot be created (a directory no file can be
// made in: /proc, even for root) stops the prune before it publishes,
// removes or compacts anything.
func TestPruneStopsWhenItCannotCreateTheSegment(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, ArchiveDir: "/proc"})
	if err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("Prune archiving into /proc: %v (actions %q), want the temporary's error", err, got)
	}
	if d := cmp.Diff(map[string]prunedKey{seat.String(): {4, 1}, session.String(): {4, 1}}, statesOf(t, s, seat, session)); d != "" {
		t.Errorf("keys after a segment that could not be created (-want +got):\n%s", d)
	}
	if len(got) != 0 {
		t.Errorf("actions %q, want none", got)
	}
}

// An archive that cannot be written stops the prune before it removes or
// compacts anything.
func TestPruneStopsWhenItCannotArchive(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, ArchiveDir: notDir})
	if err == nil {
		t.Fatalf("Prune archiving into a file: no error (actions %q)", got)
	}
	if d := cmp.Diff(map[string]prunedKey{seat.String(): {4, 1}, session.String(): {4, 1}}, statesOf(t, s, seat, session)); d != "" {
		t.Errorf("keys after a failed archive (-want +got):\n%s", d)
	}
}

// Archive segments are kept for ArchiveOlderThan (0: the default year;
// negative: for ever), by the time in their names.
func TestPruneExpiresArchiveSegments(t *testing.T) {
	for _, tc := range []struct {
		keep    time.Duration
		removed int
		left    []string
	}{
		{0, 1, []string{"ten"}},
		{-1, 0, []string{"old", "ten"}},
		{5 * day, 2, nil},
	} {
		t.Run(tc.keep.String(), func(t *testing.T) {
			root, clk, _, _ := pruneFixture(t, newRoot)
			s := openStore(t, root, &TOpts{Now: clk.now})
			dir := filepath.Join(root, dirbackend.ArchiveDir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			names := map[string]string{
				"old": clk.now().Add(-400*day).UTC().Format("20060102T150405Z") + "-00000000.ndjson.gz",
				"ten": clk.now().Add(-10*day).UTC().Format("20060102T150405Z") + "-00000001.ndjson.gz",
			}
			for _, n := range names {
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o400); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := s.Prune(context.Background(), &PruneOptions{OlderThan: 30 * day, ArchiveOlderThan: tc.keep})
			if err != nil {
				t.Fatal(err)
			}
			if rep.ArchivesRemoved != tc.removed {
				t.Errorf("ArchivesRemoved %d, want %d", rep.ArchivesRemoved, tc.removed)
			}
			var left []string
			for _, which := range []string{"old", "ten"} {
				if _, err := os.Lstat(filepath.Join(dir, names[which])); err == nil {
					left = append(left, which)
				}
			}
			if d := cmp.Diff(tc.left, left); d != "" {
				t.Errorf("segments left (-want +got):\n%s", d)
			}
			if _, err := os.Lstat(rep.Archives[0]); err != nil {
				t.Errorf("this prune's own segment: %v", err)
			}
		})
	}
}

// noRemover and noCompacter are the directory backend with only some of
// its capabilities: without a KeyRemover, and without a Compacter.
type noRemover struct {
	storage.Backend
	storage.Compacter
	storage.ArchiveLocator
}

type noCompacter struct {
	storage.Backend
	storage.KeyRemover
	storage.KeyBatchRemover
	storage.RemovalMarker
	storage.Sweeper
	storage.ArchiveLocator
	storage.GuardedPublisher
}

// On a backend that cannot remove a key, every old session is kept, with
// why, and seats are compacted; on one that cannot compact, seats are left
// alone, unreported, and sessions removed.
func TestPruneOnABackendWithout(t *testing.T) {
	for _, without := range []string{"remover", "compacter"} {
		t.Run(without, func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			be, err := dirbackend.Open(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			var b Backend = noRemover{be, be, be}
			if without == "compacter" {
				b = noCompacter{be, be, be, be, be, be, be}
			}
			s := openStore(t, root, &TOpts{Backend: b, Now: clk.now})
			rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
			want := sortedLines(
				"kept "+sessions[0].String()+": the backend cannot remove a key",
				"kept "+sessions[1].String()+": the backend cannot remove a key",
				"compacted "+seats[0].String()+" 1-3",
				"compacted "+seats[1].String()+" 1-3",
			)
			wantRep := &PruneReport{Keys: 4, Compacted: 2, Revisions: 6, Kept: 2}
			if without == "compacter" {
				want = sortedLines("removed "+sessions[0].String()+" 1-5", "removed "+sessions[1].String()+" 1-5")
				wantRep = &PruneReport{Keys: 4, Removed: 2, Revisions: 10}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wantRep, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
		})
	}
}

// An acquire cut between its keys (its seat revision names the session,
// held; the session still the old claim's, free) holds its pair: the
// session and the old claim's seat, both free and old, are kept for the
// claim the held pair names, and the new seat is left alone.
func TestPruneLeavesAnAcquireBetweenItsKeys(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	cut := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(p Point) error {
		if p.Barrier == BarrierBetweenKeys {
			return errCrash
		}
		return nil
	}})
	other := seatKey(t, "other")
	if _, err := cut.Acquire(context.Background(), other, session, fields(t, cut)); !errors.Is(err, errCrash) {
		t.Fatalf("the cut acquire: %v", err)
	}
	s := openStore(t, root, &TOpts{Now: clk.now})
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	h, _ := s.Head(context.Background(), seat)
	why := ": it names claim " + h.Record.ClaimID + ", which another key still holds"
	want := sortedLines("kept "+seat.String()+why, "kept "+session.String()+why)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&PruneReport{Keys: 3, Kept: 2}, rep); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]prunedKey{seat.String(): {4, 1}, session.String(): {4, 1}, other.String(): {1, 1}}, statesOf(t, s, seat, session, other)); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
}

// The keys of no pair: an empty key directory (no history: passed over),
// an idle old session (its seat went on to another claim: removed), and
// a free pair whose claim an orphan holds (both its keys kept, each with
// why), read in one walk whatever their order.
func TestPruneIdleAndOrphanedKeys(t *testing.T) {
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	// Session "idle" was released on seat "i", which then went on to
	// session "next": "idle" is a key of no pair.
	idle := sessionKey(t, "idle")
	runLifecycle(t, s, seatKey(t, "i"), idle)
	runLifecycle(t, s, seatKey(t, "i"), sessionKey(t, "next"))
	for _, k := range []Key{seatKey(t, "empty"), sessionKey(t, "empty")} {
		if err := os.MkdirAll(s.KeyDir(k), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	namedSeat, named := seatKey(t, "b"), sessionKey(t, "x")
	c := runLifecycle(t, s, namedSeat, named)
	orphan := seatKey(t, "orphan")
	writeRev(t, s, orphan, 1, refRecord(orphan, 1, c.ID, "active").bytes())
	clk.add(40 * day)

	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	why := ": it names claim " + c.ID + ", which another key still holds"
	want := sortedLines(
		"removed "+idle.String()+" 1-5",
		"removed "+sessionKey(t, "next").String()+" 1-5",
		"compacted "+seatKey(t, "i").String()+" 1-7",
		"kept "+namedSeat.String()+why,
		"kept "+named.String()+why,
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&PruneReport{Keys: 8, Removed: 2, Compacted: 1, Revisions: 17, Kept: 2}, rep); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
}

// A seat that would block session removals blocks nothing when no session
// is to be removed: the report says nothing of it.
func TestPruneBlockedOnlyWhenASessionWaits(t *testing.T) {
	clk := newClock()
	root := newRoot(t)
	w := openStore(t, root, &TOpts{Now: clk.now})
	seat := seatKey(t, "a")
	runLifecycle(t, w, seat, sessionKey(t, "a"))
	live := seatKey(t, "ref-live")
	writeRev(t, w, live, 1, refRecord(live, 1, liveRefClaim, "active").bytes())
	clk.add(40 * day)
	// The session is claimed again, young: only the seat's history is old.
	runLifecycle(t, w, seatKey(t, "b"), sessionKey(t, "a"))
	s := openStore(t, root, &TOpts{Host: hostidTestHost(), Now: clk.now})
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if d := cmp.Diff([]string{"compacted " + seat.String() + " 1-3"}, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&PruneReport{Keys: 4, Compacted: 1, Revisions: 3, Young: 2}, rep); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
}

// Expiring archive segments reads the archive directory even when this
// prune archived nothing: one that cannot be read (here a file) is the
// prune's error.
func TestPruneReportsAnArchiveItCannotExpire(t *testing.T) {
	s := openStore(t, newRoot(t), nil)
	runLifecycle(t, s, seatKey(t, "s"), sessionKey(t, "x"))
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prune(context.Background(), &PruneOptions{OlderThan: 30 * day, ArchiveDir: notDir})
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("Prune expiring an archive that is a file: %+v, %v; want ENOTDIR", rep, err)
	}
}

// A revision the archive cannot read stops prune before anything of its
// batch is removed or compacted, with an error naming the revision; and
// a prune canceled while the archive reads stops with the cancellation,
// its reader gone when it returns. Either way no segment is linked, every
// seat reads as before, and every session reads as before or at the
// tombstone published while the archive was read (free; the next prune
// removes it) — with an unreadable revision, always at its tombstone.
func TestPruneStopsWhereTheArchiveCannotRead(t *testing.T) {
	for _, cancelIt := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancelIt), func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			broken := errors.New("an unreadable revision")
			var reads atomic.Int32
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.read = func(ctx context.Context, loc Loc, n uint64) ([]byte, error) {
					if loc == sessions[1].Loc() && n == 2 {
						if cancelIt {
							cancel()
							return nil, ctx.Err()
						}
						return nil, broken
					}
					reads.Add(1)
					return h.Backend.Read(ctx, loc, n)
				}
			})
			var got []string
			rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Each: func(a PruneAction) {
				got = append(got, fmt.Sprintf("%s %s", a.Action, a.Key))
			}})
			switch {
			case cancelIt && !errors.Is(err, context.Canceled):
				t.Fatalf("Prune canceled while archiving: %v, want the cancellation", err)
			case !cancelIt && (!errors.Is(err, broken) || !strings.Contains(err.Error(), "archiving "+s.RevisionPath(sessions[1], 2)+" before removing it")):
				t.Fatalf("Prune over an unreadable revision: %v, want it named", err)
			}
			if goroutineWith(".encodeRevisions.") {
				t.Errorf("the archive's reader still runs after Prune returned")
			}
			if reads.Load() == 0 {
				t.Errorf("the archive read nothing before the failing revision")
			}
			if len(got) != 0 || len(rep.Archives) != 0 {
				t.Errorf("actions %q, archives %q; want none", got, rep.Archives)
			}
			if names, _ := os.ReadDir(filepath.Join(root, "archive")); len(names) != 0 {
				t.Errorf("archive directory holds %d names, want none", len(names))
			}
			keys := append(append([]Key{}, seats...), sessions...)
			after := openStore(t, root, &TOpts{Now: clk.now})
			got2 := statesOf(t, after, keys...)
			want := map[string]prunedKey{}
			for _, k := range seats {
				want[k.String()] = prunedKey{4, 1}
			}
			for _, k := range sessions {
				want[k.String()] = prunedKey{5, 1}
				if cancelIt && got2[k.String()].Head == 4 {
					want[k.String()] = prunedKey{4, 1} // canceled before its tombstone
				}
				if h, err := after.Head(context.Background(), k); err != nil || h.Held() || (h.N == 5) != h.Record.Tombstone {
					t.Errorf("%s after the stop: %+v, %v; want free, a tombstone at r5", k, h, err)
				}
			}
			if d := cmp.Diff(want, got2); d != "" {
				t.Errorf("keys after the stop (-want +got):\n%s", d)
			}
		})
	}
}

// The archive holds every revision a batch removes, exactly as it was
// stored, key by key in the header's order and each key's revisions from
// its lowest up — also when they span many of the reader's windows (a
// seat with 300 revisions compacted, 75 sessions removed).
func TestPruneArchivesEveryRevisionInOrder(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	seat := seatKey(t, "a")
	keys := []Key{seat}
	for i := range 75 {
		session := sessionKey(t, fmt.Sprintf("s%d", i))
		runLifecycle(t, s, seat, session)
		keys = append(keys, session)
	}
	before := map[Loc]map[uint64]string{}
	for _, k := range keys {
		before[k.Loc()] = map[uint64]string{}
		revs, _, err := s.be.List(ctx, k.Loc())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range revs {
			data, err := s.be.Read(ctx, k.Loc(), n)
			if err != nil {
				t.Fatal(err)
			}
			before[k.Loc()][n] = string(data)
		}
	}
	clk.add(40 * day)
	rep, archives, _ := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	if rep.Removed != 75 || rep.Compacted != 1 || archives != 1 {
		t.Fatalf("report %+v and %d segments, want 75 removed, 1 compacted, one segment", rep, archives)
	}
	names, err := segmentNames(filepath.Join(root, "archive"))
	if err != nil || len(names) != 1 {
		t.Fatalf("archive segments %q (%v), want one", names, err)
	}
	f, err := os.Open(filepath.Join(root, "archive", names[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	var hdr segmentHeader
	if err := dec.Decode(&hdr); err != nil {
		t.Fatal(err)
	}
	// The keys in the order of their locations (the seat first), whatever
	// order the batch came in (the sessions, then the seat).
	if !sort.SliceIsSorted(hdr.Keys, func(i, j int) bool {
		return Loc{Kind: hdr.Keys[i].Kind, Hash: hdr.Keys[i].Hash}.String() < Loc{Kind: hdr.Keys[j].Kind, Hash: hdr.Keys[j].Hash}.String()
	}) || hdr.Keys[0].Kind != KindSeat {
		t.Errorf("the segment's keys are not in the order of their locations: first %s/%s", hdr.Keys[0].Kind, hdr.Keys[0].Hash)
	}
	// The header says what became of each key: the seat compacted (its
	// base raised), each session removed whole.
	for _, ak := range hdr.Keys {
		wantAction := string(PruneRemoved)
		if ak.Kind == KindSeat {
			wantAction = string(PruneCompacted)
		}
		if ak.Action != wantAction {
			t.Errorf("the header says %s/%s was %q, want %q", ak.Kind, ak.Hash, ak.Action, wantAction)
		}
	}
	var want, got []string
	for _, ak := range hdr.Keys {
		loc := Loc{Kind: ak.Kind, Hash: ak.Hash}
		for n := ak.From; n <= ak.To; n++ {
			data, ok := before[loc][n]
			if !ok {
				t.Fatalf("the header names %s r%d, which was never written", loc, n)
			}
			want = append(want, fmt.Sprintf("%s r%d %q", loc, n, data))
		}
	}
	for {
		var r segmentRevision
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s r%d %q", Loc{Kind: r.Kind, Hash: r.Hash}, r.Revision, r.Data))
	}
	if len(want) < 2*archiveWindow {
		t.Fatalf("the header names %d revisions, fewer than two of the reader's windows", len(want))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("archived revisions (-want +got):\n%s", d)
	}
}

// A free session whose head is so close to the size bound that its
// tombstone would be larger than a revision may be is kept, with why, and
// the prune goes on with the others — on a backend that publishes
// tombstones in batches and on one that publishes them one by one. (Such
// a key used to fail every prune of its root.)
func TestPruneKeepsAKeyWhoseTombstoneWouldBeTooLarge(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			root := newRoot(t)
			s := openStore(t, root, &TOpts{Now: clk.now})
			lifecycle := func(seat, session Key, pad int) error {
				f := fields(t, s)
				f.Fields = map[string]any{"pad": strings.Repeat("p", pad)}
				c, err := s.Acquire(ctx, seat, session, f)
				if err != nil {
					return err
				}
				for _, st := range []State{Active, Stopping} {
					if err := s.Advance(ctx, c, Patch{State: st}); err != nil {
						return err
					}
				}
				return s.Release(ctx, c, NewProof(ProofCohort, "done"))
			}
			// The head's size without padding, measured on a probe pair;
			// then the most padding a whole lifecycle takes (every step
			// is checked at the widest revision number, on the seat too),
			// a few bytes at a time, on fresh keys each time.
			if err := lifecycle(seatKey(t, "probe"), sessionKey(t, "probe"), 0); err != nil {
				t.Fatal(err)
			}
			_, data, err := s.be.Head(ctx, sessionKey(t, "probe").Loc())
			if err != nil {
				t.Fatal(err)
			}
			var big Key
			for pad := MaxFileSize - len(data); ; pad -= 8 {
				// A session id longer than the seat's names: the
				// session's records are then the larger of the pair.
				big = sessionKey(t, fmt.Sprintf("big-%d-%s", pad, strings.Repeat("x", 100)))
				err := lifecycle(seatKey(t, fmt.Sprintf("a%d", pad)), big, pad)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrRecordTooLarge) || pad < MaxFileSize-len(data)-256 {
					t.Fatalf("a lifecycle with %d bytes of padding: %v", pad, err)
				}
			}
			// Small sessions on both sides of the big one in the walk's
			// order (by location): one after it must not be skipped.
			var smalls []Key
			after := false
			for i := 0; i < 8 || !after; i++ {
				small := sessionKey(t, fmt.Sprintf("small%d", i))
				if err := lifecycle(seatKey(t, fmt.Sprintf("b%d", i)), small, 0); err != nil {
					t.Fatal(err)
				}
				smalls = append(smalls, small)
				after = after || small.Loc().String() > big.Loc().String()
			}
			clk.add(40 * day)
			if !batched {
				s = openStore(t, root, &TOpts{Now: clk.now, Backend: unbatchedFor(t, root)})
			} else {
				s = openStore(t, root, &TOpts{Now: clk.now})
			}
			_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			var forBig []string
			removed := map[string]bool{}
			for _, line := range got {
				switch {
				case strings.Contains(line, big.String()):
					forBig = append(forBig, line)
				case strings.HasPrefix(line, "removed session "):
					removed[strings.TrimSuffix(strings.TrimPrefix(line, "removed "), " 1-5")] = true
				}
			}
			if len(forBig) != 1 || !strings.HasPrefix(forBig[0], "kept ") || !strings.Contains(forBig[0], "tombstone") || !strings.Contains(forBig[0], "bytes") {
				t.Errorf("the session near the bound: %q, want it kept, saying its tombstone would be too large", forBig)
			}
			for _, k := range smalls {
				if !removed[k.String()] {
					t.Errorf("%s not removed beside the session near the bound (actions %q)", k, got)
				}
			}
			if n := headN(t, s, big); n != 4 {
				t.Errorf("the session near the bound reads r%d, want its own r4", n)
			}
		})
	}
}

// A seat compacted by an earlier prune, whose head has not moved since,
// comes back to every prune as a compaction to finish (nothing of it to
// archive again); the archive still holds everything else of its batch —
// another seat's compacted revisions and a session's whole history — and
// nothing of the finished seat twice.
func TestPruneArchivesPastASeatAlreadyCompacted(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	seatA, seatB := seatKey(t, "a"), seatKey(t, "b")
	s1, s2 := sessionKey(t, "one"), sessionKey(t, "two")
	runLifecycle(t, s, seatA, s1)
	clk.add(40 * day)
	mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	runLifecycle(t, s, seatB, s2)
	clk.add(40 * day)
	rep, archives, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	want := sortedLines("compacted "+seatB.String()+" 1-3", "removed "+s2.String()+" 1-5")
	if d := cmp.Diff(want, got); d != "" || archives != 1 {
		t.Errorf("the second prune's actions (-want +got), %d segments:\n%s", archives, d)
	}
	if rep.Compacted != 1 || rep.Removed != 1 {
		t.Errorf("report %+v", rep)
	}
	for k, n := range map[Key]int{seatA: 3, seatB: 3, s1: 4, s2: 4} {
		revs, err := s.Archived(ctx, k)
		if err != nil || len(revs) != n {
			t.Errorf("%s: %d revisions archived (%v), want %d", k, len(revs), err, n)
		}
	}
}

// A batch whose first key's head is already a tombstone (a prune cut
// short after publishing it, before the seats' compaction) publishes the
// tombstones of the keys after it, and removes them all.
func TestPruneTombstonesPastAnEarlierTombstone(t *testing.T) {
	root, clk, _, sessions := twoSessions(t)
	var first *Key
	cut := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(p Point) error {
		if p.Barrier != BarrierTempWritten || p.Key.Kind != KindSession {
			return nil
		}
		if first == nil {
			k := p.Key
			first = &k
			return nil
		}
		if p.Key != *first {
			return errCrash
		}
		return nil
	}})
	if _, _, _, err := pruneRun(t, cut, &PruneOptions{OlderThan: 30 * day, NoArchive: true}); !errors.Is(err, errCrash) {
		t.Fatalf("the cut-short prune: %v, want the barrier's error", err)
	}
	s := openStore(t, root, &TOpts{Now: clk.now, Sequential: true})
	for _, k := range sessions {
		want := uint64(4)
		if k == *first {
			want = 5
		}
		if n := headN(t, s, k); n != want {
			t.Fatalf("%s after the cut-short prune: r%d, want r%d", k, n, want)
		}
	}
	_, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	want := sortedLines("compacted "+seatKey(t, "a").String()+" 1-3", "compacted "+seatKey(t, "b").String()+" 1-3",
		"removed "+sessions[0].String()+" 1-5", "removed "+sessions[1].String()+" 1-5")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
}

// A syncfs that fails while prune publishes its tombstones stops prune
// with the failure, before anything is removed: every session still reads
// free at its own head or a tombstone, and the store refuses to publish
// more.
func TestPruneStopsOnAFailedSyncFS(t *testing.T) {
	root, clk, _, sessions := twoSessions(t)
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncFS})
	s := openStore(t, root, &TOpts{Now: clk.now, FS: efs})
	_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Prune over a failing syncfs: %v, want ErrSyncFailed", err)
	}
	if len(efs.Injected()) == 0 {
		t.Fatalf("no syncfs was made")
	}
	for _, line := range got {
		if strings.HasPrefix(line, "removed ") {
			t.Errorf("removed over a failed syncfs: %s", line)
		}
	}
	fresh := openStore(t, root, &TOpts{Now: clk.now})
	for _, k := range sessions {
		h, err := fresh.Head(context.Background(), k)
		if err != nil || h.Held() || h.N < 4 {
			t.Errorf("%s after the failed syncfs: r%d held=%v %v", k, h.N, h.Held(), err)
		}
	}
}
