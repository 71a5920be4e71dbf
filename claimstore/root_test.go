package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
)

func TestKindDirSymlinkRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	os.MkdirAll(root, 0o700)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "seat")); err != nil {
		t.Fatal(err)
	}
	s, _ := OpenRoot(root, nil)
	seat, session := testKeys(t)
	_, err := s.Head(context.Background(), seat)
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Head through a symlinked kind dir: %v", err)
	}
	o, _ := s.Self(1)
	_, err = s.Acquire(context.Background(), seat, session, AcquireFields{Owner: o})
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
	if _, err := OpenRoot(link, &TOpts{FS: vfs.OS}); !errors.Is(err, ErrUnsafeRoot) {
		t.Fatalf("OpenRoot(symlink, vfs.OS) = %v, want ErrUnsafeRoot", err)
	}
}

// TestAdvanceForeignClaim: a claim taken on another machine is never
// stepped here.
func TestAdvanceForeignClaim(t *testing.T) {
	root := newRoot(t)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, openStore(t, root, &TOpts{Host: foreignHost}), seat, session)
	s := openStore(t, root, nil)
	before := dirFiles(t, s, seat)
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "x")); !isRefusal(err, ForeignHost) {
		t.Fatalf("Release of a foreign claim: %v, want %s", err, ForeignHost)
	}
	if diff := cmp.Diff(before, dirFiles(t, s, seat)); diff != "" {
		t.Errorf("seat changed (-want +got):\n%s", diff)
	}
}

// TestRootSwappedAfterOpen: a root planted as a symlink after Open (which
// found it missing) is refused at the first write, and nothing is written
// through it.
func TestRootSwappedAfterOpen(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s, err := OpenRoot(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	evil := t.TempDir()
	if err := os.Chmod(evil, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(evil, root); err != nil {
		t.Fatal(err)
	}
	seat, session := testKeys(t)
	o, _ := s.Self(1)
	if _, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: o}); !errors.Is(err, ErrUnsafeRoot) {
		t.Fatalf("Acquire through a swapped root: %v, want ErrUnsafeRoot", err)
	}
	if n, _ := os.ReadDir(evil); len(n) != 0 {
		t.Errorf("wrote through the symlink: %v", n)
	}
}
