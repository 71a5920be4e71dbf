package dirbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/crashfs"
	"github.com/claimstore/claimstore/internal/errorfs"
)

func batchLoc(i int) storage.Loc {
	return storage.Loc{Kind: storage.KindSession, Hash: fmt.Sprintf("%032x", i+1)}
}

// publishOne publishes data as revision n of loc, whole.
func publishOne(t *testing.T, b *Backend, loc storage.Loc, n uint64, data string) {
	t.Helper()
	if err := b.Publish(context.Background(), loc, n, []byte(data), nil); err != nil {
		t.Fatal(err)
	}
}

// PublishBatch judges each request on its own, as Prepare (PrepareOver)
// and Commit would: a number out of range, a number taken and a head that
// moved fail their own request, the others are published — over their
// Prev where they name one, and on a key never written — with each
// request's barriers in Commit's order, and nothing left behind but the
// revisions.
func TestPublishBatchEachRequestOnItsOwn(t *testing.T) {
	ctx := context.Background()
	b := New(newRoot(t), nil)
	for i := range 4 {
		publishOne(t, b, batchLoc(i), 1, fmt.Sprintf("r1 of %d\n", i))
	}
	var mu sync.Mutex
	met := map[int][]storage.Barrier{}
	hook := func(i int) func(storage.Barrier) error {
		return func(bar storage.Barrier) error {
			mu.Lock()
			defer mu.Unlock()
			met[i] = append(met[i], bar)
			return nil
		}
	}
	reqs := []storage.PrepareRequest{
		{Loc: batchLoc(0), N: 0, Data: []byte("out of range\n")},
		{Loc: batchLoc(0), N: 2, Data: []byte("r2 of 0\n"), Prev: []byte("r1 of 0\n"), Hook: hook(1)},
		{Loc: batchLoc(1), N: 1, Data: []byte("taken\n"), Hook: hook(2)},
		{Loc: batchLoc(2), N: 2, Data: []byte("over another head\n"), Prev: []byte("not r1 of 2\n"), Hook: hook(3)},
		{Loc: batchLoc(3), N: 2, Data: []byte("r2 of 3\n"), Hook: hook(4)},
		{Loc: batchLoc(4), N: 1, Data: []byte("r1 of 4\n"), Prev: []byte("ignored at 1\n"), Hook: hook(5)},
		{Loc: batchLoc(0), N: storage.MaxRevision + 1, Data: []byte("out of range\n")},
	}
	errs, err := b.PublishBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		var want error
		switch i {
		case 2:
			want = storage.ErrRevisionExists
		case 3:
			want = storage.ErrHeadMoved
		}
		switch {
		case i == 0 || i == 6:
			if e == nil || !bytes.Contains([]byte(e.Error()), []byte("out of range")) {
				t.Errorf("request %d: %v, want the revision out of range", i, e)
			}
		case want != nil:
			if !errors.Is(e, want) {
				t.Errorf("request %d: %v, want %v", i, e, want)
			}
		case e != nil:
			t.Errorf("request %d: %v", i, e)
		}
	}
	heads := map[int]string{0: "r2 of 0\n", 1: "r1 of 1\n", 2: "r1 of 2\n", 3: "r2 of 3\n", 4: "r1 of 4\n"}
	for i, want := range heads {
		_, data, err := b.Head(ctx, batchLoc(i))
		if err != nil || string(data) != want {
			t.Errorf("key %d head: %q, %v; want %q", i, data, err, want)
		}
		names, err := os.ReadDir(b.dir(batchLoc(i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, ok := storage.ParseRevisionName(n.Name()); !ok {
				t.Errorf("key %d: %s left in its directory", i, n.Name())
			}
		}
	}
	all := []storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced, storage.BarrierLinked, storage.BarrierDirSynced}
	wantMet := map[int][]storage.Barrier{1: all, 2: all[:1], 3: all[:2], 4: all, 5: all}
	if diff := cmp.Diff(wantMet, met); diff != "" {
		t.Errorf("barriers met (-want +got):\n%s", diff)
	}
	// What a batch published it made durable: Sync has nothing left to do.
	for _, i := range []int{0, 3, 4} {
		b.mu.Lock()
		synced := b.synced[batchLoc(i)]
		b.mu.Unlock()
		if synced != map[int]uint64{0: 2, 3: 2, 4: 1}[i] {
			t.Errorf("key %d: recorded durable up to %d", i, synced)
		}
	}

	// A cancelled context publishes nothing and says so.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.PublishBatch(cctx, []storage.PrepareRequest{{Loc: batchLoc(5), N: 1, Data: []byte("x\n")}}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled batch: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(b.dir(batchLoc(5)), storage.RevisionName(1))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cancelled batch published: %v", err)
	}
}

