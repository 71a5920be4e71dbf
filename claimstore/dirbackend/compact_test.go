package dirbackend

import (
	"context"
	"errors"
	"io/fs"
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

// Compact, call by call: what it leaves in the key directory (the names,
// exactly), the base it reads back, and its error, for a compaction that
// succeeds, one with nothing to do, and one failing at each of its steps.
// A failing step must leave the key as it was (or, after the base is
// durable, readable from the base), and must not keep the prune lock.

func seatLoc(c byte) storage.Loc {
	return storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat(string([]byte{c}), 32)}
}

// sixRevisions is a backend on a new root with seat loc r1-r6.
func sixRevisions(t *testing.T) (root string, b *Backend, loc storage.Loc) {
	t.Helper()
	root = newRoot(t)
	b = New(root, nil)
	loc = seatLoc('a')
	for n := uint64(1); n <= 6; n++ {
		publishRaw(t, b, loc, n, "revision")
	}
	return root, b, loc
}

// names lists dir's entries, stage names shortened to their prefix.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, baseStagePrefix) {
			n = baseStagePrefix
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func revNames(ns ...uint64) []string {
	var out []string
	for _, n := range ns {
		out = append(out, storage.RevisionName(n))
	}
	return out
}

// baseIs checks the base b reads for loc.
func baseIs(t *testing.T, b *Backend, loc storage.Loc, want uint64) {
	t.Helper()
	got, err := b.Base(context.Background(), loc)
	if err != nil || got != want {
		t.Errorf("base %d, %v; want %d", got, err, want)
	}
}

// compactAgain checks that the prune lock was let go: another Compact,
// on a healthy backend of the same root, takes it and returns.
func compactAgain(t *testing.T, root string, loc storage.Loc, base uint64) {
	t.Helper()
	if err := New(root, nil).Compact(context.Background(), loc, base); err != nil {
		t.Errorf("a second Compact after the first: %v", err)
	}
}

func TestCompactRemovesBelowTheBase(t *testing.T) {
	root, b, loc := sixRevisions(t)
	dir := b.dir(loc)
	// What a cut-short compaction can leave: a stage of the base pointer.
	if err := os.WriteFile(filepath.Join(dir, baseStagePrefix+"0123"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := b.Compact(context.Background(), loc, 4); err != nil {
		t.Fatal(err)
	}
	want := append([]string{BaseName}, revNames(4, 5, 6)...)
	if d := cmp.Diff(want, names(t, dir)); d != "" {
		t.Errorf("key directory (-want +got):\n%s", d)
	}
	baseIs(t, b, loc, 4)
	// The same base again, or a lower one: the base pointer is not
	// rewritten (same file), nothing else changes.
	before, err := os.Stat(filepath.Join(dir, BaseName))
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []uint64{4, 2} {
		if err := b.Compact(context.Background(), loc, base); err != nil {
			t.Fatalf("Compact to %d under base 4: %v", base, err)
		}
	}
	after, err := os.Stat(filepath.Join(dir, BaseName))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the base pointer was rewritten by a compaction to the base it has (or below)")
	}
	if d := cmp.Diff(want, names(t, dir)); d != "" {
		t.Errorf("key directory after compacting again (-want +got):\n%s", d)
	}
	baseIs(t, b, loc, 4)
	compactAgain(t, root, loc, 5)
	baseIs(t, b, loc, 5)
}

// Revisions left below the base (the unlinks of a compaction cut short)
// are removed by the next Compact to that base; with nothing below the
// base, Compact does not even fsync the directory.
func TestCompactFinishesAndSyncsOnlyWhenItRemoves(t *testing.T) {
	root, b, loc := sixRevisions(t)
	if err := b.Compact(context.Background(), loc, 4); err != nil {
		t.Fatal(err)
	}
	dir := b.dir(loc)
	// Nothing to remove: a backend whose directory fsync fails still
	// succeeds, and is not failed.
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(loc.Hash)})
	fb := New(root, &Options{FS: efs})
	if err := fb.Compact(context.Background(), loc, 4); err != nil {
		t.Fatalf("Compact with nothing to remove: %v (injected %v)", err, efs.Injected())
	}
	if err := fb.checkFailed(); err != nil {
		t.Fatalf("Compact with nothing to remove failed the backend: %v", err)
	}
	for _, n := range []uint64{1, 3} {
		if err := os.WriteFile(filepath.Join(dir, storage.RevisionName(n)), []byte("left"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	// Something to remove: the fsync is made, and its failure is the
	// error (the backend's failure sticky).
	err := fb.Compact(context.Background(), loc, 4)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Compact whose fsync fails: %v", err)
	}
	if err := fb.checkFailed(); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("after a failed fsync the backend is not failed: %v", err)
	}
	want := append([]string{BaseName}, revNames(4, 5, 6)...)
	if d := cmp.Diff(want, names(t, dir)); d != "" {
		t.Errorf("key directory (-want +got):\n%s", d)
	}
}

