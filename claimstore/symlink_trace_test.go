package claimstore

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/claimstore/claimstore/claimstore/vfs"
)

// traceFS is the OS filesystem recording the path of every call; a call
// that looks inside a directory (a listing, a probe) records it with a
// trailing slash.
type traceFS struct {
	vfs.OSFS
	mu    *sync.Mutex
	paths *[]string
}

func newTraceFS() traceFS { return traceFS{mu: new(sync.Mutex), paths: new([]string)} }

func (f traceFS) note(p string) {
	f.mu.Lock()
	*f.paths = append(*f.paths, p)
	f.mu.Unlock()
}

func (f traceFS) Lstat(name string) (fs.FileInfo, error) { f.note(name); return f.OSFS.Lstat(name) }
func (f traceFS) ReadFile(name string) ([]byte, fs.FileInfo, error) {
	f.note(name)
	return f.OSFS.ReadFile(name)
}
func (f traceFS) ReadDir(name string) ([]string, error) {
	f.note(name + "/")
	return f.OSFS.ReadDir(name)
}
func (f traceFS) Mkdir(name string, perm fs.FileMode) error {
	f.note(name)
	return f.OSFS.Mkdir(name, perm)
}
func (f traceFS) Remove(name string) error  { f.note(name); return f.OSFS.Remove(name) }
func (f traceFS) SyncDir(name string) error { f.note(name); return f.OSFS.SyncDir(name) }

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f traceFS) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }
func (f traceFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	f.note(dir + "/")
	return f.OSFS.CreateTemp(dir, perm)
}
func (f traceFS) ScanDir(dir string, each func(name []byte)) error {
	f.note(dir + "/")
	return f.OSFS.ScanDir(dir, each)
}
func (f traceFS) ProbeDir(dir string) (func(string) (bool, error), int64, func() error, error) {
	f.note(dir + "/")
	return f.OSFS.ProbeDir(dir)
}

func (f traceFS) under(dir string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range *f.paths {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// The store never follows a symlink out of the root, not even to look: a
// kind directory or a key directory that is a symlink to a history kept
// elsewhere is checked with one Lstat of its own, and no call of any
// operation (reading a head or a pair, acquiring, listing, classifying,
// fsck) names a path through it.
func TestNothingThroughASymlinkedDirectory(t *testing.T) {
	for _, which := range []string{"kind", "key"} {
		t.Run(which, func(t *testing.T) {
			root := newRoot(t)
			s := openStore(t, root, nil)
			seat, session := seatKey(t, "s"), sessionKey(t, "x")
			c := mustAcquire(t, s, seat, session)
			if err := s.Release(context.Background(), c, NewProof(ProofCohort, "done")); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(root, string(KindSession))
			if which == "key" {
				link = s.KeyDir(session)
			}
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.Rename(link, elsewhere); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, link); err != nil {
				t.Fatal(err)
			}
			trace := newTraceFS()
			s = openStore(t, root, &TOpts{FS: trace})
			// Each either fails or holds; what matters here is where they
			// looked.
			_, _ = s.Head(context.Background(), session)
			_, _ = s.Pair(context.Background(), seat, session)
			_, _ = s.Acquire(context.Background(), seat, session, fields(t, s))
			_, _, _ = s.Backend().List(context.Background(), session.Loc())
			_, _ = s.Classify(context.Background(), seat, session, nil)
			_, _ = s.ClassifyAll(context.Background(), &ClassifyOptions{DryRun: true}, func(*PairResult) {})
			_, _ = s.Check(context.Background(), nil)
			if got := trace.under(link); len(got) > 0 {
				t.Errorf("calls through the symlink %s: %q", link, got)
			}
			if h, err := s.Head(context.Background(), session); err == nil && !h.Held() {
				t.Errorf("Head through a symlinked %s directory reads free", which)
			}
		})
	}
}

// ReadBootProof reads only this store's proof ids (boot-<24 hex>): an id
// that names a path (../seat/…) or another form reads nothing at all.
func TestReadBootProofOnlyItsOwnIDs(t *testing.T) {
	root := newRoot(t)
	trace := newTraceFS()
	s := openStore(t, root, &TOpts{FS: trace})
	for _, id := range []string{"", "../x", "../seat/" + strings.Repeat("ab", 16) + "/r0000000001", "boot-xyz", "bp-1"} {
		if p, err := s.ReadBootProof(context.Background(), id); err == nil || p != nil {
			t.Errorf("ReadBootProof(%q) = %+v, %v; want an error", id, p, err)
		}
	}
	if got := trace.under(root); len(got) > 0 {
		t.Errorf("ReadBootProof of foreign ids touched %q", got)
	}
}

// syncCountFS is the OS filesystem counting SyncFS and SyncDir calls.
type syncCountFS struct {
	vfs.OSFS
	n *int
}

func (f syncCountFS) SyncFS(name string) error  { *f.n++; return f.OSFS.SyncFS(name) }
func (f syncCountFS) SyncDir(name string) error { *f.n++; return f.OSFS.SyncDir(name) }

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f syncCountFS) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

// A walk over keys that hold no revision has no decision to make durable:
// it syncs nothing.
func TestClassifyAllEmptyKeysSyncNothing(t *testing.T) {
	root := newRoot(t)
	s := openStore(t, root, nil)
	for _, k := range []Key{seatKey(t, "a"), sessionKey(t, "a")} {
		if err := os.MkdirAll(s.KeyDir(k), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	s = openStore(t, root, &TOpts{FS: syncCountFS{n: &n}})
	if _, err := s.ClassifyAll(context.Background(), nil, func(*PairResult) {}); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a walk over empty keys made %d fsyncs, want none", n)
	}
}

// A key directory swapped for a symlink under a claim this store holds:
// the step is refused, and even the check of the store's own last revision
// (IsOwnHead, the very file it linked) looks at the symlink only, never
// through it.
func TestOwnHeadCheckNeverLooksThroughASymlink(t *testing.T) {
	trace := newTraceFS()
	s := openStore(t, newRoot(t), &TOpts{FS: trace})
	seat, session := seatKey(t, "s"), sessionKey(t, "x")
	c := mustAcquire(t, s, seat, session)
	link := s.KeyDir(session)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(link, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	trace.mu.Lock()
	*trace.paths = nil // what the acquire did in the real directory
	trace.mu.Unlock()
	if err := s.Advance(context.Background(), c, Patch{State: Active}); err == nil {
		t.Error("Advance through a symlinked session directory succeeded")
	}
	if got := trace.under(link); len(got) > 0 {
		t.Errorf("calls through the symlink %s: %q", link, got)
	}
}