// A barrier that fails after a request's link is that request's error,
// and its revision is published and durable all the same, as Commit's; one
// that fails before the link stops its request alone.
func TestPublishBatchBarrierErrors(t *testing.T) {
	for _, at := range []storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced, storage.BarrierLinked, storage.BarrierDirSynced} {
		t.Run(string(at), func(t *testing.T) {
			b := New(newRoot(t), nil)
			stop := errors.New("stopped")
			errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{
				{Loc: batchLoc(0), N: 1, Data: []byte("a\n"), Hook: func(bar storage.Barrier) error {
					if bar == at {
						return stop
					}
					return nil
				}},
				{Loc: batchLoc(1), N: 1, Data: []byte("b\n")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(errs[0], stop) || errs[1] != nil {
				t.Errorf("errs %v, want the barrier's error and nil", errs)
			}
			linked := at == storage.BarrierLinked || at == storage.BarrierDirSynced
			_, err = os.Lstat(filepath.Join(b.dir(batchLoc(0)), storage.RevisionName(1)))
			if got := err == nil; got != linked {
				t.Errorf("stopped at %s: published %v, want %v", at, got, linked)
			}
			names, _ := os.ReadDir(b.dir(batchLoc(0)))
			if len(names) > 1 {
				t.Errorf("stopped at %s: %d names left in the key directory", at, len(names))
			}
		})
	}
}

// A syncfs that fails — before the links, or after them — fails the whole
// batch and the backend (nothing more is published), and one before the
// links links nothing.
func TestPublishBatchSyncFSFails(t *testing.T) {
	for _, nth := range []int{1, 2} {
		t.Run(fmt.Sprintf("syncfs %d", nth), func(t *testing.T) {
			efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSyncFS, Nth: nth, Times: 1})
			b := New(newRoot(t), &Options{FS: efs})
			publishOne(t, b, batchLoc(1), 1, "before\n")
			// A key that exists: no parent's fsync is owed, whose
			// failure the batch would report anyway.
			_, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: batchLoc(1), N: 2, Data: []byte("a\n"), Prev: []byte("before\n")}})
			if !errors.Is(err, storage.ErrSyncFailed) {
				t.Fatalf("PublishBatch over a failed syncfs: %v, want ErrSyncFailed", err)
			}
			_, err = os.Lstat(filepath.Join(b.dir(batchLoc(1)), storage.RevisionName(2)))
			if linked := err == nil; linked != (nth == 2) {
				t.Errorf("syncfs %d failed: linked %v", nth, linked)
			}
			if err := b.Publish(context.Background(), batchLoc(2), 1, []byte("after\n"), nil); !errors.Is(err, storage.ErrSyncFailed) {
				t.Errorf("a publish after the failed syncfs: %v, want ErrSyncFailed", err)
			}
		})
	}
}

// withoutSyncFS is a filesystem on a platform without syncfs(2).
type withoutSyncFS struct{ vfs.FS }

func (withoutSyncFS) SyncFS(string) error { return errors.ErrUnsupported }

