package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// guarded.Commit (PrepareOver): a revision is linked only while the one
// below it still holds what was read, under the prune lock held shared
// from that check to the link; a refused or failed commit aborts (a
// prepared revision is committed at most once) and lets the lock go.

// lockWatchFS records, at every link of a temporary, whether the prune
// lock was held then.
type lockWatchFS struct {
	vfs.FS
	mu     sync.Mutex
	held   int
	linked []bool
}

func (f *lockWatchFS) Lock(dir string, exclusive bool) (func() error, error) {
	unlock, err := f.FS.(vfs.Locker).Lock(dir, exclusive)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.held++
	f.mu.Unlock()
	return func() error {
		f.mu.Lock()
		f.held--
		f.mu.Unlock()
		return unlock()
	}, nil
}

func (f *lockWatchFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.FS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return &watchedTemp{TempFile: t, f: f}, nil
}

type watchedTemp struct {
	vfs.TempFile
	f *lockWatchFS
}

func (t *watchedTemp) Link(name string) error {
	t.f.mu.Lock()
	t.f.linked = append(t.f.linked, t.f.held > 0)
	t.f.mu.Unlock()
	return t.TempFile.Link(name)
}

// guardedOver prepares revision 2 of a new key whose revision 1 is "one",
// over prev, on a backend of fsys (nil: the OS's).
func guardedOver(t *testing.T, fsys vfs.FS, prev string) (root string, b *Backend, loc storage.Loc, p storage.Prepared) {
	t.Helper()
	root = newRoot(t)
	loc = sessionLoc('g')
	publishRaw(t, New(root, nil), loc, 1, "one")
	var o *Options
	if fsys != nil {
		o = &Options{FS: fsys}
	}
	b = New(root, o)
	p, err := b.PrepareOver(context.Background(), loc, 2, []byte("two"), []byte(prev), nil)
	if err != nil {
		t.Fatal(err)
	}
	return root, b, loc, p
}

// headIs checks loc's head on a fresh backend of root.
func headIs(t *testing.T, root string, loc storage.Loc, want uint64) {
	t.Helper()
	if n, _, err := New(root, nil).Head(context.Background(), loc); err != nil || n != want {
		t.Errorf("head %d, %v; want %d", n, err, want)
	}
}

// lockFree checks that the prune lock was let go: an exclusive hold (a
// removal's) is taken and released.
func lockFree(t *testing.T, root string) {
	t.Helper()
	unlock, err := New(root, nil).lockPrune(true)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

func TestGuardedCommitLinksUnderTheLock(t *testing.T) {
	w := &lockWatchFS{FS: vfs.OS}
	root, _, loc, p := guardedOver(t, w, "one")
	if err := p.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	headIs(t, root, loc, 2)
	if d := cmp.Diff([]bool{true}, w.linked); d != "" {
		t.Errorf("links made with the prune lock held (-want +got):\n%s", d)
	}
	lockFree(t, root)
	// Committed once: a second Commit is refused, as a misuse (not a
	// moved head), and publishes nothing.
	if err := p.Commit(context.Background()); err == nil || errors.Is(err, storage.ErrHeadMoved) {
		t.Errorf("a second Commit: %v, want the misuse refused", err)
	}
}

// The revision below is no longer what was read (other bytes, or gone):
// ErrHeadMoved, nothing linked, the lock let go, and the prepared revision
// aborted: a later Commit, even once the revision below reads as it did,
// publishes nothing.
func TestGuardedCommitRefusesAMovedHead(t *testing.T) {
	for _, tc := range []struct {
		name string
		prev string
		gone bool
	}{
		{"other bytes", "not one", false},
		{"gone", "one", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, b, loc, p := guardedOver(t, nil, tc.prev)
			if tc.gone {
				if err := os.Remove(filepath.Join(b.dir(loc), storage.RevisionName(1))); err != nil {
					t.Fatal(err)
				}
			}
			err := p.Commit(context.Background())
			if !errors.Is(err, storage.ErrHeadMoved) {
				t.Fatalf("Commit over a moved head: %v, want ErrHeadMoved", err)
			}
			revs, _, lerr := New(root, nil).List(context.Background(), loc)
			if lerr != nil {
				t.Fatal(lerr)
			}
			want := []uint64{1}
			if tc.gone {
				want = nil
			}
			if d := cmp.Diff(want, revs); d != "" {
				t.Errorf("revisions (-want +got):\n%s", d)
			}
			lockFree(t, root)
			if tc.gone {
				publishRaw(t, New(root, nil), loc, 1, "one")
			}
			if err := p.Commit(context.Background()); err == nil || errors.Is(err, storage.ErrHeadMoved) {
				t.Errorf("a Commit after the refusal: %v, want the misuse refused", err)
			}
			headIs(t, root, loc, 1)
		})
	}
}

