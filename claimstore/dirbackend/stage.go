package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// A copy into a directory root is built in a staging directory beside it,
// named after it (.<root's name>.claimctl-copy), and renamed into place
// once every revision and proof in it is durable: rename within one
// directory is atomic across a crash (the crash model's one assumption
// about it), so a reader — this store, the reference implementation, an
// operator's ls — sees either no root or the whole copy, never a part of
// it. The staging directory's name is its only mark: nothing else in the
// project, and no reader, uses a name of that form.

// StagingSuffix ends the name of the directory a copy into a directory
// root is built in.
const StagingSuffix = ".claimctl-copy"

// StagingDir returns the directory a copy into the directory root is
// built in.
func StagingDir(root string) string {
	return filepath.Join(filepath.Dir(root), "."+filepath.Base(root)+StagingSuffix)
}

var _ storage.Stager = (*Backend)(nil)

// Stage implements storage.Stager. The root must not exist or be an empty
// directory. A staging directory an earlier copy left is discarded: it
// cannot be resumed, since what a crash left of it is only what was made
// durable, and starting over costs a copy.
func (b *Backend) Stage(ctx context.Context) (storage.Staged, error) {
	if err := b.checkFailed(); err != nil {
		return nil, err
	}
	if fi, err := b.fs.Lstat(b.root); err == nil {
		if !fi.IsDir() {
			return nil, &fs.PathError{Op: "copy into", Path: b.root, Err: fmt.Errorf("%w: it is not a directory", storage.ErrNotEmpty)}
		}
		names, err := b.fs.ReadDir(b.root)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			return nil, &fs.PathError{Op: "copy into", Path: b.root, Err: fmt.Errorf("%w: it holds %d entries; copy into an absent or empty directory", storage.ErrNotEmpty, len(names))}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	stage := StagingDir(b.root)
	if _, err := b.fs.Lstat(stage); err == nil {
		if err := b.removeTree(stage); err != nil {
			return nil, fmt.Errorf("removing the unfinished copy %s left by an earlier copy: %w", stage, err)
		}
	}
	sb := New(stage, &Options{FS: b.fs, Sequential: b.sequential})
	sb.strict = b.strict
	return &staged{Backend: sb, final: b}, nil
}

// Unstage implements storage.Stager.
func (b *Backend) Unstage(ctx context.Context) error {
	stage := StagingDir(b.root)
	if _, err := b.fs.Lstat(stage); errors.Is(err, fs.ErrNotExist) {
		return &fs.PathError{Op: "remove unfinished copy", Path: stage, Err: storage.ErrNothingStaged}
	}
	return b.removeTree(stage)
}

// removeTree removes dir and everything below it, then makes the removal
// durable in dir's parent. It never follows a symlink: a link is removed,
// not what it names.
func (b *Backend) removeTree(dir string) error {
	var rm func(p string) error
	rm = func(p string) error {
		fi, err := b.fs.Lstat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			names, err := b.fs.ReadDir(p)
			if err != nil {
				return err
			}
			for _, n := range names {
				if err := rm(filepath.Join(p, n)); err != nil {
					return err
				}
			}
		}
		return b.fs.Remove(p)
	}
	if err := rm(dir); err != nil {
		return err
	}
	return b.sync(func() error { return b.fs.SyncDir(filepath.Dir(dir)) })
}

// staged is a root built in its staging directory.
type staged struct {
	*Backend // the staging directory's backend
	final    *Backend
}

// Commit renames the staging directory into place and fsyncs the parent.
// Every revision and proof in it is durable already (each was published
// with the whole protocol), the staging directory's entry in the parent
// too (its first use fsynced the parent).
func (d *staged) Commit(ctx context.Context) error {
	if err := d.settle(d.running()); err != nil {
		return err
	}
	if err := d.final.checkFailed(); err != nil {
		return err
	}
	stage := d.Backend.root
	if _, err := d.fs.Lstat(stage); errors.Is(err, fs.ErrNotExist) {
		// An empty source copied nothing: make the empty root itself.
		needs, err := d.makeDirs(stage)
		if err != nil {
			return err
		}
		if err := d.fsyncDirs(nil, needs); err != nil {
			return err
		}
	}
	if d.final.strict {
		if err := checkAncestors(d.final.root); err != nil {
			return err
		}
	}
	if err := d.fs.Rename(stage, d.final.root); err != nil {
		return err
	}
	parent := filepath.Dir(d.final.root)
	if err := d.final.sync(func() error { return d.fs.SyncDir(parent) }); err != nil {
		return &fs.PathError{Op: "fsync", Path: parent, Err: err}
	}
	return nil
}

// isStagingName reports whether a root's name is a copy's staging
// directory's, which is never a root.
func isStagingName(root string) bool {
	base := filepath.Base(root)
	return strings.HasPrefix(base, ".") && strings.HasSuffix(base, StagingSuffix) && len(base) > 1+len(StagingSuffix)
}