// At every point a batch can stop, with and without syncfs, a power cut
// leaves each key at its old head or at its new revision whole — never a
// revision whose bytes were not made durable before its link — and once
// PublishBatch has returned, every revision it reported published.
func TestPublishBatchAtEveryCrash(t *testing.T) {
	const root = "/data/claims"
	for _, syncfs := range []bool{true, false} {
		t.Run(fmt.Sprintf("syncfs=%v", syncfs), func(t *testing.T) {
			base := crashfs.New(&crashfs.Options{NamedTemps: true, TornWrites: true})
			if err := base.MkdirAll("/data", 0o755); err != nil {
				t.Fatal(err)
			}
			open := func(f *crashfs.FS) *Backend {
				var fsys vfs.FS = f
				if !syncfs {
					fsys = withoutSyncFS{f}
				}
				return New(root, &Options{FS: fsys, Sequential: true})
			}
			b := open(base)
			for i := range 2 {
				publishOne(t, b, batchLoc(i), 1, fmt.Sprintf("old %d\n", i))
			}
			// A request that fails before it is staged comes first: the
			// ones after it are made durable all the same.
			reqs := []storage.PrepareRequest{{Loc: batchLoc(9), N: 0, Data: []byte("out of range\n")}}
			for i := range 3 {
				reqs = append(reqs, storage.PrepareRequest{Loc: batchLoc(i), N: 2, Data: []byte(fmt.Sprintf("new %d, a revision longer than the old\n", i)), Prev: []byte(fmt.Sprintf("old %d\n", i))})
			}
			reqs[3].N = 1 // a key never written
			reqs[3].Prev = nil
			check := func(f *crashfs.FS, where string, done bool) {
				t.Helper()
				rb := open(f)
				for i, r := range reqs[1:] {
					n, data, err := rb.Head(context.Background(), r.Loc)
					switch {
					case err != nil:
						t.Errorf("%s: key %d: %v", where, i, err)
					case n == r.N && bytes.Equal(data, r.Data):
					case !done && n == r.N-1 && (n == 0 || string(data) == fmt.Sprintf("old %d\n", i)):
					default:
						t.Errorf("%s: key %d reads r%d %q", where, i, n, data)
					}
				}
			}
			for k := 0; ; k++ {
				f := base.Fork()
				f.StopAfter(k)
				errs, err := open(f).PublishBatch(context.Background(), reqs)
				done := !f.Stopped()
				if done {
					if err != nil {
						t.Fatalf("without a crash: %v", err)
					}
					for i, e := range errs[1:] {
						if e != nil {
							t.Fatalf("request %d without a crash: %v", i+1, e)
						}
					}
				} else if err != nil && !errors.Is(err, crashfs.ErrStopped) {
					t.Fatalf("stopped after %d calls: %v", k, err)
				}
				states, _, serr := f.CrashStates(crashfs.ModelSubset, 0)
				if serr != nil {
					t.Fatal(serr)
				}
				for i, st := range states {
					check(st, fmt.Sprintf("stopped after %d calls, power cut %d/%d", k, i+1, len(states)), done)
				}
				if done {
					t.Logf("%d stop points", k)
					break
				}
			}
		})
	}
}

// syncCounted is faultyOS counting syncfs calls, and the fsyncs of files
// and directories besides.
type syncCounted struct {
	faultyOS
	syncfs, fsyncs *atomic.Int32
}

func (f syncCounted) SyncFS(name string) error {
	f.syncfs.Add(1)
	return f.faultyOS.SyncFS(name)
}

func (f syncCounted) SyncDir(name string) error {
	f.fsyncs.Add(1)
	return f.faultyOS.SyncDir(name)
}

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f syncCounted) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

func (f syncCounted) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.faultyOS.CreateTemp(dir, perm)
	if err != nil {
		return nil, err
	}
	return syncCountedTemp{t, f.fsyncs}, nil
}

type syncCountedTemp struct {
	vfs.TempFile
	fsyncs *atomic.Int32
}

func (t syncCountedTemp) Sync() error {
	t.fsyncs.Add(1)
	return t.TempFile.Sync()
}

func newSyncCounted() syncCounted {
	return syncCounted{faultyOS: faultyOS{fail: new(atomic.Bool), temps: new(atomic.Int32), open: new(atomic.Int32)}, syncfs: new(atomic.Int32), fsyncs: new(atomic.Int32)}
}

