package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/dirbackend"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// OlderThan 0 means the documented default (30 days), not "everything
// free now"; a shorter retention given is the one used.
func TestPruneRetentionOption(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	session := sessionKey(t, "ten-days")
	runLifecycle(t, s, seatKey(t, "s"), session)
	clk.add(10 * day)

	rep, err := s.Prune(ctx, &PruneOptions{})
	if err != nil {
		t.Fatalf("Prune with the default retention: %v", err)
	}
	if rep.Removed != 0 || rep.Compacted != 0 || rep.Young != 2 {
		t.Errorf("a 10-day-old free pair under the default %v retention: %+v, want both keys young", DefaultRetention, rep)
	}
	if h, _ := s.Head(ctx, session); h.N != 4 {
		t.Fatalf("session head %d after a prune that should keep it, want 4", h.N)
	}

	rep, err = s.Prune(ctx, &PruneOptions{OlderThan: 7 * day})
	if err != nil {
		t.Fatalf("Prune --older-than 7d: %v", err)
	}
	if rep.Removed != 1 || rep.Compacted != 1 {
		t.Errorf("a 10-day-old free pair under a 7-day retention: %+v, want the session removed and the seat compacted", rep)
	}
	if h, _ := s.Head(ctx, session); h.N != 0 {
		t.Errorf("session head %d after a 7-day prune, want it removed", h.N)
	}
}

// What a removal cut short left (trash in a kind directory) is finished
// by a prune, and left alone by a dry run, which changes nothing.
func TestPruneSweepsOnlyForReal(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	s := openStore(t, root, nil)
	runLifecycle(t, s, seatKey(t, "s"), sessionKey(t, "x"))
	trash := filepath.Join(root, string(KindSession), dirbackend.TrashPrefix+"0123-cut-short")
	if err := os.Mkdir(trash, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trash, RevisionName(1)), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prune(ctx, &PruneOptions{DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if _, err := os.Lstat(trash); err != nil || rep.Swept != 0 {
		t.Fatalf("a dry run swept (trash: %v, swept %d)", err, rep.Swept)
	}
	rep, err = s.Prune(ctx, nil)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if _, err := os.Lstat(trash); !errors.Is(err, os.ErrNotExist) || rep.Swept != 1 {
		t.Errorf("the trash is still there after a prune (%v), swept %d, want 1", err, rep.Swept)
	}
}

// Progress is told of the walk ("read") as well as of the removals.
func TestPruneProgressPhases(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, newRoot(t), &TOpts{Now: clk.now})
	runLifecycle(t, s, seatKey(t, "s"), sessionKey(t, "x"))
	clk.add(40 * day)
	phases := map[string]int{}
	o := pruneOpts(t, s, new([]string))
	o.Progress = func(phase string, done, total int) { phases[phase]++ }
	if _, err := s.Prune(ctx, o); err != nil {
		t.Fatal(err)
	}
	if phases["read"] == 0 || phases["prune"] == 0 {
		t.Errorf("progress phases %v, want read and prune", phases)
	}
}

// A prune whose sweep, first or last, or whose walk fails says so, rather
// than reporting a prune that did not happen.
func TestPruneReportsItsFailures(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		rule func(root string) *errorfs.Rule
		dry  bool
	}{
		{"first sweep", func(root string) *errorfs.Rule {
			return &errorfs.Rule{Op: errorfs.OpRemove, Path: errorfs.Contains(dirbackend.TrashPrefix + "planted"), Times: 1}
		}, false},
		{"last sweep", func(root string) *errorfs.Rule {
			// The first sweep finds nothing; the removal's own trash
			// deletion is told to fail, so the last sweep meets it
			// again: the second removal of that trash fails.
			return &errorfs.Rule{Op: errorfs.OpRemove, Path: errorfs.Contains(dirbackend.TrashPrefix)}
		}, false},
		{"tombstones", func(root string) *errorfs.Rule {
			// The tombstones' temporaries are made durable by one
			// syncfs, the batch's first: it fails, and so does the batch.
			return &errorfs.Rule{Op: errorfs.OpSyncFS, Times: 1}
		}, false},
		{"walk", func(root string) *errorfs.Rule {
			return &errorfs.Rule{Op: errorfs.OpReadDir, Path: func(p string) bool { return p == filepath.Join(root, string(KindSeat)) }}
		}, true},
		{"walk after the first sweep", func(root string) *errorfs.Rule {
			// The sweep's listing of seat/ passes; the walk's fails.
			return &errorfs.Rule{Op: errorfs.OpReadDir, Nth: 2, Path: func(p string) bool { return p == filepath.Join(root, string(KindSeat)) }}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			root := newRoot(t)
			s := openStore(t, root, &TOpts{Now: clk.now})
			runLifecycle(t, s, seatKey(t, "s"), sessionKey(t, "x"))
			clk.add(40 * day)
			if tc.name == "first sweep" || tc.name == "walk after the first sweep" {
				if err := os.Mkdir(filepath.Join(root, string(KindSession), dirbackend.TrashPrefix+"planted"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			efs := errorfs.Wrap(vfs.OS, tc.rule(root))
			failing := openStore(t, root, &TOpts{FS: efs, Now: clk.now})
			o := pruneOpts(t, failing, new([]string))
			o.DryRun = tc.dry
			_, err := failing.Prune(ctx, o)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("Prune with a failing %s: %v, want the EIO (injected: %v)", tc.name, err, efs.Injected())
			}
			if !strings.Contains(err.Error(), root) {
				t.Errorf("the error does not name the root's path: %v", err)
			}
			if tc.name == "walk after the first sweep" {
				// Prune sweeps first: what earlier removals left is
				// finished even when the walk then fails.
				if _, err := os.Lstat(filepath.Join(root, string(KindSession), dirbackend.TrashPrefix+"planted")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the trash is still there after the first sweep: %v", err)
				}
			}
		})
	}
}

// A free pair whose claim an orphan still holds (a seat in the
// reference's form, without a pair member, reusing the claim's id) is
// kept: a claim that a held key names is never pruned from under it.
func TestPruneKeepsWhatAnOrphanNames(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	root := newRoot(t)
	s := openStore(t, root, &TOpts{Now: clk.now})
	seat, session := seatKey(t, "b"), sessionKey(t, "x")
	c := runLifecycle(t, s, seat, session)
	orphan := seatKey(t, "a")
	writeRev(t, s, orphan, 1, refRecord(orphan, 1, c.ID, "active").bytes())
	clk.add(40 * day)
	var got []string
	rep, err := s.Prune(ctx, pruneOpts(t, s, &got))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 0 || rep.Compacted != 0 {
		t.Errorf("pruned a pair whose claim an orphan holds: %+v\n%s", rep, strings.Join(got, "\n"))
	}
	want := "kept " + session.String() + ": it names claim " + c.ID + ", which another key still holds"
	if !strings.Contains(strings.Join(got, "\n"), want) {
		t.Errorf("actions:\n%s\nwant %q", strings.Join(got, "\n"), want)
	}
	if h, _ := s.Head(ctx, session); h.N != 4 {
		t.Errorf("session head %d, want 4", h.N)
	}
}
