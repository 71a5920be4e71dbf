package claimstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// Where a prune stops, and what it has done by then: a barrier that
// fails, a backend call that fails, a cancellation, a head that moved.
// Each case pins the error, the keys' heads and bases, and the actions
// reported, so that a failure swallowed, a step taken before its check,
// or a key reported for what was not done shows.

// twoSessions is a root with two old free pairs (seats "a" and "b",
// sessions "a" and "b"), the sessions in the order prune removes them
// (by location).
func twoSessions(t *testing.T) (root string, clk *clock, seats, sessions []Key) {
	t.Helper()
	clk = newClock()
	root = newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	seats = []Key{seatKey(t, "a"), seatKey(t, "b")}
	sessions = []Key{sessionKey(t, "a"), sessionKey(t, "b")}
	for i := range seats {
		runLifecycle(t, s, seats[i], sessions[i])
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].Loc().String() < sessions[j].Loc().String() })
	clk.add(40 * day)
	return root, clk, seats, sessions
}

// baseOf is k's base on s (1: never compacted).
func baseOf(t *testing.T, s *Store, k Key) uint64 {
	t.Helper()
	b, err := s.be.(storage.Compacter).Base(context.Background(), k.Loc())
	if err != nil {
		t.Fatalf("Base(%s): %v", k, err)
	}
	return b
}

// prunedKey is what a test compares of a key after a prune: its head and
// its base.
type prunedKey struct{ Head, Base uint64 }

func statesOf(t *testing.T, s *Store, ks ...Key) map[string]prunedKey {
	t.Helper()
	out := map[string]prunedKey{}
	for _, k := range ks {
		out[k.String()] = prunedKey{headN(t, s, k), baseOf(t, s, k)}
	}
	return out
}

// A barrier that fails stops the prune there, with its error: before the
// seat's compaction the session holds its tombstone (published while the
// archive is written) and nothing is compacted or removed; after the
// tombstones and before the session's removal the seat is compacted too
// (once the archive is durable) and the session holds its tombstone, not
// removed.
func TestPruneStopsAtItsBarriers(t *testing.T) {
	for _, tc := range []struct {
		at   Barrier
		kind Kind
		want func(seat, session Key) map[string]prunedKey
	}{
		{BarrierBeforeRemove, KindSeat, func(seat, session Key) map[string]prunedKey {
			return map[string]prunedKey{seat.String(): {4, 1}, session.String(): {5, 1}}
		}},
		{BarrierTombstoned, "", func(seat, session Key) map[string]prunedKey {
			return map[string]prunedKey{seat.String(): {4, 4}, session.String(): {5, 1}}
		}},
		{BarrierBeforeRemove, KindSession, func(seat, session Key) map[string]prunedKey {
			return map[string]prunedKey{seat.String(): {4, 4}, session.String(): {5, 1}}
		}},
	} {
		t.Run(fmt.Sprintf("%s-%s", tc.at, tc.kind), func(t *testing.T) {
			root, clk, seat, session := pruneFixture(t, newRoot)
			var met []string
			s := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(p Point) error {
				met = append(met, string(p.Barrier)+" "+string(p.Key.Kind))
				if p.Barrier == tc.at && p.Key.Kind == tc.kind {
					return errCrash
				}
				return nil
			}})
			_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, Workers: 1})
			if !errors.Is(err, errCrash) {
				t.Fatalf("Prune: %v, want the barrier's error (barriers met: %q)", err, met)
			}
			if d := cmp.Diff(tc.want(seat, session), statesOf(t, s, seat, session)); d != "" {
				t.Errorf("keys after the stop (-want +got):\n%s", d)
			}
			var wantActions []string
			if tc.kind != KindSeat {
				wantActions = []string{"compacted " + seat.String() + " 1-3"}
			}
			if d := cmp.Diff(wantActions, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
		})
	}
}

