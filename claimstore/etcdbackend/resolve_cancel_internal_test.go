package etcdbackend

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/claimstore/claimstore/claimstore/storage"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// TestResolveLostCancelled: a supervisor told to stop stops waiting on a
// lost reply's resolution. The read-back is held in the network (the proxy
// holds it far longer than the test waits) under a 30 s resolve deadline;
// cancelling the context returns at once, with the publish undecided (an
// *IndeterminateError, never a guess either way), and the resolution does
// nothing more: no fence is put, so the lost request is left to the next
// read of the key to decide, as after a crash.
func TestResolveLostCancelled(t *testing.T) {
	c := etcdtest.Start(t, 1)
	direct := c.Client(t)
	p := etcdtest.NewProxy(t, c.Members[0].ClientURL.Host)
	p.Hold = 8 * time.Second
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	b, err := New(cli, etcdtest.Prefix(t), &Options{RequestTimeout: 5 * time.Second, ResolveTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loc := storage.Loc{Kind: storage.KindSeat, Hash: "0123456789abcdef0123456789abcdef"}
	// Warm the connection, so that the next bytes the client sends are the
	// read-back.
	if _, _, err := b.Head(context.Background(), loc); err != nil {
		t.Fatal(err)
	}
	key, data, fence := b.RevisionKey(loc, 1), []byte("lost\n"), b.currentFence()
	ctx, cancel := context.WithCancel(context.Background())
	held := p.Arm(etcdtest.CutHoldRequest)
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	published, err := b.resolveLost(ctx, key, data, fence, errors.New("reply lost"))
	took := time.Since(start)
	var ind *IndeterminateError
	if published || !errors.As(err, &ind) || !errors.Is(ind.Last, context.Canceled) {
		t.Fatalf("resolveLost cancelled = %v, %v; want undecided (an *IndeterminateError whose last error is the cancellation)", published, err)
	}
	if took > 2*time.Second {
		t.Errorf("resolveLost returned %v after it was cancelled at 300ms; want at once, not after a request timeout (5s) or the resolve deadline (30s)", took)
	}
	if b.currentFence() != fence {
		t.Error("the fence was replaced: a cancelled resolution put it")
	}
	// Let the held read-back land, then look at the cluster directly.
	select {
	case <-held:
	case <-time.After(p.Hold + 5*time.Second):
		t.Fatal("the proxy never forwarded the held request")
	}
	for _, k := range []string{b.fenceKey(fence), key} {
		resp, err := direct.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 0 {
			t.Errorf("%s exists after a cancelled resolution", k)
		}
	}
}
