//go:build !linux

package claimstore

import (
	"errors"
	"io/fs"
)

// createUnnamed has no unnamed temporary files to offer off Linux: every
// temporary is named (see createNamed).
func createUnnamed(string, fs.FileMode) (TempFile, error) { return nil, errors.ErrUnsupported }