// A revision below the base that is already gone when Compact unlinks it
// (another prune's) is no error; any other failed unlink is.
func TestCompactUnlinkFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"gone", fs.ErrNotExist, nil},
		{"fails", syscall.EIO, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, b, loc := sixRevisions(t)
			efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpRemove, Path: errorfs.Suffix(storage.RevisionName(1)), Err: tc.err})
			fb := New(root, &Options{FS: efs})
			err := fb.Compact(context.Background(), loc, 4)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Compact: %v, want %v", err, tc.want)
			}
			// r1 is left either way (the fault kept the unlink from
			// happening); after a failure, what follows r1 in the
			// directory's order is not unlinked either, unseen below the
			// base.
			got := names(t, b.dir(loc))
			if !contains(got, storage.RevisionName(1)) || !contains(got, BaseName) {
				t.Errorf("key directory %q, want r1 and the base left", got)
			}
			if tc.want == nil {
				if d := cmp.Diff(append([]string{BaseName}, revNames(1, 4, 5, 6)...), got); d != "" {
					t.Errorf("key directory (-want +got):\n%s", d)
				}
			}
			baseIs(t, b, loc, 4)
			compactAgain(t, root, loc, 4)
		})
	}
}

// Compact refuses, changing nothing, when: the context is done, the
// backend has failed, the key does not exist, its directory is not
// trusted, its base pointer is damaged, the base revision does not exist,
// the prune lock cannot be taken, the base pointer cannot be written, or
// the directory cannot be read after it.
func TestCompactRefuses(t *testing.T) {
	all := revNames(1, 2, 3, 4, 5, 6)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc)
		base  uint64
		want  error // errors.Is; nil: any error
		left  []string
	}{
		{"canceled", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return b, ctx, loc
		}, 4, context.Canceled, all},
		{"failed backend", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpSyncDir})
			fb := New(root, &Options{FS: efs})
			_ = fb.sync(func() error { return fb.fs.SyncDir(root) })
			return fb, context.Background(), loc
		}, 4, storage.ErrSyncFailed, all},
		{"no key", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			return b, context.Background(), seatLoc('b')
		}, 4, fs.ErrNotExist, all},
		{"untrusted", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			if err := os.Chmod(b.dir(loc), 0o777); err != nil {
				t.Fatal(err)
			}
			return b, context.Background(), loc
		}, 4, nil, all},
		{"damaged base pointer", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			if err := os.WriteFile(filepath.Join(b.dir(loc), BaseName), []byte("{}"), 0o400); err != nil {
				t.Fatal(err)
			}
			return b, context.Background(), loc
		}, 4, nil, append([]string{BaseName}, all...)},
		{"no base revision", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			return b, context.Background(), loc
		}, 7, fs.ErrNotExist, all},
		{"lock", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			return New(root, &Options{FS: errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpLock})}), context.Background(), loc
		}, 4, syscall.EIO, all},
		{"base pointer", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			return New(root, &Options{FS: errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Contains(baseStagePrefix)})}), context.Background(), loc
		}, 4, syscall.EIO, all},
		{"read after the base", func(t *testing.T, root string, b *Backend, loc storage.Loc) (*Backend, context.Context, storage.Loc) {
			return New(root, &Options{FS: errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpReadDir, Path: errorfs.Suffix(loc.Hash)})}), context.Background(), loc
		}, 4, syscall.EIO, append([]string{BaseName}, all...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, b, loc := sixRevisions(t)
			fb, ctx, target := tc.setup(t, root, b, loc)
			err := fb.Compact(ctx, target, tc.base)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Compact: %v, want an error (%v)", err, tc.want)
			}
			if tc.name == "untrusted" && errors.Is(err, fs.ErrNotExist) {
				// The key is there: the error is the distrust, not a
				// missing key.
				t.Errorf("Compact of an untrusted key: %v, want the distrust, not ErrNotExist", err)
			}
			if tc.name == "untrusted" {
				if err := os.Chmod(b.dir(loc), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(tc.left, names(t, b.dir(loc))); d != "" {
				t.Errorf("key directory (-want +got):\n%s", d)
			}
			lockFree(t, root)
			if tc.name != "damaged base pointer" {
				compactAgain(t, root, loc, 4)
			}
		})
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A base pointer that is not durable is not reported written: a fault at
// any step of writing it (the temporary made, written, fsynced, linked
// under its stage name, the key directory fsynced after the rename) is
// Compact's error, and nothing below the base is unlinked. Before the
// rename the key reads from its old base; after it, the pointer is in
// place but not known durable, and every revision is still there.
func TestCompactBasePointerNotDurable(t *testing.T) {
	all := revNames(1, 2, 3, 4, 5, 6)
	for _, tc := range []struct {
		name string
		rule *errorfs.Rule
		want error  // errors.Is
		text string // in the error's text, when set
		left []string
		base uint64
	}{
		{"temporary", &errorfs.Rule{Op: errorfs.OpCreateTemp}, syscall.EIO, "", all, 1},
		{"write", &errorfs.Rule{Op: errorfs.OpWrite, Err: syscall.ENOSPC}, syscall.ENOSPC, "", all, 1},
		{"short write", &errorfs.Rule{Op: errorfs.OpWrite, Kind: errorfs.ShortWrite}, nil, "short write", all, 1},
		{"write reported failed after it", &errorfs.Rule{Op: errorfs.OpWrite, Kind: errorfs.FailAfter}, syscall.EIO, "", all, 1},
		{"fsync of the temporary", &errorfs.Rule{Op: errorfs.OpSync}, syscall.EIO, "", all, 1},
		{"link", &errorfs.Rule{Op: errorfs.OpLink, Path: errorfs.Contains(baseStagePrefix)}, syscall.EIO, "", all, 1},
		{"fsync of the key directory", &errorfs.Rule{Op: errorfs.OpSyncDir}, syscall.EIO, "", append([]string{BaseName}, all...), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, b, loc := sixRevisions(t)
			tc.rule.Path = andPath(tc.rule.Path, errorfs.Contains(loc.Hash))
			efs := errorfs.Wrap(b.fs, tc.rule)
			err := New(root, &Options{FS: efs}).Compact(context.Background(), loc, 4)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Compact: %v; want %v %q (injected %v)", err, tc.want, tc.text, efs.Injected())
			}
			if len(efs.Injected()) == 0 {
				t.Fatalf("no fault injected")
			}
			if d := cmp.Diff(tc.left, names(t, b.dir(loc))); d != "" {
				t.Errorf("key directory (-want +got):\n%s", d)
			}
			baseIs(t, New(root, nil), loc, tc.base)
			lockFree(t, root)
		})
	}
}

