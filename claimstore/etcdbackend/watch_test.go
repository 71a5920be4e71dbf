package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

var otherLoc = storage.Loc{Kind: storage.KindSeat, Hash: "fedcba9876543210fedcba9876543210"}

// waitWoken waits (bounded: a test that hangs says so) for w to wake.
func waitWoken(t *testing.T, w storage.Watch, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("%s: Wait = %v, want woken", what, err)
	}
}

// notWoken checks that w does not wake while nothing is published under
// its keys (a short wait ends by its context).
func notWoken(t *testing.T, w storage.Watch, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := w.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: Wait = %v, want the context's deadline", what, err)
	}
}

func clientOf(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestWatch: a publish under a watched key wakes Wait, one under another
// key does not; what was published after WatchLocs and before Wait wakes
// it too (nothing between a read and a wait is missed).
func TestWatch(t *testing.T) {
	c := etcdtest.Start(t, 1)
	b := newBackend(t, c.Client(t), nil)
	ctx := context.Background()
	w, err := b.WatchLocs(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	notWoken(t, w, "nothing published")
	if err := b.Publish(ctx, otherLoc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	notWoken(t, w, "another key published")
	if err := b.Publish(ctx, loc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	waitWoken(t, w, "the key published before Wait")
	go func() {
		time.Sleep(100 * time.Millisecond)
		b.Publish(ctx, loc, 2, []byte("y\n"), nil)
	}()
	waitWoken(t, w, "the key published during Wait")
	w.Close()
	if err := w.Wait(ctx); err == nil {
		t.Error("Wait after Close: nil, want the watch's end")
	}
}

// TestWatchCompacted: a waiter cut off from the cluster while its key is
// published and the history compacted past its watch's revision: its
// client resumes the watch from a compacted revision (ErrCompacted); the
// watch is made anew and wakes the waiter, and goes on waking it after.
func TestWatchCompacted(t *testing.T) {
	c := etcdtest.Start(t, 1)
	px := etcdtest.NewProxy(t, c.Hosts()[0])
	direct := newBackend(t, c.Client(t), nil)
	b, err := etcdbackend.New(clientOf(t, px.URL()), direct.Prefix(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := b.WatchLocs(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	px.Partition(true)
	if err := direct.Publish(ctx, loc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	for i := range 5 {
		if _, err := cli.Put(ctx, direct.Prefix()+"/unrelated", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Partition(false)
	waitWoken(t, w, "after the partition and the compaction")
	if n, _, err := b.Head(ctx, loc); n != 1 || err != nil {
		t.Errorf("the read after the wake-up: %d, %v", n, err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		direct.Publish(ctx, loc, 2, []byte("y\n"), nil)
	}()
	waitWoken(t, w, "the watch made anew")
}

// TestWatchLeaderChange: leadership moves while a waiter waits; the next
// publish wakes it.
func TestWatchLeaderChange(t *testing.T) {
	c := etcdtest.Start(t, 3)
	b := newBackend(t, clientOf(t, c.Endpoints()...), nil)
	ctx := context.Background()
	w, err := b.WatchLocs(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lead := c.WaitLeader()
	cli := clientOf(t, c.Endpoints()[lead])
	st, err := cli.Status(ctx, c.Endpoints()[(lead+1)%3])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.MoveLeader(ctx, st.Header.MemberId); err != nil {
		t.Fatal(err)
	}
	if now := c.WaitLeader(); now == lead {
		t.Fatalf("the leader is still member %d", lead)
	}
	notWoken(t, w, "a leader change alone")
	if err := b.Publish(ctx, loc, 1, []byte("x\n"), nil); err != nil {
		t.Fatal(err)
	}
	waitWoken(t, w, "a publish after the leader change")
}

// TestWatchMemberKilled: the member under a waiter is killed — each of the
// two members its client knows in turn, so that whichever carries its
// watch stream dies once — and a publish through the third wakes it.
func TestWatchMemberKilled(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := c.Endpoints()
	b := newBackend(t, clientOf(t, eps[0], eps[1]), &etcdbackend.Options{RequestTimeout: 10 * time.Second})
	writer, err := etcdbackend.New(clientOf(t, eps[2]), b.Prefix(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := b.WatchLocs(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for round, victim := range []int{0, 1} {
		c.Kill(victim)
		c.WaitLeader()
		if err := writer.Publish(ctx, loc, uint64(round+1), fmt.Appendf(nil, "r%d\n", round), nil); err != nil {
			t.Fatal(err)
		}
		waitWoken(t, w, fmt.Sprintf("member %d killed", victim))
		c.Restart(victim)
	}
}