// A tombstone is the head it was published above, stopped, with a pruned
// proof and a "pruned" member saying above which revision and when. A
// prune cut short after its tombstones is finished by the next: each
// session is removed through the tombstone it finds (not one above it),
// and the seat, compacted already, is compacted again silently — where
// tombstones are published in batches, and where one by one (with one
// worker).
func TestPruneFinishesWhatACutShortPruneTombstoned(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			cut := openStore(t, root, &TOpts{Now: clk.now, Barrier: func(p Point) error {
				if p.Barrier == BarrierTombstoned {
					return errCrash
				}
				return nil
			}})
			if _, _, _, err := pruneRun(t, cut, &PruneOptions{OlderThan: 30 * day, Workers: 1}); !errors.Is(err, errCrash) {
				t.Fatalf("Prune: %v, want the barrier's error", err)
			}
			s := openStore(t, root, &TOpts{Now: clk.now})
			if !batched {
				s = openStore(t, root, &TOpts{Now: clk.now, Backend: unbatchedFor(t, root)})
			}
			for _, k := range sessions {
				h, err := s.Head(context.Background(), k)
				if err != nil || h.N != 5 || h.Record == nil {
					t.Fatalf("%s: head %d, %v; want the tombstone r5", k, h.N, err)
				}
				pruned, _ := h.Record.Fields.Get("pruned")
				got := fmt.Sprintf("tombstone=%v state=%s proof=%s pruned=%s held=%v", h.Record.Tombstone, h.Record.State, h.Record.Proof.Kind, pruned, h.Held())
				want := `tombstone=true state=stopped proof=pruned pruned={"above":4,"at":"` + timestamp(clk.now()) + `"} held=false`
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s's tombstone (-want +got):\n%s", k, d)
				}
			}
			// Later, still with one worker: a worker that stopped after a
			// tombstone it found would leave the next job unsent.
			clk.add(day)
			rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, Workers: 1, NoArchive: true})
			want := sortedLines("removed "+sessions[0].String()+" 1-5", "removed "+sessions[1].String()+" 1-5")
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions of the prune that finishes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(&PruneReport{Keys: 4, Removed: 2, Revisions: 10}, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			for _, k := range seats {
				if d := cmp.Diff(prunedKey{4, 4}, statesOf(t, s, k)[k.String()]); d != "" {
					t.Errorf("%s (-want +got):\n%s", k, d)
				}
			}
		})
	}
}

// A compaction the backend refuses for a reason of its own (an etcd
// cluster out of space) keeps that seat, with why, and the prune goes on
// to the other keys; one that failed on an fsync, or under a
// cancellation, stops the prune with its error before any session is
// removed (a batch's seats are compacted before its sessions are removed,
// after their tombstones: each session stays, free, at its tombstone).
func TestPruneCompactionFailures(t *testing.T) {
	refused := errors.New("refused for now")
	for _, tc := range []struct {
		name   string
		err    error
		cancel bool
		stops  bool
	}{
		{"refused", refused, false, false},
		{"sync", fmt.Errorf("compacting: %w", ErrSyncFailed), false, true},
		{"canceled", refused, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := seats[0]
			if seats[1].Loc().String() < first.Loc().String() {
				first = seats[1]
			}
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.compact = func(ctx context.Context, loc Loc, base uint64) error {
					if loc == first.Loc() {
						if tc.cancel {
							cancel()
						}
						return tc.err
					}
					return h.Backend.Compact(ctx, loc, base)
				}
			})
			var got []string
			o := pruneOpts(t, s, &got)
			rep, err := s.Prune(ctx, o)
			sort.Strings(got)
			if tc.stops {
				if err == nil || !errors.Is(err, tc.err) {
					t.Fatalf("Prune: %v, want the compaction's error", err)
				}
				for _, k := range sessions {
					if n := headN(t, s, k); n != 5 {
						t.Errorf("%s: head %d after a prune stopped at a seat, want 5 (its tombstone)", k, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			second := seats[0]
			if second == first {
				second = seats[1]
			}
			want := sortedLines(
				"kept "+first.String()+": not compacted now: refused for now; the next prune tries again",
				"compacted "+second.String()+" 1-3",
				"removed "+sessions[0].String()+" 1-5",
				"removed "+sessions[1].String()+" 1-5",
			)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if rep.Kept != 1 || rep.Compacted != 1 || rep.Removed != 2 {
				t.Errorf("report %+v, want 1 kept, 1 compacted, 2 removed", rep)
			}
		})
	}
}

// A tombstone that cannot be published stops the prune with its error:
// the session is not removed (its head is as it was), and the seat, whose
// compaction comes after the tombstones, is not compacted.
func TestPruneTombstoneFails(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	probe := openStore(t, root, nil)
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLink, Path: errorfs.Contains(probe.KeyDir(session))})
	s := openStore(t, root, &TOpts{FS: efs, Now: clk.now})
	_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Prune: %v, want the tombstone's EIO (injected: %v)", err, efs.Injected())
	}
	if d := cmp.Diff(map[string]prunedKey{seat.String(): {4, 1}, session.String(): {4, 1}}, statesOf(t, probe, seat, session)); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	if len(got) != 0 {
		t.Errorf("actions %q, want none", got)
	}
}

