package dirbackend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// A batch's fences (storage.PrepareRequest.Fence) are called once each,
// after every request is staged and before any temporary is reported
// synced, concurrent or sequential, with the fsyncs on goroutines or
// submitted at once (the operating system's own temporaries, io_uring); a
// fence that fails fails its own request, in place of any other error,
// and nothing of that request is left prepared.
func TestPrepareBatchCallsEveryFenceOnce(t *testing.T) {
	for _, c := range []struct {
		sequential, submitted bool
	}{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("sequential=%v,submitted=%v", c.sequential, c.submitted), func(t *testing.T) {
			sequential := c.sequential
			var temps, open atomic.Int32
			var fail atomic.Bool
			var fsys vfs.FS = faultyOS{fail: &fail, temps: &temps, open: &open}
			if c.submitted {
				// Temporaries of the operating system's, unwrapped, so
				// that the batch's fsyncs are submitted at once; what is
				// left open is counted by the descriptors instead (the
				// ring needSubmitted set up is the one the batch reuses).
				fsys = vfs.OS
				needSubmitted(t)
			}
			b := New(newRoot(t), &Options{Sequential: sequential, FS: fsys})
			var mu sync.Mutex
			var events []string
			note := func(e string) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			}
			hook := func(name string) func(storage.Barrier) error {
				return func(bar storage.Barrier) error {
					switch bar {
					case storage.BarrierTempWritten:
						note(name + " written")
					case storage.BarrierTempSynced:
						note(name + " synced")
					}
					return nil
				}
			}
			refused := errors.New("the claim moved")
			fence := func(name string, err error) func() error {
				return func() error { note(name + " fenced"); return err }
			}
			locs := []storage.Loc{
				{Kind: storage.KindSeat, Hash: "00000000000000000000000000000001"},
				{Kind: storage.KindSession, Hash: "00000000000000000000000000000002"},
				{Kind: storage.KindSession, Hash: "00000000000000000000000000000003"},
				{Kind: storage.KindSession, Hash: "00000000000000000000000000000004"},
			}
			data := []byte("{}\n")
			// A fenced request builds on its key's head: each key has one.
			for _, loc := range locs[:3] {
				publishOne(t, b, loc, 1, "{}\n")
			}
			ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{
				{Loc: locs[0], N: 2, Data: data, Hook: hook("a"), Fence: fence("a", nil)},
				{Loc: locs[1], N: 2, Data: data, Hook: hook("b"), Fence: fence("b", refused)},
				{Loc: locs[2], N: 2, Data: data, Hook: hook("c")},
				// Out of range, and fenced: the fence's error says why.
				{Loc: locs[3], N: 0, Data: data, Hook: hook("d"), Fence: fence("d", refused)},
			})
			want := []string{"a written", "b written", "c written", "a fenced", "b fenced", "d fenced", "a synced", "c synced"}
			if diff := cmp.Diff(want, events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for i, ok := range []bool{true, false, true, false} {
				if got := ps[i] != nil && errs[i] == nil; got != ok {
					t.Errorf("request %d prepared: %v (%v), want %v", i, got, errs[i], ok)
				}
				if !ok && !errors.Is(errs[i], refused) {
					t.Errorf("request %d: %v, want its fence's error", i, errs[i])
				}
			}
			for _, i := range []int{0, 2} {
				if ps[i] == nil {
					t.Fatalf("request %d not prepared: %v", i, errs[i])
				}
				if err := ps[i].Commit(context.Background()); err != nil {
					t.Errorf("commit %d: %v", i, err)
				}
			}
			if open.Load() != 0 {
				t.Errorf("%d temporaries left open after a fence failed", open.Load())
			}
			// The descriptors on the root's files: a ring set up on the
			// way (the directories' fsyncs take one of their own) is the
			// process's to keep.
			if open := openUnder(t, b.root); len(open) != 0 {
				t.Errorf("descriptors left open on %v: temporaries left open", open)
			}
			if _, err := os.Lstat(filepath.Join(b.dir(locs[1]), storage.RevisionName(2))); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused request's revision: %v, want none", err)
			}
		})
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// openUnder returns what this process's open descriptors name under root
// (an unnamed temporary's name is its directory's, then "#inode
// (deleted)").
func openUnder(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var under []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, root+"/") {
			under = append(under, target)
		}
	}
	return under
}