// A batch pays two syncfs calls whatever its size — none for a batch of
// which nothing was staged, one for a batch of which nothing was linked —
// and no fsync of a file or directory; it leaves no temporary open,
// whether its requests were published, lost or stopped, or the batch was
// cancelled after its temporaries were written.
func TestPublishBatchSyncsAndTemporaries(t *testing.T) {
	ctx := context.Background()
	fsys := newSyncCounted()
	b := New(newRoot(t), &Options{FS: fsys})
	for i := range 8 {
		publishOne(t, b, batchLoc(i), 1, fmt.Sprintf("r1 of %d\n", i))
	}
	stop := errors.New("stopped")
	stopAt := func(bar storage.Barrier) func(storage.Barrier) error {
		return func(b storage.Barrier) error {
			if b == bar {
				return stop
			}
			return nil
		}
	}
	cases := []struct {
		name           string
		reqs           []storage.PrepareRequest
		syncfs, fsyncs int32
		published      int
	}{
		{"nothing staged", []storage.PrepareRequest{{Loc: batchLoc(0), N: 0}, {Loc: batchLoc(1), N: 1, Data: []byte("taken\n")}}, 0, 0, 0},
		{"nothing linked", []storage.PrepareRequest{
			{Loc: batchLoc(0), N: 2, Data: []byte("x\n"), Prev: []byte("moved\n")},
			{Loc: batchLoc(1), N: 2, Data: []byte("x\n"), Hook: stopAt(storage.BarrierTempSynced)},
		}, 1, 0, 0},
		{"five published", []storage.PrepareRequest{
			{Loc: batchLoc(2), N: 2, Data: []byte("x\n"), Prev: []byte("r1 of 2\n")},
			{Loc: batchLoc(3), N: 2, Data: []byte("x\n"), Prev: []byte("r1 of 3\n")},
			{Loc: batchLoc(4), N: 2, Data: []byte("x\n")},
			{Loc: batchLoc(5), N: 2, Data: []byte("x\n")},
			{Loc: batchLoc(20), N: storage.MaxRevision, Data: []byte("the widest number\n")},
			{Loc: batchLoc(6), N: 2, Data: []byte("x\n"), Prev: []byte("moved\n")},
		}, 2, 0, 5},
	}
	for _, c := range cases {
		fsys.syncfs.Store(0)
		fsys.fsyncs.Store(0)
		errs, err := b.PublishBatch(ctx, c.reqs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := fsys.syncfs.Load(); got != c.syncfs {
			t.Errorf("%s: %d syncfs calls, want %d", c.name, got, c.syncfs)
		}
		if got := fsys.fsyncs.Load(); got != c.fsyncs {
			t.Errorf("%s: %d fsyncs, want %d", c.name, got, c.fsyncs)
		}
		if n := fsys.open.Load(); n != 0 {
			t.Errorf("%s: %d temporaries left open (%v)", c.name, n, errs)
		}
		published := 0
		for _, e := range errs {
			if e == nil {
				published++
			}
		}
		if published != c.published {
			t.Errorf("%s: %d published (%v), want %d", c.name, published, errs, c.published)
		}
	}
	// Cancelled once every temporary is written: nothing is linked and
	// none is left open.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqs := []storage.PrepareRequest{{Loc: batchLoc(7), N: 2, Data: []byte("x\n")}, {Loc: batchLoc(8), N: 1, Data: []byte("x\n"), Hook: func(bar storage.Barrier) error {
		if bar == storage.BarrierTempWritten {
			cancel()
		}
		return nil
	}}}
	if _, err := b.PublishBatch(cctx, reqs); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled after staging: %v", err)
	}
	if n := fsys.open.Load(); n != 0 {
		t.Errorf("cancelled after staging: %d temporaries left open", n)
	}
	for _, r := range reqs {
		if n, _, _ := b.Head(ctx, r.Loc); n >= r.N {
			t.Errorf("cancelled after staging: %v reads r%d", r.Loc, n)
		}
	}
}