// The batch removal: one call for the batch's sessions; its failure, or a
// session's own failure, is the prune's error.
func TestPruneBatchRemoval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     error // of the whole batch
		failKey  error // of the first session
		removed  []bool
		wantCall []int
	}{
		{"removed", nil, nil, []bool{true, true}, []int{2}},
		{"batch fails", syscall.EIO, nil, []bool{false, false}, []int{2}},
		{"a key fails", nil, syscall.EIO, []bool{false, false}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk, _, sessions := twoSessions(t)
			var calls []int
			s := openHooked(t, root, clk, func(h *hookedBackend) {
				h.removeKeys = func(ctx context.Context, rs []storage.Removal) ([]error, error) {
					calls = append(calls, len(rs))
					if tc.fail != nil {
						return nil, tc.fail
					}
					if tc.failKey != nil {
						return []error{tc.failKey, nil}, nil
					}
					return h.Backend.RemoveKeys(ctx, rs)
				}
			})
			_, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			if want := tc.fail != nil || tc.failKey != nil; want != errors.Is(err, syscall.EIO) {
				t.Fatalf("Prune: %v (actions %q)", err, got)
			}
			if d := cmp.Diff(tc.wantCall, calls); d != "" {
				t.Errorf("RemoveKeys calls, by batch size (-want +got):\n%s", d)
			}
			for i, k := range sessions {
				if n := headN(t, s, k); (n == 0) != tc.removed[i] {
					t.Errorf("%s: head %d, removed want %v", k, n, tc.removed[i])
				}
			}
		})
	}
}

// singleRemover is a backend that removes one key at a time (no
// KeyBatchRemover): the directory backend's other capabilities, and
// RemoveKey through a test's hook.
type singleRemover struct {
	storage.Backend
	storage.Compacter
	storage.RemovalMarker
	storage.Sweeper
	storage.ArchiveLocator
	storage.GuardedPublisher
	removeKey func(ctx context.Context, loc Loc, n uint64, head []byte) error
}

func (b *singleRemover) RemoveKey(ctx context.Context, loc Loc, n uint64, head []byte) error {
	return b.removeKey(ctx, loc, n, head)
}

