package claimstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

// TestLostFsync models the kernel as it is: a failed fsync may drop the
// dirty data and clear the error, so that a retried fsync succeeds having
// written nothing (fsyncgate). Every fsync (of a file or a directory) of
// every scenario operation fails once in turn, losing what it was to make
// durable, and succeeds afterwards. The operation must fail, the store must
// acknowledge nothing more, and every power cut after it must keep every
// earlier acknowledgement and the invariants. A store that retried the
// fsync, or went on after it, publishes a name whose contents never
// reached the disk, and fails here.
func TestLostFsync(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for i, st := range sc.steps {
				if st.name == "owner dies" || st.name == "reboot" {
					continue
				}
				syncs := countSyncs(t, sc.steps[:i], st)
				for nth := 1; nth <= syncs; nth++ {
					lostSyncAt(t, sc.steps[:i], st, nth)
				}
				t.Logf("%-36s fsyncs=%d, each lost in turn", st.name, syncs)
			}
		})
	}
}

// countSyncs runs op after setup without faults and counts its fsyncs.
func countSyncs(t *testing.T, setup []step, op step) int {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	for _, s := range setup {
		if err := s.run(w); err != nil {
			t.Fatalf("setup %s: %v", s.name, err)
		}
	}
	counter := &syncCounter{FS: w.fs}
	w.vfs, w.store = counter, w.open(counter, w.host, nil)
	if err := op.run(w); err != nil {
		t.Fatalf("%s without faults: %v", op.name, err)
	}
	return counter.n
}

// syncCounter counts the fsyncs that reach it.
type syncCounter struct {
	vfs.FS
	n int
}

func (c *syncCounter) SyncDir(name string) error { c.n++; return c.FS.SyncDir(name) }
func (c *syncCounter) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	f, err := c.FS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return &countedTemp{TempFile: f, c: c}, nil
}

type countedTemp struct {
	vfs.TempFile
	c *syncCounter
}

func (t *countedTemp) Sync() error { t.c.n++; return t.TempFile.Sync() }

// lostSyncAt runs op after setup with its nth fsync lost, then checks.
func lostSyncAt(t *testing.T, setup []step, op step, nth int) {
	t.Helper()
	w := newWorld(t, &crashfs.Options{})
	for _, s := range setup {
		if err := s.run(w); err != nil {
			t.Fatalf("setup %s: %v", s.name, err)
		}
	}
	seen := 0
	var lost string
	efs := errorfs.Wrap(w.fs)
	for _, o := range []errorfs.Op{errorfs.OpSync, errorfs.OpSyncDir} {
		efs.Add(&errorfs.Rule{Op: o, Kind: errorfs.Lose, Path: func(p string) bool {
			seen++
			if seen == nth {
				lost = p
				return true
			}
			return false
		}, Times: 1})
	}
	w.vfs, w.store = efs, w.open(efs, w.host, nil)
	where := fmt.Sprintf("%s with fsync %d lost", op.name, nth)
	err := op.run(w)
	if lost == "" {
		t.Fatalf("%s: fsync %d never happened", where, nth)
	}
	where += " (" + lost + ")"
	// (A release cut between the keys acknowledges nothing: its "success"
	// is the cut.)
	if err == nil && !strings.HasSuffix(op.name, " cut between keys") {
		t.Errorf("%s: the operation acknowledged although an fsync failed", where)
	}
	// The same store acknowledges nothing more, whatever it is asked. (A
	// step that runs on a store of its own leaves w.store untouched.)
	if !ownStore(op) {
		seat, session := mustKeys(t, 9)
		_, aerr := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('9'), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
		if !errors.Is(aerr, claimstore.ErrSyncFailed) {
			t.Errorf("%s: an acquire on the same store afterwards: %v, want ErrSyncFailed", where, aerr)
		}
	}
	checkAllCrashes(t, w, where)
}

// ownStore reports whether a step runs its operation on a store of its own
// (with a barrier hook) rather than on w.store.
func ownStore(st step) bool {
	return strings.HasSuffix(st.name, " cut between keys") || strings.HasSuffix(st.name, " raced")
}