// A lock that cannot be taken, a link that loses its number, and an fsync
// after the link that fails are each the commit's error; the lock is let
// go, and a refused commit is aborted.
func TestGuardedCommitFailures(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLock, Times: 1})
		root, _, loc, p := guardedOver(t, efs, "one")
		if err := p.Commit(context.Background()); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Commit: %v, want the lock's EIO", err)
		}
		// The lock works again now: the aborted revision still is not
		// published by a second Commit.
		if err := p.Commit(context.Background()); err == nil {
			t.Errorf("a Commit after a failed one succeeded")
		}
		headIs(t, root, loc, 1)
	})
	t.Run("lost race", func(t *testing.T) {
		root, _, loc, p := guardedOver(t, nil, "one")
		publishRaw(t, New(root, nil), loc, 2, "another two")
		if err := p.Commit(context.Background()); !errors.Is(err, storage.ErrRevisionExists) {
			t.Fatalf("Commit of a number another writer took: %v, want ErrRevisionExists", err)
		}
		lockFree(t, root)
	})
	t.Run("fsync", func(t *testing.T) {
		root := newRoot(t)
		loc := sessionLoc('g')
		publishRaw(t, New(root, nil), loc, 1, "one")
		efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(loc.Hash)})
		b := New(root, &Options{FS: efs})
		p, err := b.PrepareOver(context.Background(), loc, 2, []byte("two"), []byte("one"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(context.Background()); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Commit whose directory fsync fails: %v, want EIO", err)
		}
		lockFree(t, root)
	})
}

// The first revision has nothing below it to guard: PrepareOver of
// revision 1 commits as Prepare's does.
func TestGuardedFirstRevision(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	loc := sessionLoc('j')
	p, err := b.PrepareOver(context.Background(), loc, 1, []byte("one"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatalf("Commit of revision 1 over nothing: %v", err)
	}
	headIs(t, root, loc, 1)
}

// Where the filesystem has no flock, the prune lock is a lock of this
// process, one per root: held exclusively (a removal) it lets no other
// hold in, held shared (a publish) it lets other shared holds in and no
// exclusive one, and it is let go.
func TestPruneLockWithoutFlock(t *testing.T) {
	root := newRoot(t)
	publishRaw(t, New(root, nil), sessionLoc('k'), 1, "one")
	efs := errorfs.Wrap(New(root, nil).fs, &errorfs.Rule{Op: errorfs.OpLock, Err: errors.ErrUnsupported})
	b := New(root, &Options{FS: efs})
	l := processLock(root) // what another backend of the root takes
	unlock, err := b.lockPrune(true)
	if err != nil {
		t.Fatal(err)
	}
	if l.TryRLock() {
		l.RUnlock()
		t.Errorf("an exclusive hold lets a shared one in")
	}
	unlock()
	unlock, err = b.lockPrune(false)
	if err != nil {
		t.Fatal(err)
	}
	if !l.TryRLock() {
		t.Errorf("a shared hold keeps another shared one out")
	} else {
		l.RUnlock()
	}
	if l.TryLock() {
		l.Unlock()
		t.Errorf("a shared hold lets an exclusive one in")
	}
	unlock()
	if !l.TryLock() {
		t.Errorf("the lock was not let go")
	} else {
		l.Unlock()
	}
	if len(efs.Injected()) != 2 {
		t.Errorf("flock asked %d times, want 2 (then refused as unsupported)", len(efs.Injected()))
	}
}
