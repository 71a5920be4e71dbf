package claimstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestKindDirSymlinkRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	os.MkdirAll(root, 0o700)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "seat")); err != nil {
		t.Fatal(err)
	}
	s, _ := Open(root, nil)
	seat, session := testKeys(t)
	_, err := s.Head(seat)
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Head through a symlinked kind dir: %v", err)
	}
	o, _ := s.Self(1)
	_, err = s.Acquire(seat, session, AcquireFields{Owner: o})
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Acquire: %v", err)
	}
	if n, _ := os.ReadDir(elsewhere); len(n) != 0 {
		t.Fatalf("wrote through the symlink: %v", n)
	}
	t.Log(err)
}

// TestOpenWithOSFSChecksRoot: naming the OS filesystem explicitly must not
// skip the root's checks.
func TestOpenWithOSFSChecksRoot(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "root")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link, &Options{FS: OSFS}); !errors.Is(err, ErrUnsafeRoot) {
		t.Fatalf("Open(symlink, OSFS) = %v, want ErrUnsafeRoot", err)
	}
}
