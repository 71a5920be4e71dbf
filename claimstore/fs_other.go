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
