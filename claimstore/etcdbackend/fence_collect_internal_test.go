package etcdbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

var fenceLoc = storage.Loc{Kind: storage.KindSeat, Hash: "0123456789abcdef0123456789abcdef"}

// fenceBackend returns a backend on a fresh prefix of c that has read the
// fence epoch, as every backend has before its first publish.
func fenceBackend(t *testing.T, cli *clientv3.Client, prefix string) *Backend {
	t.Helper()
	b, err := New(cli, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Head(context.Background(), fenceLoc); err != nil {
		t.Fatal(err)
	}
	return b
}

// lose stages a publish of revision n of fenceLoc whose reply was lost and
// whose request has not reached the cluster yet: it is resolved as not
// published (which puts its fence), and the fence it was sent under is
// returned, for the test to send the very request late.
func lose(t *testing.T, b *Backend, n uint64, data []byte) fenceID {
	t.Helper()
	fence := b.currentFence()
	published, err := b.resolveLost(context.Background(), b.RevisionKey(fenceLoc, n), data, fence, errors.New("reply lost"))
	if err != nil || published {
		t.Fatalf("resolveLost of a request that never arrived = %v, %v; want not published", published, err)
	}
	if !exists(t, b.cli, b.fenceKey(fence)) {
		t.Fatalf("the fence %s was not put", b.fenceKey(fence))
	}
	return fence
}

func exists(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	resp, err := cli.Get(context.Background(), key, clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// late sends the lost request of revision n now, as a member that held its
// proposal, or a queue that held the request, would; it must not apply.
func late(t *testing.T, b *Backend, n uint64, data []byte, fence fenceID) {
	t.Helper()
	resp, err := b.createTxn(context.Background(), b.RevisionKey(fenceLoc, n), data, fence, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatalf("the late request of r%d applied after its publish was resolved as not published and its fence collected", n)
	}
	if exists(t, b.cli, b.RevisionKey(fenceLoc, n)) {
		t.Fatalf("r%d exists after the late request", n)
	}
}

func collect(t *testing.T, b *Backend) storage.FenceReport {
	t.Helper()
	rep, err := b.CollectFences(context.Background(), false)
	if err != nil {
		t.Fatalf("CollectFences: %v", err)
	}
	return rep
}

// TestCollectedFenceStillStopsALateRequest: the case fence collection must
// not break. A publish whose reply was lost is resolved as not published
// behind its fence; prune collects the fence; the lost request arrives
// only then (a frozen member forwarding its proposal, a request queued in
// the network). It must fail — on the epoch, which collection moved before
// the fence went — and the revision stays unpublished, as the publisher
// was told. The same holds for a backend that had not learnt the moved
// epoch: its fence lands in the old epoch after the move, and the next
// collection removes it without moving the epoch again.
func TestCollectedFenceStillStopsALateRequest(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	b := fenceBackend(t, cli, prefix)
	stale := fenceBackend(t, cli, prefix) // learns the epoch now, never again
	ctx := context.Background()

	data := []byte("late\n")
	fence := lose(t, b, 1, data)
	if rep := collect(t, b); rep.Collected != 1 || rep.Kept != 0 {
		t.Fatalf("collection = %+v; want the one fence collected", rep)
	}
	if exists(t, cli, b.fenceKey(fence)) {
		t.Fatal("the fence was not collected")
	}
	late(t, b, 1, data, fence)

	// A backend with the old epoch: its lost request's fence goes into
	// the old epoch, after the move.
	epoch, err := b.readEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stale.currentFence().epoch == epoch {
		t.Fatal("the stale backend has the new epoch; the test stages nothing")
	}
	staleData := []byte("stale late\n")
	staleFence := lose(t, stale, 2, staleData)
	if rep := collect(t, b); rep.Collected != 1 {
		t.Fatalf("collection of the old epoch's fence = %+v; want it collected", rep)
	}
	if now, err := b.readEpoch(ctx); err != nil || now != epoch {
		t.Errorf("the epoch moved from %d to %d (%v) with no fence in the current epoch: collecting an old epoch needs no move", epoch, now, err)
	}
	if exists(t, cli, stale.fenceKey(staleFence)) {
		t.Fatal("the old epoch's fence was not collected")
	}
	late(t, stale, 2, staleData, staleFence)

	// The epoch a collection has not moved past is never deleted from,
	// whatever the caller believes: the cluster checks it.
	cur := lose(t, b, 3, []byte("current\n"))
	if _, err := b.deleteEpoch(ctx, cur.epoch); err == nil || !strings.Contains(err.Error(), "not past") {
		t.Errorf("deleteEpoch of the current epoch: %v; want refused by its guard", err)
	}
	if !exists(t, cli, b.fenceKey(cur)) {
		t.Fatal("a fence of the current epoch was deleted without moving the epoch")
	}

	// Publishing goes on under the new epoch, on both backends.
	if err := b.Publish(ctx, fenceLoc, 1, []byte("now\n"), nil); err != nil {
		t.Fatalf("publish after collection: %v", err)
	}
	if err := stale.Publish(ctx, fenceLoc, 2, []byte("stale now\n"), nil); err != nil {
		t.Fatalf("publish by the stale backend: %v", err)
	}
}

// TestPublishMeetsAMovedEpoch: a publish whose transaction fails on the
// epoch alone (a prune moved it) is sent again under the new epoch and
// publishes: never reported as a lost race, never as not published, and it
// does not use up the attempts a lost reply gets — here the epoch moves
// before each of five transactions, more than the three attempts. A
// revision taken by another, or a guarded revision that moved, is still
// the definite answer it was, whatever the epoch did.
func TestPublishMeetsAMovedEpoch(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	b := fenceBackend(t, cli, prefix)
	other := fenceBackend(t, cli, prefix)
	ctx := context.Background()
	move := func() {
		t.Helper()
		if _, err := cli.Put(ctx, b.epochKey(), epochValue); err != nil {
			t.Fatal(err)
		}
	}

	var moves atomic.Int32
	b.beforeTxn = func() {
		if moves.Add(1) <= 5 {
			move()
		}
	}
	if err := b.Publish(ctx, fenceLoc, 1, []byte("one\n"), nil); err != nil {
		t.Fatalf("publish across five epoch moves: %v", err)
	}
	if got := moves.Load(); got != 6 {
		t.Errorf("%d transactions; want 6 (five failed on the epoch, one published)", got)
	}
	if got, err := b.Read(ctx, fenceLoc, 1); err != nil || string(got) != "one\n" {
		t.Fatalf("r1 = %q, %v", got, err)
	}

	// Guarded (an acquire over a free head).
	moves.Store(0)
	p, err := b.PrepareOver(ctx, fenceLoc, 2, []byte("two\n"), []byte("one\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatalf("guarded publish across epoch moves: %v", err)
	}

	// Taken by another while the epoch moved: a lost race, definite.
	if err := other.Publish(ctx, fenceLoc, 3, []byte("theirs\n"), nil); err != nil {
		t.Fatal(err)
	}
	moves.Store(0)
	if err := b.Publish(ctx, fenceLoc, 3, []byte("mine\n"), nil); !errors.Is(err, storage.ErrRevisionExists) {
		t.Errorf("publish of a taken revision while the epoch moved: %v; want ErrRevisionExists", err)
	}
	// The guarded revision moved, and so did the epoch: a moved head.
	moves.Store(0)
	p, err = b.PrepareOver(ctx, fenceLoc, 4, []byte("four\n"), []byte("not r3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); !errors.Is(err, storage.ErrHeadMoved) {
		t.Errorf("guarded publish over a moved head while the epoch moved: %v; want ErrHeadMoved", err)
	}

	// An epoch that moves before every transaction: refused, in words,
	// after a bounded number of tries — neither a lost race nor "not
	// published" after a lost reply — and nothing written.
	b.beforeTxn = move
	err = b.Publish(ctx, fenceLoc, 4, []byte("four\n"), nil)
	if err == nil || errors.Is(err, storage.ErrRevisionExists) || errors.Is(err, ErrNotPublished) || !strings.Contains(err.Error(), "epoch") {
		t.Errorf("publish under an epoch moved before every transaction: %v; want a refusal naming the epoch", err)
	}
	if exists(t, cli, b.RevisionKey(fenceLoc, 4)) {
		t.Error("r4 was written")
	}
}

// TestCollectionRacesPublishers: publishers on several backends publish
// while prunes plant and collect fences, moving the epoch again and again.
// Every publish succeeds with its own bytes: a transaction that met a
// moved epoch was sent again, not reported lost or not published.
func TestCollectionRacesPublishers(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	collector := fenceBackend(t, cli, prefix)
	const writers, revs = 4, 15
	ctx, stop := context.WithCancel(context.Background())
	var collections atomic.Int32
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			epoch, err := collector.readEpoch(ctx)
			if err == nil {
				_, err = cli.Put(ctx, collector.fenceKey(fenceID{epoch: epoch, id: newFenceID()}), "")
			}
			if err == nil {
				var rep storage.FenceReport
				rep, err = collector.CollectFences(ctx, false)
				if err == nil && rep.Collected == 0 {
					err = fmt.Errorf("a collection after a fence was planted collected nothing: %+v", rep)
				}
			}
			if err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			collections.Add(1)
		}
		done <- nil
	}()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		b := fenceBackend(t, cli, prefix)
		loc := storage.Loc{Kind: storage.KindSession, Hash: fmt.Sprintf("%032x", w+1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(1); n <= revs; n++ {
				if err := b.Publish(context.Background(), loc, n, fmt.Appendf(nil, "w%d r%d\n", w, n), nil); err != nil {
					errs[w] = fmt.Errorf("writer %d, r%d: %w", w, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for w := range writers {
		loc := storage.Loc{Kind: storage.KindSession, Hash: fmt.Sprintf("%032x", w+1)}
		for n := uint64(1); n <= revs; n++ {
			got, err := collector.Read(context.Background(), loc, n)
			if err != nil || !bytes.Equal(got, fmt.Appendf(nil, "w%d r%d\n", w, n)) {
				t.Errorf("writer %d r%d = %q, %v", w, n, got, err)
			}
		}
	}
	if collections.Load() < 2 {
		t.Errorf("only %d collections ran during the publishes; the test raced nothing", collections.Load())
	}
	t.Logf("%d collections (each moving the epoch) during %d publishes", collections.Load(), writers*revs)
}

// TestOldLayoutFencesKept: the fence keys of an older claimstore (directly
// under fences/, no epoch; its transactions compare none) are never
// collected — not even one whose name looks like an epoch's — and are
// counted, with why; that older claimstore's publishes go on working
// after the epoch moved.
func TestOldLayoutFencesKept(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	b := fenceBackend(t, cli, prefix)
	ctx := context.Background()
	flat := []string{"0123456789abcdef01234567", "e00000000000000000000001", "e0000000000000000000"}
	for _, id := range flat {
		if _, err := cli.Put(ctx, prefix+"/fences/"+id, ""); err != nil {
			t.Fatal(err)
		}
	}
	ours := lose(t, b, 1, []byte("x\n"))
	rep := collect(t, b)
	if rep.Collected != 1 || rep.Kept != 2 || !strings.Contains(rep.Why, "older claimstore") {
		t.Errorf("collection = %+v; want ours collected and the two old fences kept, with why", rep)
	}
	if exists(t, cli, b.fenceKey(ours)) {
		t.Error("our fence was not collected")
	}
	for _, id := range flat {
		if !exists(t, cli, prefix+"/fences/"+id) {
			t.Errorf("the old-layout key fences/%s was removed", id)
		}
	}
	// An older claimstore's publish: its fence compare only.
	key := b.RevisionKey(fenceLoc, 2)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(prefix+"/fences/"+newFenceID()), "=", 0)).
		Then(clientv3.OpPut(key, "old\n")).Commit()
	if err != nil || !resp.Succeeded {
		t.Errorf("an older claimstore's publish after the epoch moved: %v, %v", resp, err)
	}
	// A dry run counts, and changes nothing.
	ours = lose(t, b, 3, []byte("y\n"))
	rep, err = b.CollectFences(ctx, true)
	if err != nil || rep.Collected != 1 || rep.Kept != 2 {
		t.Errorf("dry run = %+v, %v; want 1 to collect, 2 kept", rep, err)
	}
	if !exists(t, cli, b.fenceKey(ours)) {
		t.Error("a dry run collected a fence")
	}
}

// TestCollectUnderNoSpace: with the NOSPACE alarm raised, the fences of
// epochs already moved past are collected (a guarded delete, which etcd
// applies under the alarm); those of the current epoch are kept, counted
// and explained (moving the epoch is a put, which it refuses), without
// failing; they still stop their request. Once an operator has freed
// space, the next collection takes them.
func TestCollectUnderNoSpace(t *testing.T) {
	c := etcdtest.StartQuota(t, 4<<20)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	b := fenceBackend(t, cli, prefix)
	stale := fenceBackend(t, cli, prefix)
	ctx := context.Background()
	lose(t, b, 1, []byte("a\n"))
	collect(t, b) // the epoch moves; stale keeps the old one
	oldFence := lose(t, stale, 2, []byte("b\n"))
	data := []byte("c\n")
	curFence := lose(t, b, 3, data)
	epoch, err := b.readEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Fill(t)
	rep := collect(t, b)
	if rep.Collected != 1 || rep.Kept != 1 || !strings.Contains(rep.Why, "out of space") || !strings.Contains(rep.Why, "disarmed") {
		t.Errorf("collection under NOSPACE = %+v; want the old epoch's fence collected, the current one's kept with why", rep)
	}
	if exists(t, cli, stale.fenceKey(oldFence)) {
		t.Error("the old epoch's fence was not collected under the alarm")
	}
	if !exists(t, cli, b.fenceKey(curFence)) {
		t.Fatal("the current epoch's fence was removed under the alarm, which refuses moving the epoch")
	}
	if now, err := b.readEpoch(ctx); err != nil || now != epoch {
		t.Errorf("the epoch is %d (%v), want %d: the alarm refuses its put", now, err, epoch)
	}
	c.Free(t)
	late(t, b, 3, data, curFence) // its fence kept, it still fails
	if rep := collect(t, b); rep.Collected != 1 || rep.Kept != 0 {
		t.Errorf("collection after the alarm was disarmed = %+v; want the kept fence collected", rep)
	}
	late(t, b, 3, data, curFence)
}

// TestLostReplyFenceCollection cuts the connection of the transaction
// that moves the fence epoch and removes the current epoch's fences, at
// every point (before the request reaches the server, after it with the
// reply dropped, held until after the client gave up): it is decided by
// reading the epoch back and sent again while the epoch reads unmoved,
// and ends with the epoch moved once and the fence gone — also once the
// held request has landed, which then fails its guard.
func TestLostReplyFenceCollection(t *testing.T) {
	c := etcdtest.Start(t, 1)
	direct := c.Client(t)
	for _, cut := range []etcdtest.Cut{etcdtest.CutBeforeRequest, etcdtest.CutAfterRequest, etcdtest.CutHoldRequest} {
		t.Run(cut.String(), func(t *testing.T) {
			ctx := context.Background()
			p := etcdtest.NewProxy(t, c.Members[0].ClientURL.Host)
			p.Hold = 1500 * time.Millisecond
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			b, err := New(cli, etcdtest.Prefix(t), &Options{RequestTimeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			fence := b.fenceKey(fenceID{id: newFenceID()}) // epoch 0: the key is absent
			if _, err := direct.Put(ctx, fence, ""); err != nil {
				t.Fatal(err)
			}
			// Warm the connection, so that the next request the client
			// sends is the move.
			if _, err := b.readEpoch(ctx); err != nil {
				t.Fatal(err)
			}
			fired := p.Arm(cut)
			n, kept, err := b.closeEpoch(ctx, 0)
			select {
			case <-fired:
			case <-time.After(5 * time.Second):
				t.Fatalf("the proxy never cut (closeEpoch returned %d, %q, %v)", n, kept, err)
			}
			if err != nil || kept != "" {
				t.Fatalf("closeEpoch with its transaction cut %v: %d, %q, %v", cut, n, kept, err)
			}
			check := func(when string) {
				t.Helper()
				resp, err := direct.Get(ctx, b.epochKey())
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 || resp.Kvs[0].Version != 1 {
					t.Errorf("%s: the epoch key is %v; want put once", when, resp.Kvs)
				}
				if exists(t, direct, fence) {
					t.Errorf("%s: the fence is still there", when)
				}
			}
			check("at once")
			time.Sleep(p.Hold + time.Second)
			check("after the held request landed")
			t.Logf("%v: %d counted (a move whose reply was lost is not)", cut, n)
		})
	}
}

// TestResolveUnderNoSpaceBehindAMovedEpoch: a lost reply resolved while
// the NOSPACE alarm refuses its fence's put is undecided — unless the
// epoch has moved past the one the request was sent under, which stops it
// as surely as the fence would: absent is then final, not published.
func TestResolveUnderNoSpaceBehindAMovedEpoch(t *testing.T) {
	c := etcdtest.StartQuota(t, 4<<20)
	cli := c.Client(t)
	prefix := etcdtest.Prefix(t)
	b := fenceBackend(t, cli, prefix)
	stale := fenceBackend(t, cli, prefix)
	ctx := context.Background()
	lose(t, b, 1, []byte("a\n"))
	collect(t, b) // the epoch moves; stale keeps the old one
	c.Fill(t)
	key := stale.RevisionKey(fenceLoc, 2)
	published, err := stale.resolveLost(ctx, key, []byte("b\n"), stale.currentFence(), errors.New("reply lost"))
	if err != nil || published {
		t.Errorf("resolveLost under NOSPACE of a request behind a moved epoch = %v, %v; want not published, decided", published, err)
	}
	var ind *IndeterminateError
	published, err = b.resolveLost(ctx, b.RevisionKey(fenceLoc, 3), []byte("c\n"), b.currentFence(), errors.New("reply lost"))
	if published || !errors.As(err, &ind) {
		t.Errorf("resolveLost under NOSPACE of a request of the current epoch = %v, %v; want undecided (its fence cannot be put)", published, err)
	}
	c.Free(t)
}