// A link that fails fails its own request; the requests after it are
// still linked and made durable.
func TestPublishBatchBehindAFailedLink(t *testing.T) {
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLink, Path: errorfs.Contains(batchLoc(0).Hash)})
	b := New(newRoot(t), &Options{FS: efs})
	errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{
		{Loc: batchLoc(0), N: 1, Data: []byte("a\n")},
		{Loc: batchLoc(1), N: 1, Data: []byte("b\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] == nil || errs[1] != nil {
		t.Fatalf("errs %v, want the link's failure and nil", errs)
	}
	if n, data, err := b.Head(context.Background(), batchLoc(1)); n != 1 || string(data) != "b\n" || err != nil {
		t.Errorf("the request behind the failed link reads r%d %q %v", n, data, err)
	}
}

// Without syncfs, a directory's fsync that fails fails the batch: a new
// key's parent's before anything is linked, a key directory's after its
// link (its first fsync, which this process's first use of it owes before
// the link, passes).
func TestPublishBatchWithoutSyncFSDirectoryFails(t *testing.T) {
	for _, which := range []string{"parent", "key directory"} {
		t.Run(which, func(t *testing.T) {
			root := newRoot(t)
			b := New(root, nil)
			publishOne(t, b, batchLoc(0), 1, "first\n") // the session directory exists, durable
			failing := errorfs.Suffix("/session")
			if which == "key directory" {
				failing = errorfs.Suffix(batchLoc(0).Hash)
			}
			rule := &errorfs.Rule{Op: errorfs.OpSyncDir, Path: failing}
			if which == "key directory" {
				rule.Nth = 2
			}
			efs := errorfs.Wrap(vfs.OS, rule)
			b = New(root, &Options{FS: withoutSyncFS{efs}})
			req := storage.PrepareRequest{Loc: batchLoc(1), N: 1, Data: []byte("a new key\n")}
			if which == "key directory" {
				req = storage.PrepareRequest{Loc: batchLoc(0), N: 2, Data: []byte("second\n"), Prev: []byte("first\n")}
			}
			_, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{req})
			if !errors.Is(err, storage.ErrSyncFailed) {
				t.Fatalf("a %s's failed fsync: %v, want ErrSyncFailed", which, err)
			}
			_, err = os.Lstat(filepath.Join(b.dir(req.Loc), storage.RevisionName(req.N)))
			if linked := err == nil; linked != (which == "key directory") {
				t.Errorf("a %s's failed fsync: linked %v", which, linked)
			}
		})
	}
}

// makingDuringSync is the OS filesystem that, during each syncfs, lets
// another writer make a new key directory (during: after the syncfs was
// asked for, before it returns).
type makingDuringSync struct {
	vfs.OSFS
	during func()
}

func (f makingDuringSync) SyncFS(name string) error {
	f.during()
	return f.OSFS.SyncFS(name)
}

// A syncfs covers what existed when it began: a directory another writer
// makes while it runs still owes its parent's fsync afterwards, at both
// of a batch's syncs.
func TestPublishBatchSyncCoversOnlyWhatCameBefore(t *testing.T) {
	root := newRoot(t)
	publishOne(t, New(root, nil), batchLoc(0), 1, "first\n")
	var b *Backend
	var made [][]parentSync
	f := makingDuringSync{during: func() {
		needs, err := b.makeDirs(b.dir(batchLoc(10 + len(made))))
		if err != nil || len(needs) == 0 {
			t.Fatalf("a new key directory during the syncfs: %v, %v", needs, err)
		}
		made = append(made, needs)
	}}
	b = New(root, &Options{FS: f})
	errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: batchLoc(0), N: 2, Data: []byte("second\n"), Prev: []byte("first\n")}})
	if err != nil || errs[0] != nil {
		t.Fatalf("PublishBatch: %v, %v", errs, err)
	}
	if len(made) != 2 {
		t.Fatalf("%d syncfs calls, want 2", len(made))
	}
	for i, needs := range made {
		if parents, _, _ := b.owedParents(nil, needs, false); len(parents) == 0 {
			t.Errorf("the directory made during syncfs %d is taken for durable: its parent's fsync is not owed", i+1)
		}
	}
}

// slowFailingDir is the OS filesystem whose fsync of one directory waits
// until a syncfs has been made, then fails.
type slowFailingDir struct {
	vfs.OSFS
	dir      string
	entered  chan struct{}
	released chan struct{}
}

