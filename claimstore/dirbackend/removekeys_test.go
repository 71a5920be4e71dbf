package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// publishRaw publishes data as revision n of loc through the backend.
func publishRaw(t *testing.T, b *Backend, loc storage.Loc, n uint64, data string) {
	t.Helper()
	p, err := b.Prepare(context.Background(), loc, n, []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatalf("publishing %s revision %d: %v", loc, n, err)
	}
}

func sessionLoc(c byte) storage.Loc {
	return storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat(string([]byte{c}), 32)}
}

// TestRemoveKeysGuardsEachKey: a batch removes exactly the keys whose head
// is still the one named, reports a moved head for each other key and
// leaves it whole, and leaves no trash behind.
func TestRemoveKeysGuardsEachKey(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	gone, wrongBytes, wrongN := sessionLoc('a'), sessionLoc('b'), sessionLoc('c')
	for _, loc := range []storage.Loc{gone, wrongBytes, wrongN} {
		publishRaw(t, b, loc, 1, "head of "+loc.Hash)
	}
	publishRaw(t, b, wrongN, 2, "second of "+wrongN.Hash)
	errs, err := b.RemoveKeys(context.Background(), []storage.Removal{
		{Loc: gone, N: 1, Head: []byte("head of " + gone.Hash)},
		{Loc: wrongBytes, N: 1, Head: []byte("another head")},
		{Loc: wrongN, N: 1, Head: []byte("head of " + wrongN.Hash)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], storage.ErrHeadMoved) || !errors.Is(errs[2], storage.ErrHeadMoved) {
		t.Fatalf("RemoveKeys errs = %v; want nil, then ErrHeadMoved twice", errs)
	}
	if _, err := os.Lstat(b.dir(gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed key's directory: %v; want it gone", err)
	}
	for loc, want := range map[storage.Loc]uint64{wrongBytes: 1, wrongN: 2} {
		if n, _, err := b.Head(context.Background(), loc); err != nil || n != want {
			t.Errorf("%s: head %d, %v; want %d, whole", loc, n, err, want)
		}
	}
	names, err := os.ReadDir(filepath.Join(root, string(storage.KindSession)))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if strings.HasPrefix(e.Name(), TrashPrefix) {
			t.Errorf("trash left behind: %s", e.Name())
		}
	}
}

// TestRemoveKeysFailedFsync: when the kind directory's fsync fails, the
// batch fails as a whole (no removal may be counted on), and the backend's
// failure is sticky, as every failed fsync's is.
func TestRemoveKeysFailedFsync(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	loc := sessionLoc('d')
	publishRaw(t, b, loc, 1, "head")
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(string(storage.KindSession)), Kind: errorfs.Fail})
	fb := New(root, &Options{FS: efs})
	errs, err := fb.RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: 1, Head: []byte("head")}})
	if !errors.Is(err, syscall.EIO) || errs != nil {
		t.Fatalf("RemoveKeys = %v, %v; want no per-key results and EIO", errs, err)
	}
	if _, err := fb.RemoveKeys(context.Background(), []storage.Removal{{Loc: loc, N: 1, Head: []byte("head")}}); !errors.Is(err, storage.ErrSyncFailed) {
		t.Fatalf("a backend whose fsync failed removes again (%v); want its failure sticky", err)
	}
}

// syncWatchFS records the directories fsynced through it.
type syncWatchFS struct {
	vfs.FS
	mu     sync.Mutex
	synced []string
}

func (f *syncWatchFS) SyncDir(name string) error {
	f.mu.Lock()
	f.synced = append(f.synced, name)
	f.mu.Unlock()
	return f.FS.SyncDir(name)
}

