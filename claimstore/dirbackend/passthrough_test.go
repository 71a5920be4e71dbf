package dirbackend

import (
	"context"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// countingOS is the OS filesystem counting the calls of its optional
// methods that reach it.
type countingOS struct {
	vfs.OSFS
	probes, scans, stats, locks, linkSyncs, fileSyncs *atomic.Int32
}

func (f countingOS) SyncFile(name string) error {
	f.fileSyncs.Add(1)
	return f.OSFS.SyncFile(name)
}

func (f countingOS) Lock(dir string, exclusive bool) (func() error, error) {
	f.locks.Add(1)
	return f.OSFS.Lock(dir, exclusive)
}

func (f countingOS) ProbeDir(dir string) (func(string) (bool, error), int64, func() error, error) {
	f.probes.Add(1)
	return f.OSFS.ProbeDir(dir)
}

func (f countingOS) ScanDir(dir string, each func([]byte)) error {
	f.scans.Add(1)
	return f.OSFS.ScanDir(dir, each)
}

func (f countingOS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.OSFS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return statCounted{t.(tempStater), f.stats, f.linkSyncs}, nil
}

type tempStater interface {
	vfs.TempFile
	vfs.FileStater
	vfs.LinkSyncer
}

type statCounted struct {
	tempStater
	stats, linkSyncs *atomic.Int32
}

func (t statCounted) SyncLink() error {
	t.linkSyncs.Add(1)
	return t.tempStater.SyncLink()
}

func (t statCounted) Stat() (fs.FileInfo, error) {
	t.stats.Add(1)
	return t.tempStater.Stat()
}

// The fault-injecting filesystem passes every optional method through, so
// that the fault suites run the paths production runs: a lifecycle on the
// directory backend over errorfs over the OS reaches the OS's ProbeDir (a
// held head, a fence), ScanDir (a free head's confirming listing), the
// temporary's Stat (what a publish links) and Lock (the prune lock a
// publish over a head holds shared, which without it would hold within
// this process only), the temporary's SyncLink (the link count of what
// a publish linked) and SyncFile (a head another store linked, made
// durable before a decision on it), through errorfs.
func TestErrorfsPassesOptionalMethodsThrough(t *testing.T) {
	var probes, scans, stats, locks, linkSyncs, fileSyncs atomic.Int32
	inner := countingOS{probes: &probes, scans: &scans, stats: &stats, locks: &locks, linkSyncs: &linkSyncs, fileSyncs: &fileSyncs}
	runLifecycle(t, New(newRoot(t), &Options{FS: errorfs.Wrap(inner)}))
	if probes.Load() == 0 || scans.Load() == 0 || stats.Load() == 0 || locks.Load() == 0 || linkSyncs.Load() == 0 || fileSyncs.Load() == 0 {
		t.Errorf("through errorfs: %d ProbeDir, %d ScanDir, %d Stat, %d Lock, %d SyncLink and %d SyncFile calls reached the OS filesystem; want some of each", probes.Load(), scans.Load(), stats.Load(), locks.Load(), linkSyncs.Load(), fileSyncs.Load())
	}
}

// The crash-simulating filesystem has the optional methods itself, and the
// directory backend uses them: the calls its hook sees include probedir,
// fstatat, scandir, fstat, flock (vfs.Locker, the prune lock) and syncfile
// (vfs.FileSyncer, a head another store linked).
func TestCrashfsHasOptionalMethods(t *testing.T) {
	f := crashfs.New(nil)
	if err := f.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	// The hook runs on every goroutine a publish overlaps its calls on.
	var mu sync.Mutex
	seen := map[string]int{}
	f.SetHook(func(c crashfs.Call) error {
		mu.Lock()
		defer mu.Unlock()
		seen[c.Op]++
		return nil
	})
	runLifecycle(t, New("/data/root", &Options{FS: f}))
	mu.Lock()
	defer mu.Unlock()
	for _, op := range []string{"probedir", "fstatat", "scandir", "fstat", "flock", "syncfile"} {
		if seen[op] == 0 {
			t.Errorf("the directory backend made no %s call on crashfs (calls: %v)", op, seen)
		}
	}
}

// runLifecycle acquires, advances and releases a pair, takes and releases
// it again, then reads it as a new store would: every kind of head read and
// publish.
func runLifecycle(t *testing.T, be *Backend) {
	t.Helper()
	ctx := context.Background()
	s := openStore(t, be)
	seat, _ := claimstore.SeatKey("s", "p", "/w")
	session, _ := claimstore.SessionKey("x")
	o, err := s.Self(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Acquire(ctx, seat, session, claimstore.AcquireFields{Owner: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, c, claimstore.Patch{State: claimstore.Active}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	// Taken again over the released heads: a publish over a free head
	// holds the prune lock shared (vfs.Locker).
	if c, err = s.Acquire(ctx, seat, session, claimstore.AcquireFields{Owner: o}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c, claimstore.NewProof(claimstore.ProofCohort, "done")); err != nil {
		t.Fatal(err)
	}
	fresh := openStore(t, New(be.root, &Options{FS: be.fs}))
	if p, err := fresh.Pair(ctx, seat, session); err != nil || p.Held() {
		t.Fatalf("pair after the release: %+v, %v", p, err)
	}
	// A decision on the seat's head, made durable by a store that did not
	// publish it (the head's file fsynced by name: vfs.FileSyncer).
	other := New(be.root, &Options{FS: be.fs})
	n, _, err := other.Head(ctx, seat.Loc())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Sync(ctx, seat.Loc(), n); err != nil {
		t.Fatal(err)
	}
	var _ storage.Backend = be
}
