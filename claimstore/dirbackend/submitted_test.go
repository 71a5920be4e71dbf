package dirbackend

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/google/go-cmp/cmp"
)

// syncDirCounted passes everything through to the operating system's
// filesystem, its temporaries unwrapped (so that a batch's fsyncs can be
// submitted at once), and notes each directory fsync and whether a batch
// had been submitted before it began.
type syncDirCounted struct {
	vfs.OSFS
	mu     *sync.Mutex
	synced *[]string
}

func (f syncDirCounted) SyncDir(name string) error {
	f.mu.Lock()
	*f.synced = append(*f.synced, filepath.Base(name))
	f.mu.Unlock()
	return f.OSFS.SyncDir(name)
}

// SyncDirs keeps every directory's fsync in SyncDir (vfs.DirsSyncer).
func (f syncDirCounted) SyncDirs(names []string) []error { return vfs.SyncDirsEach(f, names) }

// A batch of two or more fsyncs of the operating system's temporaries is
// submitted to the kernel at once (vfs.SyncBatch), with the parents that
// new key directories owe fsynced beside it, through the filesystem's own
// SyncDir; a lone fsync, or a wrapper's temporaries, run as before. Each
// linked temporary's link count (vfs.LinkSyncer) is submitted too, its
// directory's fsync running on the caller's goroutine meanwhile.
func TestBatchFsyncsSubmittedAtOnce(t *testing.T) {
	needSubmitted(t)
	var mu sync.Mutex
	var synced []string
	b := New(newRoot(t), &Options{FS: syncDirCounted{mu: &mu, synced: &synced}})
	seat := storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("a1", 16)}
	session := storage.Loc{Kind: storage.KindSession, Hash: strings.Repeat("b2", 16)}
	publishOne(t, b, storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("c3", 16)}, 1, "{}\n") // the root and kind directories made

	prepare := func(reqs ...storage.PrepareRequest) {
		t.Helper()
		ps, errs := b.PrepareBatch(context.Background(), reqs)
		for i, p := range ps {
			if errs[i] != nil {
				t.Fatalf("request %d: %v", i, errs[i])
			}
			if err := p.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// New keys: two temporaries; owed are the seat kind directory (for the
	// new seat key), the session kind directory (for the new session key)
	// and the root (for the new session kind directory).
	mu.Lock()
	synced = nil
	mu.Unlock()
	before, beforeSyncs := vfs.SyncBatches(), vfs.SyncsSubmitted()
	prepare(storage.PrepareRequest{Loc: seat, N: 1, Data: []byte("{}\n")}, storage.PrepareRequest{Loc: session, N: 1, Data: []byte("{}\n")})
	// The temporaries' batch, then each revision's link count beside its
	// directory's fsync.
	if got := vfs.SyncBatches() - before; got != 1+2 {
		t.Fatalf("%d batches submitted at once for a step on new keys, want 3", got)
	}
	// Both temporaries submitted: the caller makes the parents' fsyncs.
	if got := vfs.SyncsSubmitted() - beforeSyncs; got != 2+2 {
		t.Fatalf("%d fsyncs submitted for a step on new keys, want both temporaries and both link counts", got)
	}
	mu.Lock()
	got := append([]string(nil), synced...)
	mu.Unlock()
	// The parents and the new key directories themselves beside the
	// batch, in no set order (they run on goroutines), then each key
	// directory after its link.
	want := [][]string{{seat.Hash, session.Hash, "claims", "seat", "session"}, {seat.Hash, session.Hash}}
	if len(got) != 7 {
		t.Fatalf("directory fsyncs %v, want the three parents and the two new key directories, then the two key directories", got)
	}
	if diff := cmp.Diff(want, [][]string{sorted(got[:5]), sorted(got[5:])}); diff != "" {
		t.Errorf("directory fsyncs (-want +got):\n%s\nall: %v", diff, got)
	}

	// Keys that exist: two temporaries, no parent owed.
	before, beforeSyncs = vfs.SyncBatches(), vfs.SyncsSubmitted()
	prepare(storage.PrepareRequest{Loc: seat, N: 2, Data: []byte("{}\n")}, storage.PrepareRequest{Loc: session, N: 2, Data: []byte("{}\n")})
	if got := vfs.SyncBatches() - before; got != 1+2 {
		t.Fatalf("%d batches submitted at once for a step, want 3", got)
	}
	// No parent owed: the caller fsyncs the session's temporary itself,
	// the seat's submitted beside it.
	if got := vfs.SyncsSubmitted() - beforeSyncs; got != 1+2 {
		t.Fatalf("%d fsyncs submitted for a step, want the seat's temporary and both link counts", got)
	}
	// One temporary alone: fsynced on the caller's goroutine; its link
	// count is submitted, beside its directory's fsync.
	before = vfs.SyncBatches()
	prepare(storage.PrepareRequest{Loc: seat, N: 3, Data: []byte("{}\n")})
	if got := vfs.SyncBatches() - before; got != 1 {
		t.Fatalf("a lone fsync and its link count: %d batches submitted, want 1 (the link count's)", got)
	}

	// Directories alone, no link count (a new store making seat's head
	// durable, Sync): the directories are submitted at once, and the
	// head's file is fsynced beside them on the caller's goroutine.
	before, beforeSyncs = vfs.SyncBatches(), vfs.SyncsSubmitted()
	if err := New(b.root, nil).Sync(context.Background(), seat, 3); err != nil {
		t.Fatal(err)
	}
	if got := vfs.SyncBatches() - before; got != 1 {
		t.Fatalf("directories' fsyncs with no link count among them: %d batches submitted, want 1", got)
	}
	// The key directory, and the three above it whose entries this new
	// store has not made durable: the seat kind directory, the root and
	// the root's parent.
	if got := vfs.SyncsSubmitted() - beforeSyncs; got != 4 {
		t.Fatalf("%d directories' fsyncs submitted, want the key directory and the three above it", got)
	}

	// On the OS's filesystem itself, the directories a step on new keys
	// owes go to the kernel in one submission of their own, beside the
	// temporaries': a goroutine each would start them two at a time on
	// two CPUs.
	o := New(newRoot(t), nil)
	publishOne(t, o, storage.Loc{Kind: storage.KindSeat, Hash: strings.Repeat("c3", 16)}, 1, "{}\n")
	before, beforeSyncs = vfs.SyncBatches(), vfs.SyncsSubmitted()
	ps, errs := o.PrepareBatch(context.Background(), []storage.PrepareRequest{{Loc: seat, N: 1, Data: []byte("{}\n")}, {Loc: session, N: 1, Data: []byte("{}\n")}})
	for i, p := range ps {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if err := p.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := vfs.SyncBatches() - before; got != 1+1+2 {
		t.Fatalf("%d batches submitted at once for a step on new keys, want 4: the temporaries, the directories, each link count", got)
	}
	if got := vfs.SyncsSubmitted() - beforeSyncs; got != 2+5+2 {
		t.Fatalf("%d fsyncs submitted for a step on new keys, want 9: both temporaries, the three parents and the two new key directories, both link counts", got)
	}

	// A wrapper's temporaries are fsynced through their own Sync.
	var temps, open atomic.Int32
	var fail atomic.Bool
	w := New(newRoot(t), &Options{FS: faultyOS{fail: &fail, temps: &temps, open: &open}})
	before = vfs.SyncBatches()
	ps, errs = w.PrepareBatch(context.Background(), []storage.PrepareRequest{{Loc: seat, N: 1, Data: []byte("{}\n")}, {Loc: session, N: 1, Data: []byte("{}\n")}})
	if errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	for _, p := range ps {
		p.Abort()
	}
	if got := vfs.SyncBatches() - before; got != 0 {
		t.Fatalf("a wrapper's temporaries were submitted at once (%d batches)", got)
	}
}

// sorted returns a sorted copy of names.
func sorted(names []string) []string {
	out := append([]string(nil), names...)
	slices.Sort(out)
	return out
}

// syncEach makes the first failure of any of its fsyncs sticky, as sync
// does one's, and wraps each failure with storage.ErrSyncFailed.
func TestSyncEachFailureIsSticky(t *testing.T) {
	b := New(newRoot(t), nil)
	errs := b.syncEach(func() []error { return []error{nil, syscall.EIO, nil} })
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], storage.ErrSyncFailed) || !errors.Is(errs[1], syscall.EIO) {
		t.Fatalf("errors %v, want the second alone, wrapping ErrSyncFailed and EIO", errs)
	}
	if err := b.checkFailed(); !errors.Is(err, storage.ErrSyncFailed) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("after a failed fsync of a batch: %v, want ErrSyncFailed naming it", err)
	}
}

