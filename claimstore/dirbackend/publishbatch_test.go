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
			_, err := b.PublishBatch(context.Background(), []storage.PrepareRequest{{Loc: batchLoc(0), N: 1, Data: []byte("a\n")}})
			if !errors.Is(err, storage.ErrSyncFailed) {
				t.Fatalf("PublishBatch over a failed syncfs: %v, want ErrSyncFailed", err)
			}
			_, err = os.Lstat(filepath.Join(b.dir(batchLoc(0)), storage.RevisionName(1)))
			if linked := err == nil; linked != (nth == 2) {
				t.Errorf("syncfs %d failed: linked %v", nth, linked)
			}
			if err := b.Publish(context.Background(), batchLoc(1), 2, []byte("after\n"), nil); !errors.Is(err, storage.ErrSyncFailed) {
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
			var reqs []storage.PrepareRequest
			for i := range 3 {
				reqs = append(reqs, storage.PrepareRequest{Loc: batchLoc(i), N: 2, Data: []byte(fmt.Sprintf("new %d, a revision longer than the old\n", i)), Prev: []byte(fmt.Sprintf("old %d\n", i))})
			}
			reqs[2].N = 1 // a key never written
			reqs[2].Prev = nil
			check := func(f *crashfs.FS, where string, done bool) {
				t.Helper()
				rb := open(f)
				for i, r := range reqs {
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
					for i, e := range errs {
						if e != nil {
							t.Fatalf("request %d without a crash: %v", i, e)
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
