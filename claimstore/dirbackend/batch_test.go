package dirbackend

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/internal/errorfs"
	"github.com/google/go-cmp/cmp"
)

// PrepareBatch judges each request as Prepare would: a revision number out
// of range, or one already taken, fails that request alone, a cancelled
// context every one, and the rest are prepared and can be committed.
func TestPrepareBatchEachRequestOnItsOwn(t *testing.T) {
	b := New(newRoot(t), nil)
	other := storage.Loc{Kind: storage.KindSession, Hash: "0123456789abcdef0123456789abcdef"}
	data := []byte("{}\n")
	ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: testLoc, N: 0, Data: data},
		{Loc: testLoc, N: storage.MaxRevision + 1, Data: data},
		{Loc: testLoc, N: 1, Data: data},
		{Loc: other, N: 1, Data: data},
	})
	for i, want := range []bool{false, false, true, true} {
		if got := errs[i] == nil && ps[i] != nil; got != want {
			t.Errorf("request %d prepared: %v (%v), want %v", i, got, errs[i], want)
		}
	}
	for _, p := range ps[2:] {
		if err := p.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, loc := range []storage.Loc{testLoc, other} {
		revs, _, err := b.List(context.Background(), loc)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]uint64{1}, revs); diff != "" {
			t.Errorf("%v revisions (-want +got):\n%s", loc, diff)
		}
	}

	// A number found taken stops the batch there: what comes after it is
	// linked only after it, never once it lost, so it is not prepared at
	// all — no key directory made, no temporary — and says why; what
	// comes before is prepared.
	third := storage.Loc{Kind: storage.KindSession, Hash: "fedcba9876543210fedcba9876543210"}
	fourth := storage.Loc{Kind: storage.KindSession, Hash: "00000000000000000000000000000004"}
	ps, errs = b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: other, N: 2, Data: data},
		{Loc: testLoc, N: 1, Data: data},
		{Loc: third, N: 1, Data: data},
		{Loc: fourth, N: 1, Data: data},
	})
	if errs[0] != nil || ps[0] == nil {
		t.Fatalf("the request before a taken number: %v", errs[0])
	}
	ps[0].Abort()
	if !errors.Is(errs[1], storage.ErrRevisionExists) {
		t.Errorf("a taken number: %v, want ErrRevisionExists", errs[1])
	}
	for i, loc := range []storage.Loc{third, fourth} {
		if ps[2+i] != nil || !errors.Is(errs[2+i], storage.ErrEarlierTaken) {
			t.Errorf("request %d, after a taken number: %v, %v; want not prepared, ErrEarlierTaken", 2+i, ps[2+i], errs[2+i])
		}
		if _, err := os.Lstat(b.dir(loc)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the key directory of request %d, after a taken number: %v; want it never made", 2+i, err)
		}
	}

	// The widest number is in range; a head to follow (Prev) at revision
	// 1 follows nothing, as PrepareOver's.
	ps, errs = b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: other, N: storage.MaxRevision, Data: data},
		{Loc: third, N: 1, Data: data, Prev: []byte("not read\n")},
	})
	for i, p := range ps {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if err := p.Commit(context.Background()); err != nil {
			t.Errorf("request %d commit: %v", i, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ps, errs = b.PrepareBatch(ctx, []storage.PrepareRequest{{Loc: testLoc, N: 2, Data: data}, {Loc: other, N: 2, Data: data}})
	for i := range ps {
		if ps[i] != nil || !errors.Is(errs[i], context.Canceled) {
			t.Errorf("request %d with a cancelled context: %v, %v", i, ps[i], errs[i])
		}
	}
}

// A request that fails to stage (other than on a taken number) does not
// stop the others' fsyncs from being
// judged: behind it, a temporary's fsync that fails fails its own request
// (discarded, the error saying so), and one that succeeds meets its
// temp-synced barrier.
func TestPrepareBatchBehindAFailedRequest(t *testing.T) {
	root := newRoot(t)
	failing := storage.Loc{Kind: storage.KindSession, Hash: "00112233445566778899aabbccddeeff"}
	efs := errorfs.Wrap(vfs.OS, &errorfs.Rule{Op: errorfs.OpSync, Path: errorfs.Contains(failing.Hash), Kind: errorfs.Fail})
	b := New(root, &Options{FS: efs})
	data := []byte("{}\n")
	p, err := b.Prepare(context.Background(), testLoc, 1, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	var met []storage.Barrier
	hook := func(bar storage.Barrier) error { met = append(met, bar); return nil }
	other := storage.Loc{Kind: storage.KindSession, Hash: "0123456789abcdef0123456789abcdef"}
	ps, errs := b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: testLoc, N: 0, Data: data}, // out of range
		{Loc: other, N: 1, Data: data, Hook: hook},
	})
	if errs[0] == nil || errs[1] != nil || ps[1] == nil {
		t.Fatalf("behind a failed request: %v, %v", errs, ps)
	}
	ps[1].Abort()
	if diff := cmp.Diff([]storage.Barrier{storage.BarrierTempWritten, storage.BarrierTempSynced}, met); diff != "" {
		t.Errorf("barriers of the request behind (-want +got):\n%s", diff)
	}
	ps, errs = b.PrepareBatch(context.Background(), []storage.PrepareRequest{
		{Loc: testLoc, N: 0, Data: data}, // out of range
		{Loc: failing, N: 1, Data: data},
	})
	if ps[1] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "fsync temporary for") {
		t.Errorf("a failed fsync behind a failed request: %v, %v", ps[1], errs[1])
	}
}

// A barrier that stops a single publish at temp-synced stops it with its
// own error and closes the temporary (nothing is left open to leak, or, on
// a filesystem of named temporaries, behind).
func TestPrepareStoppedAtTempSyncedClosesIt(t *testing.T) {
	var fail atomic.Bool
	var temps, open atomic.Int32
	b := New(newRoot(t), &Options{FS: faultyOS{fail: &fail, temps: &temps, open: &open}})
	stop := errors.New("stopped at temp-synced")
	hook := func(bar storage.Barrier) error {
		if bar == storage.BarrierTempSynced {
			return stop
		}
		return nil
	}
	if _, err := b.Prepare(context.Background(), testLoc, 1, []byte("{}\n"), hook); !errors.Is(err, stop) {
		t.Errorf("Prepare stopped at temp-synced: %v, want the barrier's error", err)
	}
	if temps.Load() != 1 || open.Load() != 0 {
		t.Errorf("%d temporaries made, %d left open; want 1, 0", temps.Load(), open.Load())
	}
}
