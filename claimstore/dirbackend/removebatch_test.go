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
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// RemoveKeys, key by key and as a batch: which keys are gone and which are
// whole afterwards, each key's result, the batch's error, and that no
// trash is left behind, for a batch that mixes moved heads with removals,
// and for one stopped at each of its steps.

// fourKeys publishes sessions a-d at revision 1 ("head of" their hash) on
// a new root.
func fourKeys(t *testing.T) (root string, locs []storage.Loc) {
	t.Helper()
	root = newRoot(t)
	b := New(root, nil)
	for _, c := range []byte("abcd") {
		loc := sessionLoc(c)
		publishRaw(t, b, loc, 1, "head of "+loc.Hash)
		locs = append(locs, loc)
	}
	return root, locs
}

func removalOf(loc storage.Loc) storage.Removal {
	return storage.Removal{Loc: loc, N: 1, Head: []byte("head of " + loc.Hash)}
}

// present lists which of locs still have a key directory, and fails on
// trash left in the session kind directory.
func present(t *testing.T, root string, locs []storage.Loc) []string {
	t.Helper()
	var out []string
	for _, loc := range locs {
		if _, err := os.Lstat(filepath.Join(root, string(loc.Kind), loc.Hash)); err == nil {
			out = append(out, loc.Hash[:1])
		}
	}
	ents, _ := os.ReadDir(filepath.Join(root, string(storage.KindSession)))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TrashPrefix) {
			t.Errorf("trash left behind: %s", e.Name())
		}
	}
	return out
}

// errNames is each result as a word: "ok", "moved", or the error.
func errNames(errs []error) []string {
	var out []string
	for _, err := range errs {
		switch {
		case err == nil:
			out = append(out, "ok")
		case errors.Is(err, storage.ErrHeadMoved):
			out = append(out, "moved")
		default:
			out = append(out, err.Error())
		}
	}
	return out
}

// Moved heads (other bytes, another number, an unreadable revision) are
// reported each and left whole; every other key of the batch is removed,
// before and after them.
func TestRemoveKeysMixed(t *testing.T) {
	root, locs := fourKeys(t)
	b := New(root, nil)
	// b: another number; c: revision 1 cannot be read (a symlink).
	publishRaw(t, b, locs[1], 2, "second")
	cdir := filepath.Join(root, string(locs[2].Kind), locs[2].Hash)
	if err := os.Remove(filepath.Join(cdir, storage.RevisionName(1))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(cdir, storage.RevisionName(1))); err != nil {
		t.Fatal(err)
	}
	rs := []storage.Removal{
		{Loc: locs[0], N: 1, Head: []byte("other bytes")},
		removalOf(locs[3]),
		removalOf(locs[1]),
	}
	errs, err := New(root, nil).RemoveKeys(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"moved", "ok", "moved"}, errNames(errs)); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"a", "b", "c"}, present(t, root, locs)); d != "" {
		t.Errorf("keys left (-want +got):\n%s", d)
	}
}

// More keys than one hold of the lock covers: every one removed, each
// result in its place.
func TestRemoveKeysOverSeveralHolds(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	var rs []storage.Removal
	var locs []storage.Loc
	for i := range removeBatchMax + 2 {
		loc := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("0", 28) + hex4(i)}
		publishRaw(t, b, loc, 1, "head of "+loc.Hash)
		locs = append(locs, loc)
		rs = append(rs, removalOf(loc))
	}
	// The last key's head moved: its result is the last.
	rs[len(rs)-1].Head = []byte("other")
	errs, err := b.RemoveKeys(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(rs))
	for i := range want {
		want[i] = "ok"
	}
	want[len(want)-1] = "moved"
	if d := cmp.Diff(want, errNames(errs)); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{locs[len(locs)-1].Hash[:1]}, present(t, root, locs[len(locs)-1:])); d != "" {
		t.Errorf("the moved key (-want +got):\n%s", d)
	}
	if left := present(t, root, locs[:len(locs)-1]); len(left) != 0 {
		t.Errorf("%d keys left that were to be removed", len(left))
	}
}

func hex4(i int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[i>>12&15], digits[i>>8&15], digits[i>>4&15], digits[i&15]})
}

// A batch stops, with its error and no per-key results, when the context
// is done, the backend has failed, the lock cannot be taken, a head cannot
// be judged (its key directory is not trusted), or a rename fails; the
// keys renamed before the failure are removed (made durable first, their
// trash deleted), the others whole. When making those renames durable
// fails too, that is the error.
func TestRemoveKeysStops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context)
		want  error // errors.Is; nil: any error
		left  []string
	}{
		{"canceled", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return New(root, nil), ctx
		}, context.Canceled, []string{"a", "b", "c", "d"}},
		{"failed backend", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			fb := New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncDir})})
			_ = fb.sync(func() error { return fb.fs.SyncDir(root) })
			return fb, context.Background()
		}, storage.ErrSyncFailed, []string{"a", "b", "c", "d"}},
		{"lock", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLock})}), context.Background()
		}, syscall.EIO, []string{"a", "b", "c", "d"}},
		{"untrusted head", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			if err := os.Chmod(filepath.Join(root, string(locs[1].Kind), locs[1].Hash), 0o777); err != nil {
				t.Fatal(err)
			}
			return New(root, nil), context.Background()
		}, nil, []string{"b", "c", "d"}},
		{"rename", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Suffix(locs[1].Hash), Err: syscall.ENOSPC})}), context.Background()
		}, syscall.ENOSPC, []string{"b", "c", "d"}},
		{"rename and its sync", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS,
				&errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Suffix(locs[1].Hash), Err: syscall.ENOSPC},
				&errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(string(storage.KindSession))},
			)}), context.Background()
		}, syscall.EIO, []string{"b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, locs := fourKeys(t)
			b, ctx := tc.setup(t, root, locs)
			var rs []storage.Removal
			for _, loc := range locs {
				rs = append(rs, removalOf(loc))
			}
			errs, err := b.RemoveKeys(ctx, rs)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || errs != nil {
				t.Fatalf("RemoveKeys: %v, %v; want no results and an error (%v)", errNames(errs), err, tc.want)
			}
			if tc.name == "untrusted head" {
				if err := os.Chmod(filepath.Join(root, string(locs[1].Kind), locs[1].Hash), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			got := present(t, root, locs)
			sort.Strings(got)
			if d := cmp.Diff(tc.left, got); d != "" {
				t.Errorf("keys left (-want +got):\n%s", d)
			}
			// The lock was let go.
			unlock, err := New(root, nil).lockPrune(true)
			if err != nil {
				t.Fatal(err)
			}
			unlock()
		})
	}
}
