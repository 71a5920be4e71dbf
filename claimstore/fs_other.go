//go:build !linux

package claimstore

import (
	"errors"
	"io/fs"
)

// createUnnamed has no unnamed temporary files to offer off Linux: every
// temporary is named (see createNamed).
func createUnnamed(string, fs.FileMode) (TempFile, error) { return nil, errors.ErrUnsupported }

// syncFS has no syncfs(2) to call off Linux: callers sync each directory.
func syncFS(string) error { return errors.ErrUnsupported }

// identityOf says nothing off Linux, where the change time is not kept
// under one name: a zero identity, so IsOwnHead never vouches for a
// revision and every step reads its head.
func identityOf(fs.FileInfo) fileID { return fileID{} }

// explainCreate adds nothing off Linux.
func explainCreate(dir string, err error) error { return err }
