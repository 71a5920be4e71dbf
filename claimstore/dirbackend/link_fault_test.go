package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// revPath is the path of revision n of loc under root.
func revPath(root string, loc storage.Loc, n uint64) string {
	return filepath.Join(root, string(loc.Kind), loc.Hash, storage.RevisionName(n))
}

// The identity of a linked revision (what IsOwnHead later compares) is
// taken from the open temporary where the filesystem can say, with no
// lookup of the name: a publish whose every lookup of the revision's name
// fails still succeeds.
func TestLinkIdentityFromOpenFile(t *testing.T) {
	root := newRoot(t)
	name := revPath(root, testLoc, 1)
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLstat, Path: func(p string) bool { return p == name }})
	b := New(root, &Options{FS: efs})
	if err := b.Publish(context.Background(), testLoc, 1, []byte(`{"n":1}`), nil); err != nil {
		t.Fatalf("publish with the revision's name failing every lookup: %v", err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"n":1}`, string(data)); diff != "" {
		t.Errorf("published revision (-want +got):\n%s", diff)
	}
}

// statFailingFS is the OS filesystem whose temporaries cannot say what
// they are (fstat fails with EIO).
type statFailingFS struct{ vfs.OSFS }

func (f statFailingFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.OSFS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return statFailingTemp{TempFile: t}, nil
}

type statFailingTemp struct{ vfs.TempFile }

func (statFailingTemp) Stat() (fs.FileInfo, error) {
	return nil, &fs.PathError{Op: "fstat", Path: "(temp)", Err: syscall.EIO}
}

// A revision whose identity cannot be taken after its link is not
// acknowledged: the failure is the Commit's error, and no barrier after
// the link is passed.
func TestLinkIdentityFailureFailsCommit(t *testing.T) {
	b := New(newRoot(t), &Options{FS: statFailingFS{}})
	var barriers []storage.Barrier
	hook := func(b storage.Barrier) error {
		barriers = append(barriers, b)
		return nil
	}
	err := b.Publish(context.Background(), testLoc, 1, []byte(`{"n":1}`), hook)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("publish whose temporary's fstat fails: %v, want EIO", err)
	}
	if diff := cmp.Diff([]storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced}, barriers); diff != "" {
		t.Errorf("barriers passed (-want +got):\n%s", diff)
	}
	if b.IsOwnHead(context.Background(), testLoc, 1) {
		t.Error("IsOwnHead of a revision whose identity was never taken")
	}
}

// A revision prepared before another fsync of the store failed is not
// linked: its Commit fails with storage.ErrSyncFailed without passing the
// linked barrier (a crash test stopping there would take the revision for
// published).
func TestCommitAfterFailedFsyncPassesNoLinkBarrier(t *testing.T) {
	root := newRoot(t)
	other := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("cd", 16)}
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncDir, Path: errorfs.Suffix(other.Hash)})
	b := New(root, &Options{FS: efs})
	var barriers []storage.Barrier
	hook := func(b storage.Barrier) error {
		barriers = append(barriers, b)
		return nil
	}
	early, err := b.Prepare(context.Background(), testLoc, 1, []byte(`{"n":1}`), hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(early.Abort)
	if err := b.Publish(context.Background(), other, 1, []byte(`{"n":1}`), nil); !errors.Is(err, storage.ErrSyncFailed) {
		t.Fatalf("publish with a failing directory fsync: %v, want storage.ErrSyncFailed", err)
	}
	if err := early.Commit(context.Background()); !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("commit of a revision prepared before the failure: %v, want storage.ErrSyncFailed", err)
	}
	if diff := cmp.Diff([]storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced}, barriers); diff != "" {
		t.Errorf("barriers passed (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(revPath(root, testLoc, 1)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("revision prepared before the failure was linked: %v", err)
	}
}

// A key directory this process made durable and prune removed since is
// made again by the next write; when that fails (the disk is full), the
// write fails with the error and publishes nothing, and the write after
// it, with space again, makes the directory and publishes.
func TestRemakeRemovedKeyDirFails(t *testing.T) {
	root := newRoot(t)
	efs := errorfs.Wrap(vfs.OS)
	b := New(root, &Options{FS: efs})
	ctx := context.Background()
	if err := b.Publish(ctx, testLoc, 1, []byte(`{"n":1}`), nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, string(testLoc.Kind), testLoc.Hash)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	efs.Add(&errorfs.Rule{Op: errorfs.OpMkdir, Path: func(p string) bool { return p == dir }, Err: syscall.ENOSPC, Times: 1})
	if err := b.Publish(ctx, testLoc, 1, []byte(`{"n":1}`), nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("publish into a removed key whose mkdir fails: %v, want ENOSPC", err)
	}
	if diff := cmp.Diff(1, len(efs.Injected())); diff != "" {
		t.Errorf("faults injected (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("key directory after the failed mkdir: %v, want none", err)
	}
	if err := b.Publish(ctx, testLoc, 1, []byte(`{"n":1}`), nil); err != nil {
		t.Fatalf("publish once the disk has space: %v", err)
	}
	if _, err := os.Lstat(revPath(root, testLoc, 1)); err != nil {
		t.Errorf("revision 1 after the second publish: %v", err)
	}
}