// andPath matches where both predicates do (a nil one matches all).
func andPath(a, b func(string) bool) func(string) bool {
	if a == nil {
		return b
	}
	return func(p string) bool { return a(p) && b(p) }
}

// A canceled Compact or RemoveKeys reports its cancellation, as Head and
// Prepare do, also on a backend that has failed: the caller learns what it
// asked for, and nothing is touched either way.
func TestCanceledOnAFailedBackend(t *testing.T) {
	root, b, loc := sixRevisions(t)
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpSyncDir})
	fb := New(root, &Options{FS: efs})
	_ = fb.sync(func() error { return fb.fs.SyncDir(root) })
	if err := fb.checkFailed(); err == nil {
		t.Fatal("the backend did not fail")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fb.Compact(ctx, loc, 4); !errors.Is(err, context.Canceled) {
		t.Errorf("Compact: %v, want context.Canceled", err)
	}
	_, head, err := b.Head(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := fb.RemoveKeys(ctx, []storage.Removal{{Loc: loc, N: 6, Head: head}}); !errors.Is(err, context.Canceled) {
		t.Errorf("RemoveKeys: %v, %v; want context.Canceled", errs, err)
	}
	if d := cmp.Diff(all6(), names(t, b.dir(loc))); d != "" {
		t.Errorf("key directory (-want +got):\n%s", d)
	}
}

func all6() []string { return revNames(1, 2, 3, 4, 5, 6) }

// A key "directory" that is a symlink, in a kind directory others can
// write: Compact and RemoveKeys refuse with the key's own problem (not a
// directory; the store never follows it), as Head does, rather than with
// the kind directory's distrust, and neither follows the link.
func TestSymlinkedKeyInADistrustedKind(t *testing.T) {
	root, b, loc := sixRevisions(t)
	_, head, err := b.Head(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(b.dir(loc), elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, b.dir(loc)); err != nil {
		t.Fatal(err)
	}
	kind := filepath.Dir(b.dir(loc))
	if err := os.Chmod(kind, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(kind, 0o700) })
	keyProblem := func(what string, err error) {
		t.Helper()
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Op != "open directory" || pe.Path != b.dir(loc) || !errors.Is(err, storage.ErrUnsafePath) {
			t.Errorf("%s: %v; want the key directory refused as a symlink", what, err)
		}
	}
	fb := New(root, nil)
	_, _, err = fb.Head(context.Background(), loc)
	keyProblem("Head", err)
	keyProblem("Compact", fb.Compact(context.Background(), loc, 4))
	_, err = fb.RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: 6, Head: head}})
	keyProblem("RemoveKeys", err)
	if d := cmp.Diff(all6(), names(t, elsewhere)); d != "" {
		t.Errorf("the directory linked to (-want +got):\n%s", d)
	}
}

