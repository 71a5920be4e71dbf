package dirbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// Sweep, kind directory by kind directory: which trash it removes, which
// it leaves, what it counts, and its error, over kind directories that are
// missing, distrusted or unreadable, and on a canceled context.

// plantTrash makes what a removal cut short leaves: a trash directory
// holding a revision, in kind's directory.
func plantTrash(t *testing.T, root string, kind storage.Kind, name string) {
	t.Helper()
	dir := filepath.Join(root, string(kind), TrashPrefix+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, storage.RevisionName(1)), []byte("removed"), 0o400); err != nil {
		t.Fatal(err)
	}
}

// trashLeft lists the trash left in both kind directories, as kind/name.
func trashLeft(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, kind := range []storage.Kind{storage.KindSeat, storage.KindSession} {
		ents, err := os.ReadDir(filepath.Join(root, string(kind)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), TrashPrefix) {
				out = append(out, string(kind)+"/"+strings.TrimPrefix(e.Name(), TrashPrefix))
			}
		}
	}
	sort.Strings(out)
	return out
}

// A missing seat directory, or one others can write (whose trash is not
// the store's to judge), is passed over: the session directory's trash is
// still swept, and the keys beside it kept.
func TestSweepPassesOverAKindDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		seat func(t *testing.T, root string) // nil: no seat directory
		left []string
	}{
		{"missing", nil, nil},
		{"distrusted", func(t *testing.T, root string) {
			plantTrash(t, root, storage.KindSeat, "s1")
			if err := os.Chmod(filepath.Join(root, string(storage.KindSeat)), 0o777); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, string(storage.KindSeat)), 0o700) })
		}, []string{"seat/s1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			b := New(root, nil)
			key := sessionLoc('a')
			publishRaw(t, b, key, 1, "kept")
			plantTrash(t, root, storage.KindSession, "t1")
			plantTrash(t, root, storage.KindSession, "t2")
			if tc.seat != nil {
				tc.seat(t, root)
			}
			n, err := New(root, nil).Sweep(context.Background())
			if err != nil || n != 2 {
				t.Errorf("Sweep: %d, %v; want 2, nil", n, err)
			}
			if d := cmp.Diff(tc.left, trashLeft(t, root)); d != "" {
				t.Errorf("trash left (-want +got):\n%s", d)
			}
			headIs(t, root, key, 1)
		})
	}
}

// A kind directory Sweep cannot list is its error.
func TestSweepUnreadableKindDirectory(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	publishRaw(t, b, sessionLoc('a'), 1, "kept")
	plantTrash(t, root, storage.KindSession, "t1")
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpReadDir, Path: errorfs.Suffix(string(filepath.Separator) + string(storage.KindSession))})
	n, err := New(root, &Options{FS: efs}).Sweep(context.Background())
	if n != 0 || !errors.Is(err, syscall.EIO) {
		t.Errorf("Sweep: %d, %v; want 0, EIO", n, err)
	}
	if d := cmp.Diff([]string{"session/t1"}, trashLeft(t, root)); d != "" {
		t.Errorf("trash left (-want +got):\n%s", d)
	}
}

// A canceled Sweep removes no trash and says so.
func TestSweepCanceled(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	publishRaw(t, b, sessionLoc('a'), 1, "kept")
	plantTrash(t, root, storage.KindSession, "t1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := b.Sweep(ctx)
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("Sweep: %d, %v; want 0, context.Canceled", n, err)
	}
	if d := cmp.Diff([]string{"session/t1"}, trashLeft(t, root)); d != "" {
		t.Errorf("trash left (-want +got):\n%s", d)
	}
	// Not canceled: swept.
	if n, err := b.Sweep(context.Background()); n != 1 || err != nil {
		t.Errorf("Sweep: %d, %v; want 1, nil", n, err)
	}
	if d := cmp.Diff([]string(nil), trashLeft(t, root)); d != "" {
		t.Errorf("trash left (-want +got):\n%s", d)
	}
}