// needSubmitted skips where the kernel refuses io_uring, saying so, and
// fails instead under CI, whose machine has it. The kernel is asked
// directly: where it has io_uring, a batch vfs cannot submit is a failure.
func needSubmitted(t *testing.T) {
	t.Helper()
	var params [120]byte // struct io_uring_params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("io_uring refused on CI's machine, which has it: %v", errno)
		}
		t.Skipf("the kernel refuses io_uring here (%v): the goroutines' path is tested by the other cases", errno)
	}
	_ = unix.Close(int(fd))
	tf, err := vfs.OS.CreateTemp(t.TempDir(), 0o400)
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	sb, err := vfs.NewSyncBatch([]vfs.TempFile{tf})
	if err == nil {
		err = errors.Join(sb.Sync([]vfs.TempFile{tf}, nil)...)
	}
	if err != nil {
		t.Fatalf("the kernel has io_uring, but a batch cannot be submitted: %v", err)
	}
}

// A fenced request's name is not looked at before its fsync (its fence
// says whether it is free), and the link still decides: a taken number
// is found there. Its key directory is looked at before anything is made
// in it: a symlink, a directory others can write or a missing one is
// refused with no temporary made and nothing created.
func TestFencedRequestLooksAtItsDirectoryOnly(t *testing.T) {
	var temps, open atomic.Int32
	var fail atomic.Bool
	root := newRoot(t)
	b := New(root, &Options{FS: faultyOS{fail: &fail, temps: &temps, open: &open}})
	data := []byte("{}\n")
	publish := func(loc storage.Loc, n uint64) { t.Helper(); publishOne(t, b, loc, n, "{}\n") }
	publish(testLoc, 1)
	passes := func() error { return nil }

	temps.Store(0)
	ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{{Loc: testLoc, N: 1, Data: data, Fence: passes}})
	if errs[0] != nil {
		t.Fatalf("a fenced request on a taken number: %v, want it prepared (its fence decides)", errs[0])
	}
	if err := ps[0].Commit(context.Background()); !errors.Is(err, storage.ErrRevisionExists) {
		t.Errorf("its commit: %v, want ErrRevisionExists", err)
	}

	symlinked := storage.Loc{Kind: storage.KindSession, Hash: "00000000000000000000000000000005"}
	writable := storage.Loc{Kind: storage.KindSession, Hash: "00000000000000000000000000000006"}
	missing := storage.Loc{Kind: storage.KindSession, Hash: "00000000000000000000000000000007"}
	publish(writable, 1)
	if err := os.Chmod(b.dir(writable), 0o777); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, b.dir(symlinked)); err != nil {
		t.Fatal(err)
	}
	temps.Store(0)
	ps, errs = b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: symlinked, N: 2, Data: data, Fence: passes},
		{Loc: writable, N: 2, Data: data, Fence: passes},
		{Loc: missing, N: 2, Data: data, Fence: passes},
	})
	if !errors.Is(errs[0], storage.ErrUnsafePath) || !strings.Contains(errs[0].Error(), "symlink") {
		t.Errorf("a symlinked key directory: %v, want ErrUnsafePath naming the symlink", errs[0])
	}
	if !errors.Is(errs[1], storage.ErrUnsafePath) || !strings.Contains(errs[1].Error(), "chmod go-w") {
		t.Errorf("a key directory others can write: %v, want ErrUnsafePath saying what to do", errs[1])
	}
	if !errors.Is(errs[2], fs.ErrNotExist) {
		t.Errorf("a missing key directory: %v, want ErrNotExist", errs[2])
	}
	for i, p := range ps {
		if p != nil {
			t.Errorf("request %d prepared", i)
		}
	}
	if n := temps.Load(); n != 0 {
		t.Errorf("%d temporaries made", n)
	}
	if names, _ := os.ReadDir(elsewhere); len(names) != 0 {
		t.Errorf("made through the symlink: %v", names)
	}
	if _, err := os.Lstat(b.dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the missing key directory: %v, want it not made", err)
	}
}