// listWatchFS records, at every listing of a key directory, whether the
// prune lock was held then.
type listWatchFS struct {
	*lockWatchFS
	listed []bool
}

func (f *listWatchFS) ReadDir(name string) ([]string, error) {
	f.mu.Lock()
	f.listed = append(f.listed, f.held > 0)
	f.mu.Unlock()
	return f.lockWatchFS.ReadDir(name)
}

// Compact lists the key directory before it lets the prune lock go: a
// stage of the base pointer it then removes is a crash's leftover, never
// that of another compaction of the key, which holds the lock from its
// stage's link to its rename.
func TestCompactListsUnderTheLock(t *testing.T) {
	root, b, loc := sixRevisions(t)
	if err := os.WriteFile(filepath.Join(b.dir(loc), baseStagePrefix+"0123"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	w := &listWatchFS{lockWatchFS: &lockWatchFS{FS: b.fs}}
	if err := New(root, &Options{FS: w}).Compact(context.Background(), loc, 4); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]bool{true}, w.listed); d != "" {
		t.Errorf("listings made with the prune lock held (-want +got):\n%s", d)
	}
	if d := cmp.Diff(append([]string{BaseName}, revNames(4, 5, 6)...), names(t, b.dir(loc))); d != "" {
		t.Errorf("key directory (-want +got):\n%s", d)
	}
	lockFree(t, root)
}

// Compact checks the key directory before it writes anything in it: a key
// directory another user could write into, or one that is not there, is
// refused with what is wrong with it, and no base pointer is staged in it
// (a temporary whose creation would fail is never asked for).
func TestCompactChecksTheKeyDirectoryFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape func(t *testing.T, dir string)
		check func(t *testing.T, err error)
	}{
		{"writable by others", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, err error) {
			var pe *fs.PathError
			if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), "write") {
				t.Errorf("Compact in a directory others can write: %v, want the distrust named", err)
			}
		}},
		{"missing", func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, err error) {
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Op != "compact" || !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Compact of a missing key directory: %v, want a compact error wrapping ErrNotExist", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, b, loc := sixRevisions(t)
			tc.shape(t, b.dir(loc))
			efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpCreateTemp})
			err := New(root, &Options{FS: efs}).Compact(context.Background(), loc, 4)
			if errors.Is(err, syscall.EIO) || len(efs.Injected()) != 0 {
				t.Fatalf("Compact staged a base pointer before checking the key directory: %v (injected %v)", err, efs.Injected())
			}
			tc.check(t, err)
		})
	}
}
