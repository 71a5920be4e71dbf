package claimstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// readCountFS is the OS filesystem counting the revision files it reads.
type readCountFS struct {
	vfs.OSFS
	n *atomic.Int32
}

func (f readCountFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	if strings.HasPrefix(filepath.Base(name), "r") && strings.HasSuffix(name, ".json") {
		f.n.Add(1)
	}
	return f.OSFS.ReadFile(name)
}

// A step on heads this store published itself reads no revision back: the
// probe finds its own revision still the head, by name and file identity,
// and a name never refers to anything but what was linked to it. A head
// someone else published, a file put in place of the store's own, or a
// store that never published there, is read.
func TestStepOnOwnHeadReadsNothing(t *testing.T) {
	root := newRoot(t)
	var reads atomic.Int32
	fsys := readCountFS{n: &reads}
	s := openStore(t, root, &TOpts{FS: fsys})
	seat, session := testKeys(t)
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}})
	if err != nil {
		t.Fatal(err)
	}
	step := func(s *Store, p Patch) int32 {
		t.Helper()
		reads.Store(0)
		if err := s.Advance(context.Background(), c, p); err != nil {
			t.Fatal(err)
		}
		return reads.Load()
	}
	if n := step(s, Patch{State: Active}); n != 0 {
		t.Errorf("a step on the store's own heads read %d revisions, want none", n)
	}
	// Another store (another process) takes the next step: this store's
	// knowledge is stale, and it must read what is there.
	other := openStore(t, root, &TOpts{FS: fsys})
	if n := step(other, Patch{State: Active, Fields: map[string]any{"leaf": "x"}}); n == 0 {
		t.Error("a store that never published on these keys read no revision before stepping on them")
	}
	if n := step(s, Patch{State: Stopping}); n == 0 {
		t.Error("a step after another store published read no revision")
	}
	// A file put in place of the store's own head: same name, same
	// contents, another file.
	if n := step(s, Patch{State: Stopping, Fields: map[string]any{"stop": map[string]any{"by": "t"}}}); n != 0 {
		t.Errorf("a step on the store's own heads read %d revisions, want none", n)
	}
	head := filepath.Join(s.KeyDir(seat), RevisionName(c.SeatRev))
	data, err := os.ReadFile(head)
	if err != nil {
		t.Fatal(err)
	}
	tmp := head + ".swap"
	if err := os.WriteFile(tmp, data, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, head); err != nil {
		t.Fatal(err)
	}
	if n := step(s, Patch{State: Stopping, Fields: map[string]any{"leaf": "y"}}); n == 0 {
		t.Error("a step on a head replaced behind the store's back read nothing")
	}
}

// A key directory made writable by others after this store published in it
// cannot promise what it holds: the store's own fast path does not vouch
// for its revision there, and the step is refused like any step on a
// damaged head, before anything is written.
func TestStepInDirectoryNoLongerTrusted(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	seat, session := testKeys(t)
	c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.KeyDir(seat), 0o770); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(s.KeyDir(seat), 0o700) })
	err = s.Advance(context.Background(), c, Patch{State: Active})
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Code != UnsafeReplacement {
		t.Errorf("step in a key directory others can write: %v; want unsafe-replacement", err)
	}
	if names, _ := os.ReadDir(s.KeyDir(seat)); len(names) != 1 {
		t.Errorf("the step wrote into the untrusted directory: %d entries", len(names))
	}
}
