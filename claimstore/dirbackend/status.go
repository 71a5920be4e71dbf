package dirbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
)

var _ storage.StatusKeeper = (*Backend)(nil)

// statusTempPrefix begins the name a status record has between its fsync
// and the rename that puts it in place: a temporary's prefix (fsck reports
// one a crash left as a temporary, never as a record), then "status.".
const statusTempPrefix = vfs.TempPrefix + "status."

func (b *Backend) statusDir() string { return filepath.Join(b.root, storage.StatusDir) }

// WriteStatus implements storage.StatusKeeper: <root>/status/<name>.json is
// replaced as a file is replaced atomically on a POSIX filesystem — a
// temporary in the same directory written and fsynced, named, renamed over
// the record (atomic within one directory, also across a crash: the crash
// model's one assumption about rename), and the directory fsynced. The
// status directory is made as key directories are (0700, its parents'
// entries made durable on first use), and only in a claim root (makeRoot's
// checks). After a failed fsync nothing more is written (ErrSyncFailed).
func (b *Backend) WriteStatus(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := b.statusDir()
	final := filepath.Join(dir, name+".json")
	if !storage.ValidStatusName(name) {
		return &fs.PathError{Op: "write status", Path: final, Err: errors.New("not a status record name (lowercase letters, digits and '-')")}
	}
	if len(data) > MaxFileSize {
		return &fs.PathError{Op: "write status", Path: final, Err: fmt.Errorf("%d bytes, more than the %d a record may have", len(data), MaxFileSize)}
	}
	if err := b.checkFailed(); err != nil {
		return err
	}
	// Checked at every write, not only when makeDirs first makes or uses
	// it: a status/ swapped for a symlink since must not be written
	// through.
	if _, distrust, err := b.checkDir(dir); err != nil {
		return err
	} else if distrust != nil {
		return distrust
	}
	needs, err := b.makeDirs(dir)
	if err != nil {
		return err
	}
	t, err := b.fs.CreateTemp(dir, 0o400)
	if err != nil {
		return err
	}
	if n, err := t.Write(data); err != nil || n != len(data) {
		if err == nil {
			err = io.ErrShortWrite
		}
		_ = t.Close()
		return &fs.PathError{Op: "write temporary for", Path: final, Err: err}
	}
	if err := b.sync(t.Sync); err != nil {
		_ = t.Close()
		return &fs.PathError{Op: "fsync temporary for", Path: final, Err: err}
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	named := filepath.Join(dir, statusTempPrefix+hex.EncodeToString(r[:]))
	err = t.Link(named)
	// The temporary's own name (the fallback's) goes either way; the
	// linked name is what is renamed into place.
	_ = t.Close()
	if err != nil {
		return &fs.PathError{Op: "name temporary for", Path: final, Err: err}
	}
	if err := b.fs.Rename(named, final); err != nil {
		_ = b.fs.Remove(named)
		return err
	}
	return b.fsyncDirs([]string{dir}, needs)
}

// ReadStatus implements storage.StatusKeeper: status/ must be a real
// directory only the root's owner can write, and the record a regular,
// trusted file of bounded size, as a proof is read.
func (b *Backend) ReadStatus(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := filepath.Join(b.statusDir(), name+".json")
	if !storage.ValidStatusName(name) {
		return nil, &fs.PathError{Op: "read status", Path: path, Err: errors.New("not a status record name (lowercase letters, digits and '-')")}
	}
	ok, distrust, err := b.checkDir(b.statusDir())
	if err := usable(ok, distrust, err, "read status", path); err != nil {
		return nil, err
	}
	return b.readFile(path)
}