func (f slowFailingDir) SyncDir(name string) error {
	if name != f.dir {
		return f.OSFS.SyncDir(name)
	}
	close(f.entered)
	<-f.released
	return &fs.PathError{Op: "fsync", Path: name, Err: syscall.EIO}
}

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f slowFailingDir) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

func (f slowFailingDir) SyncFS(name string) error {
	err := f.OSFS.SyncFS(name)
	close(f.released)
	return err
}

// An fsync of this store that was in flight when a batch's syncfs began,
// and fails after it, fails the batch: what it lost may be what the batch
// rests on, and the syncfs's own success does not say otherwise.
func TestPublishBatchWaitsForAnFsyncInFlight(t *testing.T) {
	root := newRoot(t)
	b := New(root, nil)
	publishOne(t, b, batchLoc(0), 1, "r1\n")
	publishOne(t, b, batchLoc(1), 1, "r1\n")
	f := slowFailingDir{dir: b.dir(batchLoc(1)), entered: make(chan struct{}), released: make(chan struct{})}
	b = New(root, &Options{FS: f})
	syncErr := make(chan error, 1)
	go func() { syncErr <- b.Sync(context.Background(), batchLoc(1), 1) }()
	<-f.entered
	_, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: batchLoc(0), N: 2, Data: []byte("r2\n"), Prev: []byte("r1\n")}})
	if !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("PublishBatch beside a failing fsync: %v, want ErrSyncFailed", err)
	}
	if err := <-syncErr; !errors.Is(err, storage.ErrSyncFailed) {
		t.Errorf("the fsync in flight: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(b.dir(batchLoc(0)), storage.RevisionName(2))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("linked beside a failing fsync: %v", err)
	}
}

// A batch larger than the temporaries it may keep open is published a
// part at a time: every request still judged on its own, each part
// paying its two syncfs calls, no temporary left open.
func TestPublishBatchInParts(t *testing.T) {
	old := tempBudget
	tempBudget = func() int { return 2 }
	t.Cleanup(func() { tempBudget = old })
	fsys := newSyncCounted()
	b := New(newRoot(t), &Options{FS: fsys})
	publishOne(t, b, batchLoc(2), 1, "taken\n")
	var reqs []storage.PrepareRequest
	for i := range 5 {
		reqs = append(reqs, storage.PrepareRequest{Loc: batchLoc(i), N: 1, Data: []byte(fmt.Sprintf("r1 of %d\n", i))})
	}
	fsys.syncfs.Store(0)
	errs, err := b.PublishBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if (i == 2) != errors.Is(e, storage.ErrRevisionExists) || (i != 2 && e != nil) {
			t.Errorf("request %d: %v", i, e)
		}
	}
	for i := range 5 {
		want := fmt.Sprintf("r1 of %d\n", i)
		if i == 2 {
			want = "taken\n"
		}
		if _, data, err := b.Head(context.Background(), batchLoc(i)); err != nil || string(data) != want {
			t.Errorf("key %d: %q, %v", i, data, err)
		}
	}
	if got := fsys.syncfs.Load(); got != 6 {
		t.Errorf("%d syncfs calls for three parts, want 6", got)
	}
	if n := fsys.open.Load(); n != 0 {
		t.Errorf("%d temporaries left open", n)
	}
	if n := openTempBudget(); n < 16 || n > 1000 {
		t.Errorf("openTempBudget() = %d, want 16..1000", n)
	}
}

// A prune lock that cannot be taken fails the batch: nothing is linked,
// and no request is reported published.
func TestPublishBatchLockFails(t *testing.T) {
	root := newRoot(t)
	publishOne(t, New(root, nil), batchLoc(0), 1, "r1\n")
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpLock})
	b := New(root, &Options{FS: efs})
	errs, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: batchLoc(0), N: 2, Data: []byte("r2\n"), Prev: []byte("r1\n")}})
	if err == nil {
		t.Fatalf("PublishBatch without its lock: %v, no error", errs)
	}
	if len(efs.Injected()) == 0 {
		t.Fatalf("the lock was never asked for")
	}
	if n, _, _ := b.Head(context.Background(), batchLoc(0)); n != 1 {
		t.Errorf("linked without the lock: head r%d", n)
	}
}
