//go:build !linux

package vfs

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// CreateUnnamed has no unnamed temporary files to offer off Linux: every
// temporary is named (see CreateNamed).
func CreateUnnamed(string, fs.FileMode) (TempFile, error) { return nil, errors.ErrUnsupported }

// SyncBatch has no io_uring to submit to off Linux: NewSyncBatch refuses
// every batch, and callers call Sync of each temporary.
type SyncBatch struct{}

// NewSyncBatch returns errors.ErrUnsupported off Linux.
func NewSyncBatch([]TempFile) (*SyncBatch, error) { return nil, errors.ErrUnsupported }

// SyncBatches is 0 off Linux.
func SyncBatches() uint64 { return 0 }

// SyncsSubmitted is 0 off Linux.
func SyncsSubmitted() uint64 { return 0 }

// Sync is never reached off Linux: NewSyncBatch made no batch.
func (*SyncBatch) Sync([]TempFile, func()) []error { panic("vfs: no SyncBatch off Linux") }

// SyncDirs implements DirsSyncer off Linux, where there is no io_uring:
// SyncDir of each on a goroutine of its own.
func (fsys OSFS) SyncDirs(names []string) []error { return SyncDirsEach(fsys, names) }

// explainCorrupt leaves errors as they are off Linux.
func explainCorrupt(err error) error { return err }

// syncFS has no syncfs(2) to call off Linux: callers sync each directory.
func syncFS(string) error { return errors.ErrUnsupported }

// Identity says nothing off Linux, where the change time is not kept
// under one name: a zero identity, so IsOwnHead never vouches for a
// revision and every step reads its head.
func Identity(fs.FileInfo) FileID { return FileID{} }

// explainCreate adds nothing off Linux.
func explainCreate(dir string, err error) error { return err }

// Lock has no flock to offer off Linux: the directory backend locks within
// its process.
func (OSFS) Lock(string, bool) (func() error, error) { return nil, errors.ErrUnsupported }

// readDirNames lists a directory through os.File off Linux.
func readDirNames(name string) ([]string, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// statInfo gives no file info off Linux: callers Lstat the name.
func statInfo(string, *syscall.Stat_t) fs.FileInfo { return nil }