// On a backend that removes one key at a time, a key whose head moved is
// kept (the others go on), and any other failure stops the prune.
func TestPruneRemovesOneByOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first error
		stops bool
	}{
		{"removed", nil, false},
		{"head moved", fmt.Errorf("gone: %w", storage.ErrHeadMoved), false},
		{"fails", syscall.EIO, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			h := openHooked(t, root, clk, nil).be.(*hookedBackend)
			be := &singleRemover{Backend: h, Compacter: h, RemovalMarker: h, Sweeper: h, ArchiveLocator: h, GuardedPublisher: h}
			var order []string
			be.removeKey = func(ctx context.Context, loc Loc, n uint64, head []byte) error {
				order = append(order, loc.String())
				if loc == sessions[0].Loc() && tc.first != nil {
					return tc.first
				}
				return h.Backend.RemoveKey(ctx, loc, n, head)
			}
			s := openStore(t, root, &TOpts{Backend: be, Now: clk.now})
			rep, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			if tc.stops {
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("Prune: %v, want the removal's EIO", err)
				}
				if d := cmp.Diff([]string{sessions[0].Loc().String()}, order); d != "" {
					t.Errorf("RemoveKey calls after a failure (-want +got):\n%s", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			first := "removed " + sessions[0].String() + " 1-5"
			if tc.first != nil {
				first = "kept " + sessions[0].String() + ": written to since it was read"
			}
			want := sortedLines(first, "removed "+sessions[1].String()+" 1-5",
				"compacted "+seats[0].String()+" 1-3", "compacted "+seats[1].String()+" 1-3")
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if n := headN(t, s, sessions[1]); n != 0 {
				t.Errorf("%s: head %d, want removed", sessions[1], n)
			}
			if tc.first != nil && rep.Kept != 1 {
				t.Errorf("kept %d, want 1", rep.Kept)
			}
		})
	}
}

// A session written to while prune works on it is kept, with why, and the
// other is removed: an acquire that links before the tombstone (the
// tombstone loses its number), or above the tombstone before the removal
// (the removal finds the head moved).
func TestPruneKeepsWhatWasWrittenSinceItWasRead(t *testing.T) {
	for _, at := range []Barrier{BarrierTempWritten, BarrierBeforeRemove} {
		t.Run(string(at), func(t *testing.T) {
			ctx := context.Background()
			root, clk, seats, sessions := twoSessions(t)
			acq := openStore(t, root, &TOpts{Now: clk.now})
			var c *Claim
			s := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(p Point) error {
				if c == nil && p.Barrier == at && p.Key == sessions[0] {
					var err error
					if c, err = acq.Acquire(ctx, seatKey(t, "other"), sessions[0], fields(t, acq)); err != nil {
						t.Errorf("the racing acquire: %v", err)
					}
				}
				return nil
			}})
			rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, Workers: 1, NoArchive: true})
			if c == nil {
				t.Fatal("the acquire never ran")
			}
			want := sortedLines("kept "+sessions[0].String()+": written to since it was read", "removed "+sessions[1].String()+" 1-5",
				"compacted "+seats[0].String()+" 1-3", "compacted "+seats[1].String()+" 1-3")
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(&PruneReport{Keys: 4, Removed: 1, Compacted: 2, Revisions: 11, Kept: 1}, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			if h, err := s.Head(ctx, sessions[0]); err != nil || h.N != c.SessionRev || !h.Held() {
				t.Errorf("%s: head %d held=%v %v; want the acquire's r%d", sessions[0], h.N, h.Held(), err, c.SessionRev)
			}
		})
	}
}