// TestFsyncCounts pins down how many fsyncs each operation costs: what
// durability needs and no more. An acquire on new keys in a new root: the
// root's parent, the root, seat/ and session/ (each made: each fsynced
// itself and as the parent of what was made in it) and the two new key
// directories themselves beside the two temporaries, then the two key
// directories after their links. A release in a new process: the same,
// since a directory's first use in a process fsyncs it and its parent. A
// step in a store that has used the directories: two temporaries, two key
// directories. (crashfs's temporaries have no vfs.LinkSyncer, so no fsync
// of a file follows its link: its model makes a name durable with its
// directory's fsync alone; TestPowerCutImages holds the kernel to more.)
func TestFsyncCounts(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	count := func(run func(s *claimstore.Store)) int {
		t.Helper()
		c := &syncCounter{FS: w.fs}
		run(w.open(c, w.host, nil))
		return c.n
	}
	seat, session := mustKeys(t, 1)
	owner := claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}
	var c *claimstore.Claim
	if n := count(func(s *claimstore.Store) {
		var err error
		if c, err = s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('a'), Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}); n != 10 {
		t.Errorf("acquire on new keys in a new root: %d fsyncs, want 10", n)
	}
	if n := count(func(s *claimstore.Store) {
		if err := s.Advance(context.Background(), c, active()); err != nil {
			t.Fatal(err)
		}
		if err := s.Advance(context.Background(), c, stopping()); err != nil {
			t.Fatal(err)
		}
	}); n != 10+4 {
		t.Errorf("two steps in a new process: %d fsyncs, want 14 (10, then 4)", n)
	}
	counter := &syncCounter{FS: w.fs}
	s := w.open(counter, w.host, nil)
	if err := s.Release(context.Background(), c, claimstore.NewProof(claimstore.ProofCohort, "x")); err != nil {
		t.Fatal(err)
	}
	if counter.n != 10 {
		t.Errorf("release in a new process: %d fsyncs, want 10", counter.n)
	}
	// The releasing store made its revisions durable itself: a decision on
	// them (free) needs no fsync, now or later.
	for i := range 2 {
		counter.n = 0
		res, err := s.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}})
		if err != nil || res.Outcome != claimstore.OutcomeFree {
			t.Fatalf("classify after release: %+v, %v", res, err)
		}
		if counter.n != 0 {
			t.Errorf("classify %d in the store that released: %d fsyncs, want none", i+1, counter.n)
		}
	}
	// A new store syncs each key once, the first time a decision rests on
	// it, and not again: the seat's chain (the root's parent, the root,
	// seat/, the key), then the session's (the root again, since session/'s
	// entry in it is newer than that fsync, session/, the key).
	counter.n = 0
	s = w.open(counter, w.host, nil)
	for i, want := range []int{7, 0} {
		counter.n = 0
		if _, err := s.Classify(context.Background(), seat, session, &claimstore.ClassifyOptions{Units: absentUnits{}}); err != nil {
			t.Fatal(err)
		}
		if counter.n != want {
			t.Errorf("classify %d of a released pair in a new store: %d fsyncs, want %d", i+1, counter.n, want)
		}
	}
}

// An acquire that finds its number taken when its temporary is written
// gives up before fsyncing it: with many racing for one pair, all but the
// winner would otherwise wait on the disk for nothing. (A claim's step
// looks at its next number while its fsyncs run instead, where the look
// costs nothing: that number is taken only when the claim was lost.)
func TestLoserPaysNoTemporaryFsync(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := mustKeys(t, 1)
	fields := func(id byte) claimstore.AcquireFields {
		return claimstore.AcquireFields{ClaimID: claimID(id), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}
	}
	counter := &syncCounter{FS: w.fs}
	var syncsBefore int
	raced := false
	loser := w.open(counter, w.host, func(p claimstore.Point) error {
		if p.Barrier == claimstore.BarrierTempWritten && p.Key == seat && !raced {
			raced = true
			// Another writer takes the pair, whole, now.
			if _, err := w.store.Acquire(context.Background(), seat, session, fields('b')); err != nil {
				t.Fatalf("rival: %v", err)
			}
			syncsBefore = counter.n
		}
		return nil
	})
	_, err := loser.Acquire(context.Background(), seat, session, fields('a'))
	var ref *claimstore.Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("acquire that lost its number: %v, want a refusal", err)
	}
	if !raced {
		t.Fatal("the race never happened: the test proves nothing")
	}
	if n := counter.n - syncsBefore; n != 0 {
		t.Errorf("the loser made %d fsyncs after its number was taken, want none", n)
	}
}

