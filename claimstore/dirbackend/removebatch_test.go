package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
// fails too, that is the error, and their trash is left to Sweep: a crash
// could undo a rename whose fsync failed, and a deletion that went ahead
// would leave that key in place without its files.
func TestRemoveKeysStops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context)
		want  error // errors.Is; nil: any error
		left  []string
		trash int // trash directories left
	}{
		{"canceled", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return New(root, nil), ctx
		}, context.Canceled, []string{"a", "b", "c", "d"}, 0},
		{"failed backend", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			fb := New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncDir})})
			_ = fb.sync(func() error { return fb.fs.SyncDir(root) })
			return fb, context.Background()
		}, storage.ErrSyncFailed, []string{"a", "b", "c", "d"}, 0},
		{"lock", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLock})}), context.Background()
		}, syscall.EIO, []string{"a", "b", "c", "d"}, 0},
		{"untrusted head", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			if err := os.Chmod(filepath.Join(root, string(locs[1].Kind), locs[1].Hash), 0o777); err != nil {
				t.Fatal(err)
			}
			return New(root, nil), context.Background()
		}, nil, []string{"b", "c", "d"}, 0},
		{"rename", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Suffix(locs[1].Hash), Err: syscall.ENOSPC})}), context.Background()
		}, syscall.ENOSPC, []string{"b", "c", "d"}, 0},
		{"rename and its sync", func(t *testing.T, root string, locs []storage.Loc) (*Backend, context.Context) {
			return New(root, &Options{FS: errorfs.Wrap(vfs.OS,
				&errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Suffix(locs[1].Hash), Err: syscall.ENOSPC},
				&errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(string(storage.KindSession))},
			)}), context.Background()
		}, syscall.EIO, []string{"b", "c", "d"}, 1},
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
			kind := filepath.Join(root, string(storage.KindSession))
			ents, err := os.ReadDir(kind)
			if err != nil {
				t.Fatal(err)
			}
			trash := 0
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), TrashPrefix) {
					trash++
					if err := os.RemoveAll(filepath.Join(kind, e.Name())); err != nil {
						t.Fatal(err)
					}
				}
			}
			if trash != tc.trash {
				t.Errorf("%d trash directories left, want %d", trash, tc.trash)
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

// The trash is deleted whole whatever the key directory held: revisions
// down to its base (a compacted key's lower ones are gone), a base
// pointer, a crash's temporary. A key directory gone before its removal
// is reported moved; a revision above the head that cannot be looked at
// stops the batch, removing nothing after it.
func TestRemoveKeysDeletesWhatTheTrashHolds(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	var locs []storage.Loc
	var rs []storage.Removal
	for _, c := range []byte("abcd") {
		loc := sessionLoc(c)
		for n := uint64(1); n <= 3; n++ {
			publishRaw(t, b, loc, n, fmt.Sprintf("r%d of %s", n, loc.Hash))
		}
		locs = append(locs, loc)
		rs = append(rs, storage.Removal{Loc: loc, N: 3, Head: []byte("r3 of " + loc.Hash)})
	}
	dir := func(i int) string { return filepath.Join(root, string(locs[i].Kind), locs[i].Hash) }
	// b: a crash's temporary beside its revisions.
	if err := os.WriteFile(filepath.Join(dir(1), ".tmp-left"), nil, 0o400); err != nil {
		t.Fatal(err)
	}
	// c: compacted to base 2 (revision 1 gone, a base pointer).
	if err := os.Remove(filepath.Join(dir(2), storage.RevisionName(1))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir(2), BaseName), []byte("{}\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	// d: gone before its removal.
	if err := os.RemoveAll(dir(3)); err != nil {
		t.Fatal(err)
	}
	errs, err := b.RemoveKeys(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"ok", "ok", "ok", "moved"}, errNames(errs)); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if left := present(t, root, locs); len(left) != 0 {
		t.Errorf("keys left: %q", left)
	}

	root2, locs2 := fourKeys(t)
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLstat, Path: errorfs.Suffix(filepath.Join(locs2[1].Hash, storage.RevisionName(2)))})
	rs = nil
	for _, loc := range locs2 {
		rs = append(rs, removalOf(loc))
	}
	if errs, err := New(root2, &Options{FS: efs}).RemoveKeys(context.Background(), rs); !errors.Is(err, syscall.EIO) || errs != nil {
		t.Fatalf("RemoveKeys with revision 2 of b unreadable: %v, %v; want EIO (injected %v)", errNames(errs), err, efs.Injected())
	}
	if d := cmp.Diff([]string{"b", "c", "d"}, present(t, root2, locs2)); d != "" {
		t.Errorf("keys left (-want +got):\n%s", d)
	}
}