// A reference seat that starts an acquire after prune's first check and
// before the tombstones' (between its keys) keeps every session, with
// why; no removal is asked of the backend.
func TestPruneBlockedAfterTheTombstones(t *testing.T) {
	root, clk, seats, sessions := twoSessions(t)
	live := seatKey(t, "ref-live")
	calls := 0
	be := openHooked(t, root, clk, func(h *hookedBackend) {
		h.removeKeys = func(ctx context.Context, rs []storage.Removal) ([]error, error) {
			calls++
			return h.Backend.RemoveKeys(ctx, rs)
		}
	}).be
	w := openStore(t, root, nil)
	host := hostidTestHost()
	s := openStore(t, root, &TOpts{Backend: be, Host: host, Now: clk.now, Barrier: func(p Point) error {
		if p.Barrier == BarrierTombstoned {
			writeRev(t, w, live, 1, refRecord(live, 1, liveRefClaim, "active").bytes())
		}
		return nil
	}})
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	block := live.String() + " is held by claim " + liveRefClaim + ", whose record names no session (the reference implementation's) and no session holds: an acquire may be between its two keys; no session is removed until it completes or its owner is gone (claimctl classify)"
	want := sortedLines("kept "+sessions[0].String()+": "+block, "kept "+sessions[1].String()+": "+block,
		"compacted "+seats[0].String()+" 1-3", "compacted "+seats[1].String()+" 1-3")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&PruneReport{Keys: 4, Compacted: 2, Revisions: 6, Kept: 2, Blocked: block}, rep); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	if calls != 0 {
		t.Errorf("RemoveKeys called %d times with nothing to remove", calls)
	}
	for _, k := range sessions {
		if n := headN(t, s, k); n != 5 {
			t.Errorf("%s: head %d, want its tombstone r5", k, n)
		}
	}
}

// The store that pruned a session forgets what it knew of it: claiming it
// again starts it over from revision 1, and the root checks clean.
func TestPruningStoreClaimsWhatItRemoved(t *testing.T) {
	root, clk, _, session := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	// It reads the session first, as a long-lived store would have.
	if n := headN(t, s, session); n != 4 {
		t.Fatalf("head %d, want 4", n)
	}
	mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	c, err := s.Acquire(context.Background(), seatKey(t, "other"), session, fields(t, s))
	if err != nil {
		t.Fatalf("acquire of the removed session by the store that removed it: %v", err)
	}
	if c.SessionRev != 1 {
		t.Errorf("session r%d, want r1", c.SessionRev)
	}
	mustCheckClean(t, openStore(t, root, &TOpts{Now: clk.now}))
}

// fencedBackend is a hookedBackend that also collects fences
// (storage.FenceCollector), as etcd does, through a test's hook.
type fencedBackend struct {
	*hookedBackend
	collect func(ctx context.Context, dryRun bool) (storage.FenceReport, error)
}

func (b *fencedBackend) CollectFences(ctx context.Context, dryRun bool) (storage.FenceReport, error) {
	return b.collect(ctx, dryRun)
}

// On a backend that fences lost requests, prune collects the fences after
// its removals, the last sweep included (a collection that fails then
// costs none of them), reports what was collected and kept, and fails
// with the collection's error; a dry run asks for a count only.
func TestPruneCollectsFencesAfterItsRemovals(t *testing.T) {
	for _, tc := range []struct {
		name               string
		dry                bool
		sweepFails         bool
		collectErr         error
		wantCalls          []string
		wantErr            error
		wantRemoved        bool
		collected, keptFen int
	}{
		{name: "collected", wantCalls: []string{"sweep", "sweep", "collect false"}, wantRemoved: true, collected: 3, keptFen: 1},
		{name: "dry run", dry: true, wantCalls: []string{"collect true"}, collected: 3, keptFen: 1},
		{name: "dry run fails", dry: true, collectErr: syscall.EIO, wantCalls: []string{"collect true"}, wantErr: syscall.EIO, collected: 3, keptFen: 1},
		{name: "collection fails", collectErr: syscall.EIO, wantCalls: []string{"sweep", "sweep", "collect false"}, wantErr: syscall.EIO, wantRemoved: true, collected: 3, keptFen: 1},
		{name: "last sweep fails", sweepFails: true, wantCalls: []string{"sweep", "sweep"}, wantErr: syscall.ENOSPC, wantRemoved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk, _, session := pruneFixture(t, newRoot)
			var calls []string
			h := openHooked(t, root, clk, func(h *hookedBackend) {
				h.sweep = func(ctx context.Context) (int, error) {
					calls = append(calls, "sweep")
					if tc.sweepFails && len(calls) == 2 {
						return 0, syscall.ENOSPC
					}
					return h.Backend.Sweep(ctx)
				}
			}).be.(*hookedBackend)
			be := &fencedBackend{hookedBackend: h, collect: func(ctx context.Context, dryRun bool) (storage.FenceReport, error) {
				calls = append(calls, fmt.Sprintf("collect %v", dryRun))
				return storage.FenceReport{Collected: 3, Kept: 1, Why: "one is the current epoch's"}, tc.collectErr
			}}
			s := openStore(t, root, &TOpts{Backend: be, Now: clk.now})
			rep, _, _, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day, DryRun: tc.dry, NoArchive: true})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Prune: %v, want %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.wantCalls, calls); d != "" {
				t.Errorf("sweeps and collections, in order (-want +got):\n%s", d)
			}
			why := ""
			if tc.keptFen > 0 {
				why = "one is the current epoch's"
			}
			if d := cmp.Diff([]any{tc.collected, tc.keptFen, why}, []any{rep.FencesCollected, rep.FencesKept, rep.FencesKeptWhy}); d != "" {
				t.Errorf("fences collected, kept, why (-want +got):\n%s", d)
			}
			if n := headN(t, s, session); (n == 0) != tc.wantRemoved {
				t.Errorf("session head %d, removed want %v", n, tc.wantRemoved)
			}
		})
	}
}