// A root that cannot be examined when it is first written to is not
// written to: the check of the root (not a symlink, this user's, not
// writable by others) is not skipped because its Lstat failed.
func TestUncheckableRootIsNotWritten(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	efs := errorfs.Wrap(w.fs, &errorfs.Rule{Op: errorfs.OpLstat, Path: func(p string) bool { return p == root }})
	s := w.open(efs, w.host, nil)
	seat, session := mustKeys(t, 1)
	if _, err := s.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); !errors.Is(err, syscall.EIO) {
		t.Errorf("acquire in a root whose Lstat fails: %v, want EIO", err)
	}
	if files := w.fs.Files(root); len(files) != 0 {
		t.Errorf("files written under a root that could not be checked: %v", keysOf(files))
	}
}

// On a filesystem that cannot say which file a name refers to (no inode
// identity: crashfs), a store never vouches for its own head without
// reading it: a head replaced by another claim's record under the same
// number is read, and the step refused.
func TestNoFastPathWithoutFileIdentity(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	seat, session := mustKeys(t, 1)
	c, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('a'), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
	if err != nil {
		t.Fatal(err)
	}
	other := newWorld(t, &crashfs.Options{})
	if _, err := other.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{ClaimID: claimID('b'), Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}}); err != nil {
		t.Fatal(err)
	}
	p := revPath(seat, c.SeatRev)
	if err := w.fs.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := w.fs.WriteFile(p, other.fs.Files(path.Dir(p))[p], 0o444); err != nil {
		t.Fatal(err)
	}
	var ref *claimstore.Refusal
	if err := w.store.Advance(context.Background(), c, active()); !errors.As(err, &ref) || ref.Code != claimstore.UnsafeReplacement {
		t.Errorf("step on a head replaced by another claim's record: %v; want unsafe-replacement", err)
	}
}

// A root swapped for a symlink between the moment the store makes it and
// the moment it checks it is not written through: the root is checked
// after it is made, not only when it already existed.
func TestRootSwappedAfterMkdirIsNotWritten(t *testing.T) {
	w := newWorld(t, &crashfs.Options{})
	if err := w.fs.MkdirAll("/elsewhere", 0o700); err != nil {
		t.Fatal(err)
	}
	made, swapped := false, false
	w.fs.SetHook(func(c crashfs.Call) error {
		switch {
		case c.Op == "mkdir" && c.Path == root:
			made = true
		case made && !swapped && c.Path == root:
			swapped = true
			if err := w.fs.Remove(root); err != nil {
				t.Errorf("swap: %v", err)
			}
			if err := w.fs.Symlink("/elsewhere", root); err != nil {
				t.Errorf("swap: %v", err)
			}
		}
		return nil
	})
	seat, session := mustKeys(t, 1)
	_, err := w.store.Acquire(context.Background(), seat, session, claimstore.AcquireFields{Owner: claimstore.Owner{PID: ownerPID, Start: ownerStart, Boot: bootA}})
	w.fs.SetHook(nil)
	if !swapped {
		t.Fatal("the root was never swapped: the test proves nothing")
	}
	if err == nil {
		t.Error("acquire through a root swapped for a symlink succeeded")
	}
	if files := w.fs.Files("/elsewhere"); len(files) != 0 {
		t.Errorf("written through the swapped root: %v", keysOf(files))
	}
}