// A backend that removed a key forgets what it had made durable of it: when
// another process makes the key again, Sync of its new revisions fsyncs
// the new directory (they may not be durable: their writer may have died
// before its fsync) instead of taking them for the removed key's; and the
// backend publishes the key anew itself.
func TestRemovedKeyForgotten(t *testing.T) {
	root := newRoot(t)
	w := &syncWatchFS{FS: New(root, nil).fs}
	b := New(root, &Options{FS: w})
	loc := sessionLoc('e')
	for n := uint64(1); n <= 3; n++ {
		publishRaw(t, b, loc, n, "old")
	}
	if err := b.RemoveKey(context.Background(), loc, 3, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if b.IsOwnHead(context.Background(), loc, 3) {
		t.Errorf("a removed key's head is still its own")
	}
	other := New(root, nil)
	publishRaw(t, other, loc, 1, "new")
	publishRaw(t, other, loc, 2, "new")
	w.mu.Lock()
	w.synced = nil
	w.mu.Unlock()
	if err := b.Sync(context.Background(), loc, 2); err != nil {
		t.Fatal(err)
	}
	// The directory and its entry in the kind directory: the other
	// process may have died before it fsynced either.
	if !contains(w.synced, b.dir(loc)) || !contains(w.synced, filepath.Dir(b.dir(loc))) {
		t.Errorf("Sync of the key made again fsynced %q, not its directory and the kind directory", w.synced)
	}
	publishRaw(t, b, loc, 3, "newer")
	n, data, err := New(root, nil).Head(context.Background(), loc)
	if err != nil || n != 3 || string(data) != "newer" {
		t.Errorf("head %d %q, %v; want 3 %q", n, data, err, "newer")
	}
}

// A removal whose rename fails leaves the key whole, and the backend
// remembers it as before: the head it linked is still its own.
func TestFailedRemovalKeepsTheKey(t *testing.T) {
	root := newRoot(t)
	efs := errorfs.Wrap(New(root, nil).fs)
	b := New(root, &Options{FS: efs})
	loc := sessionLoc('f')
	for n := uint64(1); n <= 3; n++ {
		publishRaw(t, b, loc, n, "head")
	}
	if !b.IsOwnHead(context.Background(), loc, 3) {
		t.Fatal("the head just linked is not the backend's own")
	}
	efs.Add(&errorfs.Rule{Op: errorfs.OpRename, Path: errorfs.Suffix(loc.Hash)})
	if err := b.RemoveKey(context.Background(), loc, 3, []byte("head")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("RemoveKey with its rename failing: %v, want EIO", err)
	}
	if !b.IsOwnHead(context.Background(), loc, 3) {
		t.Errorf("after a failed removal the head it linked is no longer the backend's own")
	}
	headIs(t, root, loc, 3)
}

// An empty batch does nothing: it takes no prune lock (which would stall
// every publish for nothing) and so cannot fail on one.
func TestRemoveKeysEmpty(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	publishRaw(t, b, sessionLoc('g'), 1, "head")
	efs := errorfs.Wrap(b.fs, &errorfs.Rule{Op: errorfs.OpLock})
	errs, err := New(root, &Options{FS: efs}).RemoveKeys(context.Background(), nil)
	if len(errs) != 0 || err != nil {
		t.Errorf("RemoveKeys of nothing: %v, %v; want no results, no error", errs, err)
	}
	if got := efs.Injected(); len(got) != 0 {
		t.Errorf("RemoveKeys of nothing took the lock: %v", got)
	}
}

// reusedIdentityFS answers Lstat of one path with a FileInfo saved
// earlier, while a file is there: a file put in place of a removed one
// that got its inode, size and times back.
type reusedIdentityFS struct {
	vfs.FS
	mu   sync.Mutex
	path string
	fi   fs.FileInfo
}

func (f *reusedIdentityFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := f.FS.Lstat(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && name == f.path && f.fi != nil {
		return f.fi, nil
	}
	return fi, err
}

// A removed key's head is not the backend's own any more, even when the
// file another process put in its place looks like the one it linked.
func TestRemovedKeyHeadNotOwn(t *testing.T) {
	root := newRoot(t)
	w := &reusedIdentityFS{FS: New(root, nil).fs}
	b := New(root, &Options{FS: w})
	loc := sessionLoc('h')
	for n := uint64(1); n <= 3; n++ {
		publishRaw(t, b, loc, n, "tomb")
	}
	r3 := filepath.Join(b.dir(loc), storage.RevisionName(3))
	fi, err := os.Lstat(r3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveKey(context.Background(), loc, 3, []byte("tomb")); err != nil {
		t.Fatal(err)
	}
	other := New(root, nil)
	for n := uint64(1); n <= 3; n++ {
		publishRaw(t, other, loc, n, "tomb")
	}
	w.mu.Lock()
	w.path, w.fi = r3, fi
	w.mu.Unlock()
	if b.IsOwnHead(context.Background(), loc, 3) {
		t.Errorf("the head another process linked after the removal is taken for the backend's own")
	}
}

// RemoveKey reports a moved head as such, and keeps the key.
func TestRemoveKeyMovedHead(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	loc := sessionLoc('i')
	publishRaw(t, b, loc, 1, "head")
	publishRaw(t, b, loc, 2, "second")
	if err := b.RemoveKey(context.Background(), loc, 1, []byte("head")); !errors.Is(err, storage.ErrHeadMoved) {
		t.Errorf("RemoveKey of a moved head: %v, want ErrHeadMoved", err)
	}
	headIs(t, root, loc, 2)
}