// goroutineWith reports whether some goroutine's stack holds every one of
// frames: how a test sees where prune's own goroutines are blocked,
// without waiting for a time.
func goroutineWith(frames ...string) bool {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			return true
		}
	}
	return false
}

// unbatched is the directory backend without storage.BatchPublisher:
// prune then publishes its tombstones one publish each, on workers.
type unbatched struct {
	storage.Backend
	storage.Compacter
	storage.KeyRemover
	storage.KeyBatchRemover
	storage.RemovalMarker
	storage.Sweeper
	storage.ArchiveLocator
	storage.GuardedPublisher
}

func unbatchedFor(t *testing.T, root string) Backend {
	t.Helper()
	be, err := dirbackend.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return unbatched{be, be, be, be, be, be, be, be}
}

// A prune canceled while its tombstones are published, on a backend that
// publishes them one by one, stops with the cancellation, after every
// tombstone worker has finished (none is still publishing when Prune
// returns), and goes no further: no barrier after the tombstones, nothing
// removed.
//
// One worker, two sessions: the first tombstone's hook waits until Prune's
// goroutine is blocked handing out the second job (past its check of the
// context for it), then cancels. The second job's tombstone, started
// after the cancel, reads the clock first: there it watches Prune's
// goroutine (publishTombstones' own frame; the worker's is its func1)
// until it is either waiting for the workers, or gone from
// publishTombstones while this worker still runs.
func TestPruneCanceledWhilePublishingTombstones(t *testing.T) {
	root, clk, _, sessions := twoSessions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var after []string
	left := make(chan bool, 1)
	var once sync.Once
	now := func() time.Time {
		if ctx.Err() != nil {
			once.Do(func() {
				for {
					if goroutineWith(".publishTombstones(", "sync.(*WaitGroup).Wait(") {
						left <- false
						return
					}
					if !goroutineWith(".publishTombstones(") {
						left <- true
						return
					}
					runtime.Gosched()
				}
			})
		}
		return clk.now()
	}
	s := openStore(t, root, &TOpts{Backend: unbatchedFor(t, root), Now: now, Barrier: func(p Point) error {
		if ctx.Err() != nil {
			mu.Lock()
			after = append(after, string(p.Barrier)+" "+string(p.Key.Kind))
			mu.Unlock()
			return nil
		}
		if p.Barrier == BarrierTempWritten && p.Key == sessions[0] {
			for !goroutineWith(".publishTombstones(", "[chan send") {
				runtime.Gosched()
			}
			cancel()
		}
		return nil
	}})
	_, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Workers: 1, NoArchive: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune: %v, want the cancellation", err)
	}
	if <-left {
		t.Errorf("Prune left publishTombstones while a tombstone worker was still publishing")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range after {
		if strings.HasPrefix(a, string(BarrierTombstoned)) || strings.HasPrefix(a, string(BarrierBeforeRemove)) {
			t.Errorf("barrier %s met after the cancellation", a)
		}
	}
	for _, k := range sessions {
		if n := headN(t, s, k); n == 0 {
			t.Errorf("%s removed after the cancellation", k)
		}
	}
}

