package claimstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
)

// scanCountFS is the OS filesystem counting the directories it lists
// (ScanDir and ReadDir), by directory.
type scanCountFS struct {
	vfs.OSFS
	mu    *sync.Mutex
	lists map[string]int
}

func newScanCountFS() scanCountFS {
	return scanCountFS{mu: new(sync.Mutex), lists: map[string]int{}}
}

func (f scanCountFS) ScanDir(dir string, each func(name []byte)) error {
	f.count(dir)
	return f.OSFS.ScanDir(dir, each)
}

func (f scanCountFS) ReadDir(dir string) ([]string, error) {
	f.count(dir)
	return f.OSFS.ReadDir(dir)
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
	s := openStore(t, root, &TOpts{FS: fsys})
	dir := s.KeyDir(session)
	heads := func(what string, want int) {
		t.Helper()
		h, err := s.Head(context.Background(), session)
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
	if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
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
		if err := first.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
			t.Fatal(err)
		}
	}
	// A new store confirms the session free: its first listing, dense, at
	// the head (r6).
	s := openStore(t, root, nil)
	if h, err := s.Head(context.Background(), session); err != nil || h.Held() {
		t.Fatalf("Head(session) = %+v, %v; want free", h, err)
	}
	// r2 of the session, below its head, is lost: a restored backup, a
	// careless operator.
	if err := os.Remove(filepath.Join(s.KeyDir(session), RevisionName(2))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(*PairResult) {}); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, s, session)
	c, err := s.Acquire(context.Background(), seat, session, fields(t, s))
	var r *Refusal
	if err == nil || !errors.As(err, &r) {
		t.Fatalf("Acquire over a session history with a gap: %+v, %v; want a refusal", c, err)
	}
	if diff := cmp.Diff(before, dirNames(t, s, session)); diff != "" {
		t.Errorf("Acquire wrote into the damaged session (-before +after):\n%s", diff)
	}
}

// movingFS is the OS filesystem on which a writer publishes a new free
// revision of dir just before each listing of it: a head that keeps moving.
type movingFS struct {
	vfs.OSFS
	dir   string
	k     Key
	lists *int
}

func (f movingFS) ScanDir(dir string, each func(name []byte)) error {
	if dir == f.dir {
		*f.lists++
		n := uint64(0)
		for ; ; n++ {
			if _, err := os.Lstat(filepath.Join(dir, RevisionName(n+1))); err != nil {
				break
			}
		}
		rec := refRecord(f.k, n+1, testClaimID, "stopped").set("proof", `{"kind":"no-unit","ref":null}`).bytes()
		if err := os.WriteFile(filepath.Join(dir, RevisionName(n+1)), rec, 0o400); err != nil {
			return err
		}
	}
	return f.OSFS.ScanDir(dir, each)
}

// gapOnceFS is the OS filesystem whose first listing of dir also shows a
// revision two above the highest: a listing taken while revisions are being
// linked, which is not atomic.
type gapOnceFS struct {
	vfs.OSFS
	dir   string
	lists *int
}

func (f gapOnceFS) ScanDir(dir string, each func(name []byte)) error {
	top := uint64(0)
	err := f.OSFS.ScanDir(dir, func(name []byte) {
		if n, ok := storage.ParseRevisionNameBytes(name); ok {
			top = max(top, n)
		}
		each(name)
	})
	if err == nil && dir == f.dir {
		*f.lists++
		if *f.lists == 1 {
			each([]byte(RevisionName(top + 2)))
		}
	}
	return err
}

// A free head is confirmed by a listing; a listing that shows the head
// moved is read again, three times more, then the key is damaged saying
// so; a listing that shows a gap is taken once more before the gap is
// believed (a listing races the linking of revisions).
func TestHeadRereadsAMovingHead(t *testing.T) {
	root, s0, _, session := releasedPair(t)
	dir := s0.KeyDir(session)
	lists := 0
	h, err := openStore(t, root, &TOpts{FS: movingFS{dir: dir, k: session, lists: &lists}}).Head(context.Background(), session)
	if err != nil || !h.Held() || h.Damage == nil || !strings.Contains(h.Damage.Error(), "the head moved during every one of 4 reads") {
		t.Fatalf("Head of a key that moves at every listing = %+v, %v; want damaged after 4 reads", h, err)
	}
	if lists != 4 {
		t.Errorf("%d listings, want 4", lists)
	}

	root, s0, _, session = releasedPair(t)
	dir = s0.KeyDir(session)
	lists = 0
	h, err = openStore(t, root, &TOpts{FS: gapOnceFS{dir: dir, lists: &lists}}).Head(context.Background(), session)
	if err != nil || h.Held() || h.N != 2 {
		t.Fatalf("Head of a key whose first listing showed a gap = %+v, %v; want free at 2", h, err)
	}
	if lists != 2 {
		t.Errorf("%d listings, want 2", lists)
	}
}

// A key whose directory is empty is listed once per store too.
func TestEmptyKeyListedOnce(t *testing.T) {
	root := newRoot(t)
	fsys := newScanCountFS()
	s := openStore(t, root, &TOpts{FS: fsys})
	k := sessionKey(t, "empty")
	if err := os.MkdirAll(s.KeyDir(k), 0o700); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if h, err := s.Head(context.Background(), k); err != nil || h.Held() || h.N != 0 {
			t.Fatalf("Head of an empty key = %+v, %v", h, err)
		}
	}
	if n := fsys.take(s.KeyDir(k)); n != 1 {
		t.Errorf("an empty key directory was listed %d times, want 1", n)
	}
}

// A held pair seen by a store that cannot read its machine's id is refused
// as another machine's would be, saying so and carrying the error.
func TestRefusalWithoutMachineID(t *testing.T) {
	root := newRoot(t)
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	mustAcquire(t, openStore(t, root, nil), seat, session)
	bad := errors.New("machine id unreadable")
	s := openStore(t, root, &TOpts{Host: brokenHost{Host: thisHost, machine: bad}})
	p, err := s.Pair(context.Background(), seat, session)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Refusal(p)
	if r == nil || r.Code != ForeignHost || !errors.Is(r, bad) || !strings.Contains(r.Reason, "this machine's id cannot be read") {
		t.Fatalf("Refusal = %+v; want foreign-host carrying the error, saying the id cannot be read", r)
	}
}