// A step's fences run while its fsyncs do, once the seat's is submitted
// (the session's is the caller's own): a temporary whose fence failed is
// fsynced for nothing and then discarded, failing with its fence's error,
// and what is left is synced as ever; none when every fence failed.
func TestFencedOutTemporaryLeavesTheOtherSynced(t *testing.T) {
	needSubmitted(t)
	refused := errors.New("the claim moved")
	for _, c := range []struct {
		name   string
		failed []bool // whose fence fails, of the seat's and the session's
	}{
		{"seat", []bool{true, false}},
		{"session", []bool{false, true}},
		{"both", []bool{true, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := New(newRoot(t), nil)
			locs := []storage.Loc{
				{Kind: storage.KindSeat, Hash: strings.Repeat("a1", 16)},
				{Kind: storage.KindSession, Hash: strings.Repeat("b2", 16)},
			}
			var reqs []storage.PrepareRequest
			var synced []int
			var mu sync.Mutex
			var before uint64
			var submittedAtFence []uint64 // fsyncs submitted when each fence ran
			for i, loc := range locs {
				publishOne(t, b, loc, 1, "{}\n")
				var ferr error
				if c.failed[i] {
					ferr = refused
				}
				reqs = append(reqs, storage.PrepareRequest{
					Loc: loc, N: 2, Data: []byte("{}\n"),
					Prev: []byte("{}\n"),
					Fence: func() error {
						submittedAtFence = append(submittedAtFence, vfs.SyncsSubmitted()-before)
						return ferr
					},
					Hook: func(bar storage.Barrier) error {
						if bar == storage.BarrierTempSynced {
							mu.Lock()
							synced = append(synced, i)
							mu.Unlock()
						}
						return nil
					},
				})
			}
			before = vfs.SyncsSubmitted()
			ps, errs := b.PrepareBatch(context.Background(), reqs)
			if got := vfs.SyncsSubmitted() - before; got != 1 {
				t.Errorf("%d fsyncs submitted, want the seat's alone", got)
			}
			if diff := cmp.Diff([]uint64{1, 1}, submittedAtFence); diff != "" {
				t.Errorf("fsyncs submitted when each fence ran (-want +got):\n%s", diff)
			}
			var want []int
			for i, failed := range c.failed {
				if failed {
					if ps[i] != nil || !errors.Is(errs[i], refused) {
						t.Errorf("request %d: %v, %v; want its fence's error", i, ps[i], errs[i])
					}
					continue
				}
				want = append(want, i)
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if err := ps[i].Commit(context.Background()); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			if diff := cmp.Diff(want, synced); diff != "" {
				t.Errorf("temporaries synced (-want +got):\n%s", diff)
			}
		})
	}
}

// Where a batch's directories owe their parents an fsync (a key first used
// by this process), its fences are called before anything is submitted,
// and a temporary whose fence failed is never fsynced: the submission
// holds the others' alone.
func TestFencesBeforeOwedParents(t *testing.T) {
	needSubmitted(t)
	root := newRoot(t)
	refused := errors.New("the claim moved")
	locs := []storage.Loc{
		{Kind: storage.KindSeat, Hash: strings.Repeat("c3", 16)},
		{Kind: storage.KindSession, Hash: strings.Repeat("d4", 16)},
	}
	for _, loc := range locs {
		publishOne(t, New(root, nil), loc, 1, "{}\n")
	}
	var mu sync.Mutex
	var synced []string
	b := New(root, &Options{FS: syncDirCounted{mu: &mu, synced: &synced}}) // a process that has not used the keys yet
	var before uint64
	var submittedAtFence []uint64
	var reqs []storage.PrepareRequest
	for i, loc := range locs {
		var ferr error
		if i == 1 {
			ferr = refused
		}
		reqs = append(reqs, storage.PrepareRequest{
			Loc: loc, N: 2, Data: []byte("{}\n"), Prev: []byte("{}\n"),
			Fence: func() error {
				submittedAtFence = append(submittedAtFence, vfs.SyncsSubmitted()-before)
				return ferr
			},
		})
	}
	before = vfs.SyncsSubmitted()
	ps, errs := b.PrepareBatch(context.Background(), reqs)
	if diff := cmp.Diff([]uint64{0, 0}, submittedAtFence); diff != "" {
		t.Errorf("fsyncs submitted when each fence ran (-want +got):\n%s", diff)
	}
	if got := vfs.SyncsSubmitted() - before; got != 1 {
		t.Errorf("%d fsyncs submitted, want the seat's temporary alone", got)
	}
	mu.Lock()
	if len(synced) == 0 {
		t.Errorf("no directory fsynced: the batch owed no parent, and this test tests nothing")
	}
	mu.Unlock()
	if ps[1] != nil || !errors.Is(errs[1], refused) {
		t.Errorf("the refused request: %v, %v; want its fence's error", ps[1], errs[1])
	}
	if errs[0] != nil {
		t.Fatalf("the seat's request: %v", errs[0])
	}
	if err := ps[0].Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