// A prune canceled while a batch of tombstones is being written (the
// directory backend's storage.BatchPublisher) stops with the cancellation
// once the batch's stagers have finished, links none of it, and goes no
// further: no barrier after its own, nothing removed, every session's head
// still its own free r4 and no temporary left behind.
func TestPruneCanceledWhileStagingTombstones(t *testing.T) {
	root, clk, _, sessions := twoSessions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var after []string
	s := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(p Point) error {
		if ctx.Err() != nil {
			after = append(after, string(p.Barrier)+" "+string(p.Key.Kind))
			return nil
		}
		if p.Barrier == BarrierTempWritten && p.Key == sessions[0] {
			cancel()
		}
		return nil
	}})
	_, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune: %v, want the cancellation", err)
	}
	if goroutineWith(".PublishBatch(") {
		t.Errorf("Prune returned while a batch of tombstones was still being staged")
	}
	// The batch's stager asks the context before each temporary: the
	// second session's is never written.
	if after != nil {
		t.Errorf("barriers met after the cancellation: %q", after)
	}
	for _, k := range sessions {
		if n := headN(t, s, k); n != 4 {
			t.Errorf("%s: head %d after the cancellation, want its own r4", k, n)
		}
	}
	rep, err := s.Check(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Errorf("fsck after the cancellation: %s %s: %s", f.Kind, f.Path, f.Message)
	}
}

// Canceled as the last tombstone is made durable (every publish done, none
// failed), prune still stops there, with the cancellation: it meets no
// barrier after the tombstones and removes nothing.
func TestPruneCanceledAsTheLastTombstoneLands(t *testing.T) {
	root, clk, _, sessions := twoSessions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := 0
	var after []string
	s := openStore(t, root, &TOpts{Now: clk.now, Sequential: true, Barrier: func(p Point) error {
		if ctx.Err() != nil {
			after = append(after, string(p.Barrier))
		}
		if p.Barrier == BarrierDirSynced && p.Key.Kind == KindSession {
			if synced++; synced == len(sessions) {
				cancel()
			}
		}
		return nil
	}})
	_, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Workers: 1, NoArchive: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune: %v, want the cancellation", err)
	}
	if after != nil {
		t.Errorf("barriers met after the cancellation: %q", after)
	}
	for _, k := range sessions {
		if n := headN(t, s, k); n != 5 {
			t.Errorf("%s: head %d, want its tombstone r5", k, n)
		}
	}
}

// noMarks is a RemovalMarker whose removal needs no tombstone (etcd's
// kind: its removal compares and deletes in one step).
type noMarks struct{}

func (noMarks) NeedsTombstone() bool { return false }

// unmarkedRemover is singleRemover without a RemovalMarker at all.
type unmarkedRemover struct {
	storage.Backend
	storage.Compacter
	storage.Sweeper
	storage.ArchiveLocator
	storage.GuardedPublisher
	removeKey func(ctx context.Context, loc Loc, n uint64, head []byte) error
}

func (b *unmarkedRemover) RemoveKey(ctx context.Context, loc Loc, n uint64, head []byte) error {
	return b.removeKey(ctx, loc, n, head)
}

