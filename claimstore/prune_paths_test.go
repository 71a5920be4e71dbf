package claimstore

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
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
