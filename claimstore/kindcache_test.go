package claimstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A kind directory that did not exist when a store first read a key under
// it is checked again when it appears: a store must not remember "seat/
// is fine" from a time it was missing. Here it appears writable by others,
// holding a key directory of its own mode: the key reads held.
func TestKindDirectoryCheckedOnceItExists(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	// The root exists (a session key was claimed), seat/ does not.
	c := mustAcquire(t, s, seatKey(t, "a"), sessionKey(t, "a"))
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "seat")); err != nil {
		t.Fatal(err)
	}
	k := seatKey(t, "later")
	long := openStore(t, root, nil)
	if h, err := long.Head(context.Background(), k); err != nil || h.Held() {
		t.Fatalf("Head with no seat/ = %+v, %v; want free", h, err)
	}
	// seat/ appears, writable by others, with the key's directory in it.
	if err := os.MkdirAll(long.KeyDir(k), 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, filepath.Join(root, "seat"), 0o777)
	wantHeldUntrusted(t, long, k, filepath.Join(root, "seat"))
}