// A backend whose removal needs no tombstone (a marker that says so, or
// none at all) has each session removed through its free head itself:
// no revision is published above it.
func TestPruneWithoutTombstones(t *testing.T) {
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprintf("marker=%v", marked), func(t *testing.T) {
			root, clk, seats, sessions := twoSessions(t)
			h := openHooked(t, root, clk, nil).be.(*hookedBackend)
			var removed []string
			removeKey := func(ctx context.Context, loc Loc, n uint64, head []byte) error {
				removed = append(removed, fmt.Sprintf("%s r%d", loc, n))
				return h.Backend.RemoveKey(ctx, loc, n, head)
			}
			var be Backend = &unmarkedRemover{Backend: h, Compacter: h, Sweeper: h, ArchiveLocator: h, GuardedPublisher: h, removeKey: removeKey}
			if marked {
				be = &singleRemover{Backend: h, Compacter: h, RemovalMarker: noMarks{}, Sweeper: h, ArchiveLocator: h, GuardedPublisher: h, removeKey: removeKey}
			}
			s := openStore(t, root, &TOpts{Backend: be, Now: clk.now})
			rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
			want := sortedLines("removed "+sessions[0].String()+" 1-4", "removed "+sessions[1].String()+" 1-4",
				"compacted "+seats[0].String()+" 1-3", "compacted "+seats[1].String()+" 1-3")
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			sort.Strings(removed)
			wantRemoved := sortedLines(sessions[0].Loc().String()+" r4", sessions[1].Loc().String()+" r4")
			if d := cmp.Diff(wantRemoved, removed); d != "" {
				t.Errorf("RemoveKey calls (-want +got):\n%s", d)
			}
			if d := cmp.Diff(&PruneReport{Keys: 4, Removed: 2, Compacted: 2, Revisions: 14}, rep); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
		})
	}
}

// With no session to remove, prune publishes no tombstone and meets no
// barrier of the tombstones' (tombstoned) or of a session's removal: only
// the seat's compaction.
func TestPruneTombstonesNothingWithoutASession(t *testing.T) {
	root, clk, seat, session := pruneFixture(t, newRoot)
	// The session is claimed again and released now: young.
	w := openStore(t, root, &TOpts{Now: clk.now})
	runLifecycle(t, w, seatKey(t, "b"), session)
	var log barrierLog
	s := openStore(t, root, &TOpts{Now: clk.now, Barrier: log.hook})
	_, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	if d := cmp.Diff([]string{"compacted " + seat.String() + " 1-3"}, got); d != "" {
		t.Errorf("actions (-want +got):\n%s", d)
	}
	var met []string
	for _, p := range log.take() {
		met = append(met, string(p.Barrier)+" "+string(p.Key.Kind))
	}
	if d := cmp.Diff([]string{string(BarrierBeforeRemove) + " seat"}, met); d != "" {
		t.Errorf("barriers met (-want +got):\n%s", d)
	}
}

// The store that pruned a session forgets its listing of it (dense up to
// r5, its tombstone): when the key is written again from revision 1, up
// to r5 and then r7 (r6 lost), an acquire by that store lists the key
// again and refuses the gap, rather than trusting its old listing and
// publishing r6 into it.
func TestPruningStoreForgetsWhatItListed(t *testing.T) {
	root, clk, _, session := pruneFixture(t, newRoot)
	s := openStore(t, root, &TOpts{Now: clk.now})
	if n := headN(t, s, session); n != 4 {
		t.Fatalf("head %d, want 4", n)
	}
	mustPrune(t, s, &PruneOptions{OlderThan: 30 * day, NoArchive: true})
	for _, n := range []uint64{1, 2, 3, 4, 5, 7} {
		writeRev(t, s, session, n, refRecord(session, n, testClaimID, "stopped").set("proof", `{"kind":"cohortProof","detail":"done"}`).bytes())
	}
	c, err := s.Acquire(context.Background(), seatKey(t, "other"), session, fields(t, s))
	if err == nil {
		t.Errorf("acquired r%d with r6 lost below r7", c.SessionRev)
	}
	if names := dirNames(t, s, session); len(names) != 6 {
		t.Errorf("session directory %q, want r1-r5 and r7 only", names)
	}
}
