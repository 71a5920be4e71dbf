package claimstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// compactRoot is a root of n old free pairs, so that a prune compacts n
// seats, and the keys of its seats.
func compactRoot(t *testing.T, n int) (string, *clock, []Key) {
	t.Helper()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	var seats []Key
	for i := range n {
		seat := seatKey(t, fmt.Sprintf("s%d", i))
		seats = append(seats, seat)
		runLifecycle(t, s, seat, sessionKey(t, fmt.Sprintf("x%d", i)))
	}
	clk.add(60 * day)
	return root, clk, seats
}

// Prune compacts a batch's seats side by side: the first compaction waits
// for a second to begin, which one at a time never would.
func TestPruneCompactsSeatsAtOnce(t *testing.T) {
	root, clk, seats := compactRoot(t, 4)
	second := make(chan struct{})
	var once sync.Once
	var calls atomic.Int64
	s := openHooked(t, root, clk, func(h *hookedBackend) {
		h.compact = func(ctx context.Context, loc Loc, base uint64) error {
			if calls.Add(1) == 1 {
				select {
				case <-second:
				case <-time.After(10 * time.Second):
					return fmt.Errorf("no second compaction began while the first ran")
				}
			} else {
				once.Do(func() { close(second) })
			}
			return h.Backend.Compact(ctx, loc, base)
		}
	})
	rep, _, got := mustPrune(t, s, &PruneOptions{OlderThan: 30 * day})
	if rep.Compacted != len(seats) || rep.Kept != 0 {
		t.Fatalf("compacted %d, kept %d (%v); want %d compacted", rep.Compacted, rep.Kept, got, len(seats))
	}
	for _, k := range seats {
		if b := baseOf(t, s, k); b != 4 {
			t.Errorf("%s: base %d; want 4", k, b)
		}
	}
	mustCheckClean(t, s)
}

// A compaction whose fsync fails stops the prune with that error, and the
// compactions that ran beside it are reported each as it ended: done, or
// kept with why.
func TestPruneCompactionFailureReportsTheOthers(t *testing.T) {
	root, clk, seats := compactRoot(t, 3)
	s := openHooked(t, root, clk, func(h *hookedBackend) {
		h.compact = func(ctx context.Context, loc Loc, base uint64) error {
			switch loc {
			case seats[0].Loc():
				return fmt.Errorf("compact: %w", ErrSyncFailed)
			case seats[1].Loc():
				return fmt.Errorf("out of space")
			}
			return h.Backend.Compact(ctx, loc, base)
		}
	})
	rep, _, got, err := pruneRun(t, s, &PruneOptions{OlderThan: 30 * day})
	if !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Prune = %v; want ErrSyncFailed", err)
	}
	var compactions []string
	for _, line := range got {
		if line[:7] != "removed" {
			compactions = append(compactions, line)
		}
	}
	want := sortedLines(
		"compacted "+seats[2].String()+" 1-3",
		"kept "+seats[1].String()+": not compacted now: out of space; the next prune tries again",
	)
	if d := cmp.Diff(want, compactions); d != "" {
		t.Errorf("compactions reported (-want +got):\n%s", d)
	}
	if rep.Compacted != 1 {
		t.Errorf("report counts %d compacted, want 1", rep.Compacted)
	}
}

// A prune canceled while it compacts reports as compacted exactly the
// seats whose compaction was done: those it had not begun fail with the
// cancellation, however many there are beside the workers, and never
// reach the backend.
func TestPruneCanceledWhileCompacting(t *testing.T) {
	root, clk, seats := compactRoot(t, 2*compactWorkers+3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var calls atomic.Int64
	s := openHooked(t, root, clk, func(h *hookedBackend) {
		h.compact = func(ctx context.Context, loc Loc, base uint64) error {
			calls.Add(1)
			once.Do(cancel)
			if err := ctx.Err(); err != nil {
				return err
			}
			return h.Backend.Compact(ctx, loc, base)
		}
	})
	compacted := 0
	rep, err := s.Prune(ctx, &PruneOptions{OlderThan: 30 * day, Each: func(a PruneAction) {
		if a.Action == PruneCompacted {
			compacted++
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune = %v; want context.Canceled", err)
	}
	if compacted != 0 || rep.Compacted != 0 {
		t.Errorf("%d compactions reported, %d counted; none was done", compacted, rep.Compacted)
	}
	// Only those begun before the cancellation reach the backend.
	if n := calls.Load(); n > compactWorkers {
		t.Errorf("%d compactions begun after the prune was canceled; want at most the %d begun with it", n, compactWorkers)
	}
	for _, k := range seats {
		if b := baseOf(t, s, k); b != 1 {
			t.Errorf("%s: base %d; want 1 (not compacted)", k, b)
		}
	}
}