// PublishBatch calls each request's fence once, after staging and before
// any link: a request whose fence fails is not published and reports the
// fence's error; the others are published.
func TestPublishBatchHonoursFences(t *testing.T) {
	b := New(newRoot(t), nil)
	refused := errors.New("not free")
	calls := 0
	locs := []storage.Loc{
		{Kind: storage.KindSession, Hash: "00000000000000000000000000000011"},
		{Kind: storage.KindSession, Hash: "00000000000000000000000000000012"},
	}
	data := []byte("{}\n")
	for _, loc := range locs {
		publishOne(t, b, loc, 1, "{}\n")
	}
	var met [2][]storage.Barrier
	hook := func(i int) func(storage.Barrier) error {
		return func(bar storage.Barrier) error { met[i] = append(met[i], bar); return nil }
	}
	errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{
		{Loc: locs[0], N: 2, Data: data, Hook: hook(0), Fence: func() error { calls++; return refused }},
		{Loc: locs[1], N: 2, Data: data, Hook: hook(1), Fence: func() error { calls++; return nil }},
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("fences called %d times, want 2", calls)
	}
	if !errors.Is(errs[0], refused) || errs[1] != nil {
		t.Errorf("outcomes %v, want the fence's error, then published", errs)
	}
	// The fences are called before the temporaries are made durable: the
	// refused request's is never reported synced.
	all := []storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced, storage.BarrierLinked, storage.BarrierDirSynced}
	if diff := cmp.Diff([][]storage.Barrier{all[:1], all}, met[:]); diff != "" {
		t.Errorf("barriers met (-want +got):\n%s", diff)
	}
	for i, want := range [][]uint64{{1}, {1, 2}} {
		revs, _, err := b.List(context.Background(), locs[i])
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, revs); diff != "" {
			t.Errorf("request %d revisions (-want +got):\n%s", i, diff)
		}
	}
}

// waitSyncFS is the OS filesystem whose temporaries' fsyncs, once armed,
// wait for release (up to a second each, then they go on and say so in
// late).
type waitSyncFS struct {
	faultyOS
	armed   *atomic.Bool
	release chan struct{}
	late    *atomic.Int32
}

func (f waitSyncFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.faultyOS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return waitSyncTemp{TempFile: t, f: f}, nil
}

type waitSyncTemp struct {
	vfs.TempFile
	f waitSyncFS
}

func (t waitSyncTemp) Sync() error {
	if !t.f.armed.Load() {
		return t.TempFile.Sync()
	}
	select {
	case <-t.f.release:
	case <-time.After(time.Second):
		t.f.late.Add(1)
	}
	return t.TempFile.Sync()
}

// The fences of a PrepareBatch run while its fsyncs are in flight, not
// after them: a fence never waits for a temporary's fsync (here every
// fsync waits for the fences, and none is kept waiting).
func TestPrepareBatchFencesWhileSyncsRun(t *testing.T) {
	var temps, open atomic.Int32
	var fail atomic.Bool
	late, armed := new(atomic.Int32), new(atomic.Bool)
	release := make(chan struct{})
	b := New(newRoot(t), &Options{FS: waitSyncFS{faultyOS: faultyOS{fail: &fail, temps: &temps, open: &open}, armed: armed, release: release, late: late}})
	locs := []storage.Loc{
		{Kind: storage.KindSeat, Hash: "00000000000000000000000000000021"},
		{Kind: storage.KindSession, Hash: "00000000000000000000000000000022"},
	}
	for _, loc := range locs {
		p, err := b.Prepare(context.Background(), loc, 1, []byte("{}\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	fenced := 0
	fence := func() error {
		if fenced++; fenced == len(locs) {
			close(release)
		}
		return nil
	}
	ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: locs[0], N: 2, Data: []byte("{}\n"), Fence: fence},
		{Loc: locs[1], N: 2, Data: []byte("{}\n"), Fence: fence},
	})
	for i, p := range ps {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		p.Abort()
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d fsyncs waited for the fences: they ran after an fsync, not while", n)
	}
}

// A PublishBatch whose context is done once its requests are staged fails
// as a whole: nothing is published, and no fence is called (there is
// nothing left to check).
func TestPublishBatchCancelledAfterStagingCallsNoFence(t *testing.T) {
	b := New(newRoot(t), nil)
	loc := storage.Loc{Kind: storage.KindSession, Hash: "00000000000000000000000000000031"}
	publishOne(t, b, loc, 1, "{}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := b.PublishBatch(ctx, []storage.PrepareRequest{{
		Loc: loc, N: 2, Data: []byte("{}\n"),
		Hook: func(bar storage.Barrier) error {
			if bar == storage.BarrierTempWritten {
				cancel()
			}
			return nil
		},
		Fence: func() error { calls++; return nil },
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a batch cancelled after staging: %v, want context.Canceled", err)
	}
	if calls != 0 {
		t.Errorf("fences called %d times, want none", calls)
	}
	revs, _, err := b.List(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{1}, revs); diff != "" {
		t.Errorf("revisions (-want +got):\n%s", diff)
	}
}
