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

// TestLostReplyGuardedDelete cuts the connection of a prune's guarded
// removal (If(Value(rN) == head ∧ CreateRevision(rN+1) == 0) Then
// DeleteRange) at every point of its transaction — before the request
// reaches the server, after it with the reply dropped, and held until after
// the client gave up — with and without a rival that publishes rN+1 over
// the same head (PrepareOver, as an acquirer does) while the removal is
// lost or held. Whatever the cut: exactly one of the two takes effect, at
// once and once every request in flight has landed; RemoveKey's answer
// says which (nil: removed; ErrHeadMoved: the rival's revision stands);
// and without a rival a removal whose reply was lost is still reported as
// the removal it was, not as a moved head.
func TestLostReplyGuardedDelete(t *testing.T) {
	c := etcdtest.Start(t, 1)
	direct := c.Client(t)
	for _, cut := range []etcdtest.Cut{etcdtest.CutBeforeRequest, etcdtest.CutAfterRequest, etcdtest.CutHoldRequest} {
		for _, rival := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/rival=%v", cut, rival), func(t *testing.T) {
				ctx := context.Background()
				p, b, other := proxied(t, c, direct)
				const n = 3
				head := []byte("free head\n")
				for i := uint64(1); i <= n; i++ {
					data := fmt.Appendf(nil, "rec %d\n", i)
					if i == n {
						data = head
					}
					if err := other.Publish(ctx, loc, i, data, nil); err != nil {
						t.Fatal(err)
					}
				}
				// Warm the proxied connection so that the next bytes the
				// client sends are the removal's transaction.
				if got, _, err := b.Head(ctx, loc); got != n || err != nil {
					t.Fatalf("Head through the proxy = %d, %v", got, err)
				}
				theirs := []byte("the rival's acquire\n")
				rivalErr := make(chan error, 1)
				publishOver := func() error {
					pr, err := other.PrepareOver(ctx, loc, n+1, theirs, head, nil)
					if err != nil {
						return err
					}
					defer pr.Abort()
					return pr.Commit(ctx)
				}
				fired := p.Arm(cut)
				if rival {
					go func() {
						<-fired
						if cut == etcdtest.CutAfterRequest {
							// Give the forwarded removal time to apply:
							// the rival then comes after it.
							time.Sleep(200 * time.Millisecond)
						}
						rivalErr <- publishOver()
					}()
				}
				err := b.RemoveKey(ctx, loc, n, head)
				select {
				case <-fired:
				case <-time.After(5 * time.Second):
					t.Fatalf("the proxy never cut (RemoveKey returned %v)", err)
				}
				var rerr error
				if rival {
					rerr = <-rivalErr
				}
				check := func(when string) {
					t.Helper()
					top, _, herr := other.Head(ctx, loc)
					if herr != nil {
						t.Fatalf("%s: Head: %v", when, herr)
					}
					removed := top == 0
					published := top == n+1
					if !removed && !published && !(top == n && err != nil) {
						t.Fatalf("%s: head is revision %d (RemoveKey: %v, rival: %v)", when, top, err, rerr)
					}
					if removed && published {
						t.Fatalf("%s: both the removal and the rival's revision took effect", when)
					}
					if rival && (rerr == nil) != published {
						t.Errorf("%s: the rival's publish returned %v, head revision %d", when, rerr, top)
					}
					switch {
					case err == nil && !removed:
						t.Errorf("%s: RemoveKey said removed, head is revision %d", when, top)
					case errors.Is(err, storage.ErrHeadMoved) && !published:
						t.Errorf("%s: RemoveKey said the head moved (%v), head is revision %d", when, err, top)
					case err != nil && !errors.Is(err, storage.ErrHeadMoved):
						t.Errorf("%s: RemoveKey: %v", when, err)
					}
				}
				check("at once")
				time.Sleep(p.Hold + time.Second)
				check("after the held request landed")
				if !rival && err != nil {
					t.Errorf("no rival: the removal must be decided as done, got %v", err)
				}
				t.Logf("%v, rival %v: RemoveKey returned %v, the rival %v", cut, rival, err, rerr)
			})
		}
	}
}

// proxied returns a proxy in front of c's first member, a backend that
// reaches the cluster through it (requests bounded at 500 ms, a lost reply
// resolved for up to 20 s) and one on the same prefix over direct, for
// the tests that cut a request's connection and check what the cluster
// holds.
func proxied(t *testing.T, c *etcdtest.Cluster, direct *clientv3.Client) (p *etcdtest.Proxy, b, other *etcdbackend.Backend) {
	t.Helper()
	p = etcdtest.NewProxy(t, c.Members[0].ClientURL.Host)
	p.Hold = 1500 * time.Millisecond
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	prefix := etcdtest.Prefix(t)
	b, err = etcdbackend.New(cli, prefix, &etcdbackend.Options{RequestTimeout: 500 * time.Millisecond, ResolveTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	other, err = etcdbackend.New(direct, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, b, other
}
