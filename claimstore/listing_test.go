package claimstore

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanCountFS is the OS filesystem counting the directories it lists
// (ScanDir and ReadDir), by directory.
type scanCountFS struct {
	osFS
	mu    *sync.Mutex
	lists map[string]int
}

func newScanCountFS() scanCountFS {
	return scanCountFS{mu: new(sync.Mutex), lists: map[string]int{}}
}

func (f scanCountFS) ScanDir(dir string, each func(name []byte)) error {
	f.count(dir)
	return f.osFS.ScanDir(dir, each)
}

func (f scanCountFS) ReadDir(dir string) ([]string, error) {
	f.count(dir)
	return f.osFS.ReadDir(dir)
}

func (f scanCountFS) count(dir string) {
	f.mu.Lock()
	f.lists[dir]++
	f.mu.Unlock()
}

func (f scanCountFS) take(dir string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lists[dir]
	delete(f.lists, dir)
	return n
}

// A store lists a key once: a free head it confirmed with a listing is
// answered from the probe afterwards, at the same head and above it (the
// protocol only appends), and so is a head read to publish on. A key it
// never listed is listed.
func TestListingOncePerKey(t *testing.T) {
	root, _, seat, session := releasedPair(t)
	fsys := newScanCountFS()
	s := openStore(t, root, &Options{FS: fsys})
	dir := s.KeyDir(session)
	heads := func(what string, want int) {
		t.Helper()
		h, err := s.Head(session)
		if err != nil || h.Held() {
			t.Fatalf("%s: Head = %+v, %v; want free", what, h, err)
		}
		if got := fsys.take(dir); got != want {
			t.Errorf("%s: the key directory was listed %d times, want %d", what, got, want)
		}
	}
	heads("first free head", 1)
	heads("free head at the head this store listed", 0)
	heads("and again", 0)

	// A cycle through this store: heads above the listing, read to publish
	// on and free again, need no listing either.
	c := mustAcquire(t, s, seat, session)
	if err := s.Release(c, NewProof(ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	if got := fsys.take(dir); got != 0 {
		t.Errorf("an acquire and a release on a listed key listed it %d times, want 0", got)
	}
	heads("free head above the listing", 0)

	// The seat was never read by this store before the acquire, which
	// read it to publish on: listed once then, not again by the release.
	if got := fsys.take(s.KeyDir(seat)); got != 1 {
		t.Errorf("seat listed %d times in an acquire and a release, want 1", got)
	}
}

// A store that has seen a gap in a key's history does not go on trusting a
// listing it took before the gap appeared: ClassifyAll's walk lists the
// key, and the next head read to publish on lists it again and reads it
// damaged, rather than publishing above revisions that were lost.
func TestListingForgetsAGap(t *testing.T) {
	root, first, seat, session := releasedPair(t)
	for range 2 {
		c := mustAcquire(t, first, seat, session)
		if err := first.Release(c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
	}
	// A new store confirms the session free: its first listing, dense, at
	// the head (r6).
	s := openStore(t, root, nil)
	if h, err := s.Head(session); err != nil || h.Held() {
		t.Fatalf("Head(session) = %+v, %v; want free", h, err)
	}
	// r2 of the session, below its head, is lost: a restored backup, a
	// careless operator.
	if err := os.Remove(s.join(s.KeyDir(session), RevisionName(2))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(*PairResult) {}); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, s, session)
	c, err := s.Acquire(seat, session, fields(t, s))
	var r *Refusal
	if err == nil || !errors.As(err, &r) {
		t.Fatalf("Acquire over a session history with a gap: %+v, %v; want a refusal", c, err)
	}
	if diff := cmp.Diff(before, dirNames(t, s, session)); diff != "" {
		t.Errorf("Acquire wrote into the damaged session (-before +after):\n%s", diff)
	}
}