// trashCountFS is the OS filesystem counting the removals and listings
// made inside trash, and failing the first removal of a name with the
// suffix fail.
type trashCountFS struct {
	vfs.OSFS
	mu             sync.Mutex
	removes, lists int
	fail           string
	failed         bool
}

func inTrash(name string) bool { return strings.Contains(name, string(filepath.Separator)+TrashPrefix) }

func (f *trashCountFS) Remove(name string) error {
	f.mu.Lock()
	if inTrash(name) {
		f.removes++
	}
	failNow := f.fail != "" && !f.failed && strings.HasSuffix(name, f.fail)
	if failNow {
		f.failed = true
	}
	f.mu.Unlock()
	if failNow {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.EIO}
	}
	return f.OSFS.Remove(name)
}

func (f *trashCountFS) ReadDir(name string) ([]string, error) {
	f.mu.Lock()
	if inTrash(name) {
		f.lists++
	}
	f.mu.Unlock()
	return f.OSFS.ReadDir(name)
}

// The trash of a removal is deleted by the names its check found, from
// the head down to the first missing revision, without listing it: a key
// of revisions 1..3 costs three unlinks and a rmdir. Only what else is in
// it (a compacted key's base pointer) is listed, once. An unlink that
// fails stops the deletion there, and the trash is left for Sweep.
func TestRemoveKeysDeletesTrashByName(t *testing.T) {
	for _, tc := range []struct {
		name           string
		compacted      bool
		fail           string
		removes, lists int
		left           int
	}{
		{"revisions only", false, "", 4, 0, 0},
		// r5, r4, r3, r2 (missing: the end), the rmdir (not empty), then
		// the listing, the base pointer and the rmdir.
		{"compacted", true, "", 7, 1, 0},
		{"an unlink fails", false, storage.RevisionName(2), 2, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			b := New(root, nil)
			loc := sessionLoc('t')
			top := uint64(3)
			if tc.compacted {
				top = 5
			}
			for n := uint64(1); n <= top; n++ {
				publishRaw(t, b, loc, n, fmt.Sprintf("r%d", n))
			}
			dir := filepath.Join(root, string(loc.Kind), loc.Hash)
			if tc.compacted {
				for _, n := range []uint64{1, 2} {
					if err := os.Remove(filepath.Join(dir, storage.RevisionName(n))); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, BaseName), []byte("{}\n"), 0o400); err != nil {
					t.Fatal(err)
				}
			}
			fsys := &trashCountFS{fail: tc.fail}
			errs, err := New(root, &Options{FS: fsys}).RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: top, Head: []byte(fmt.Sprintf("r%d", top))}})
			if err != nil || errs[0] != nil {
				t.Fatalf("RemoveKeys: %v, %v", errs, err)
			}
			if fsys.removes != tc.removes || fsys.lists != tc.lists {
				t.Errorf("%d removals and %d listings in the trash, want %d and %d", fsys.removes, fsys.lists, tc.removes, tc.lists)
			}
			ents, err := os.ReadDir(filepath.Join(root, string(loc.Kind)))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != tc.left {
				t.Errorf("%d names left in the kind directory, want %d (trash for Sweep)", len(ents), tc.left)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the key directory is still there: %v", err)
			}
		})
	}
}
