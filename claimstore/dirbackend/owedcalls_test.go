package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

// dirsAnswered is the OS filesystem with a DirsSyncer that answers for
// the directories in fail (by base name) as told, and fsyncs the others.
type dirsAnswered struct {
	vfs.FS
	fail  map[string]error
	asked *[][]string
}

func (f dirsAnswered) SyncDirs(names []string) []error {
	*f.asked = append(*f.asked, names)
	errs := make([]error, len(names))
	for i, name := range names {
		if err, ok := f.fail[filepath.Base(name)]; ok {
			errs[i] = &fs.PathError{Op: "sync", Path: name, Err: err}
			continue
		}
		errs[i] = f.FS.SyncDir(name)
	}
	return errs
}

// The directories a batch owes go to the filesystem's SyncDirs together,
// and each answer is judged as syncOwed judges SyncDir's: a key directory
// fsynced for its own contents alone that is gone was removed by prune,
// and is no failure; any other failure fails the batch, a parent's gone
// included (what was made in it may be lost), and is sticky.
func TestOwedDirectoriesJudgedEach(t *testing.T) {
	first := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("c3", 16)}
	for _, c := range []struct {
		name    string
		fail    func(key string) map[string]error
		wantErr error
	}{
		{"the new key directory gone", func(key string) map[string]error { return map[string]error{key: syscall.ENOENT} }, nil},
		{"the new key directory's fsync failing", func(key string) map[string]error { return map[string]error{key: syscall.EIO} }, storage.ErrSyncFailed},
		{"its parent gone", func(key string) map[string]error { return map[string]error{"seat": syscall.ENOENT} }, storage.ErrSyncFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked [][]string
			f := dirsAnswered{FS: vfs.OS, asked: &asked}
			b := New(newRoot(t), &Options{FS: f})
			publishOne(t, b, first, 1, "{}\n") // the root and seat/ made durable
			loc := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("a1", 16)}
			f.fail = c.fail(loc.Hash)
			b.fs = f // the backend's copy, now with the answers
			asked = nil
			ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{{Loc: loc, N: 1, Data: []byte("{}\n")}})
			if len(asked) != 1 || len(asked[0]) != 2 {
				t.Fatalf("SyncDirs asked for %v, want the new key directory and its parent at once", asked)
			}
			if c.wantErr == nil {
				if errs[0] != nil {
					t.Fatalf("%v, want the batch prepared", errs[0])
				}
				ps[0].Abort()
				return
			}
			if ps[0] != nil || !errors.Is(errs[0], c.wantErr) {
				t.Fatalf("%v, want %v", errs[0], c.wantErr)
			}
			if err := b.checkFailed(); !errors.Is(err, storage.ErrSyncFailed) {
				t.Errorf("after the failure: %v, want the store failed for good", err)
			}
		})
	}
}
