package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// faultyOS is the OS filesystem whose directory fsyncs fail while fail is
// set, counting the temporaries created.
type faultyOS struct {
	vfs.OSFS
	fail        *atomic.Bool
	temps, open *atomic.Int32
}

func (f faultyOS) SyncDir(name string) error {
	if f.fail.Load() {
		return &fs.PathError{Op: "fsync", Path: name, Err: syscall.EIO}
	}
	return f.OSFS.SyncDir(name)
}

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f faultyOS) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

func (f faultyOS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	f.temps.Add(1)
	t, err := f.OSFS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	f.open.Add(1)
	return closeCounted{TempFile: t, open: f.open}, nil
}

// closeCounted counts its Close calls down from open.
type closeCounted struct {
	vfs.TempFile
	open *atomic.Int32
}

func (t closeCounted) Close() error {
	t.open.Add(-1)
	return t.TempFile.Close()
}

var testLoc = storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("ab", 16)}

// A prepared revision is committed at most once, and never after Abort.
func TestPreparedCommitsOnce(t *testing.T) {
	b := New(newRoot(t), nil)
	p, err := b.Prepare(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err == nil {
		t.Error("a second Commit of one prepared revision succeeded")
	}
	p2, err := b.Prepare(context.Background(), testLoc, 2, []byte(`{"n":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p2.Abort()
	if err := p2.Commit(context.Background()); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	if revs, _, err := b.List(context.Background(), testLoc); err != nil || len(revs) != 1 {
		t.Errorf("after an aborted revision 2: revisions %v, %v; want only 1", revs, err)
	}
}

// After an fsync of the backend failed, it writes nothing more: not even a
// temporary (its fsync would be wasted, and an acknowledgement after the
// failure is refused anyway), and a revision prepared before the failure
// is not committed.
func TestNoWritesAfterFailedFsync(t *testing.T) {
	var fail atomic.Bool
	var temps, open atomic.Int32
	root := newRoot(t)
	b := New(root, &Options{FS: faultyOS{fail: &fail, temps: &temps, open: &open}})
	early, err := b.Prepare(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	other := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("cd", 16)}
	fail.Store(true)
	if err := b.Publish(context.Background(), other, 1, []byte(`{"n":1}`), nil); !errors.Is(err, storage.ErrSyncFailed) {
		t.Fatalf("publish with a failing directory fsync: %v, want storage.ErrSyncFailed", err)
	}
	fail.Store(false)
	if err := early.Commit(context.Background()); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("commit of a revision prepared before the failure: %v, want storage.ErrSyncFailed", err)
	}
	if _, err := os.Lstat(filepath.Join(root, string(testLoc.Kind), testLoc.Hash, storage.RevisionName(1))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("revision prepared before the failure was linked: %v", err)
	}
	temps.Store(0)
	if _, err := b.Prepare(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("prepare after a failed fsync: %v, want storage.ErrSyncFailed", err)
	}
	if err := b.Sync(context.Background(), testLoc, 1); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("sync after a failed fsync: %v, want storage.ErrSyncFailed", err)
	}
	if n := temps.Load(); n != 0 {
		t.Errorf("%d temporaries created after a failed fsync", n)
	}
	if n := open.Load(); n != 0 {
		t.Errorf("%d temporaries left open", n)
	}
}
