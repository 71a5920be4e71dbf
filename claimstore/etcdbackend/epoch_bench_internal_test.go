package etcdbackend

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/claimstore/claimstore/internal/etcdtest"
)

// BenchmarkEpochCompare measures what the fence epoch costs a publish: the
// publishing transaction as it is (key, fence and epoch compares) against
// the same without the epoch compare (as before fence collection), on one
// embedded member (fsync on), alternating the two in every iteration so
// that both see the same machine load. It reports each one's mean and
// their ratio.
func BenchmarkEpochCompare(b *testing.B) {
	c := etcdtest.Start(b, 1)
	be, err := New(c.Client(b), etcdtest.Prefix(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := be.readEpoch(ctx); err != nil {
		b.Fatal(err)
	}
	fence := be.currentFence()
	data := []byte(fmt.Sprintf("%0300d\n", 0)) // a record's size
	with := func(i int) time.Duration {
		key := be.RevisionKey(fenceLoc, uint64(2*i+1))
		start := time.Now()
		resp, err := be.createTxn(ctx, key, data, fence, nil)
		if err != nil || !resp.Succeeded {
			b.Fatal(resp, err)
		}
		return time.Since(start)
	}
	without := func(i int) time.Duration {
		key := be.RevisionKey(fenceLoc, uint64(2*i+2))
		start := time.Now()
		resp, err := be.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(be.fenceKey(fence)), "=", 0),
		).Then(clientv3.OpPut(key, string(data))).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
		if err != nil || !resp.Succeeded {
			b.Fatal(resp, err)
		}
		return time.Since(start)
	}
	var tWith, tWithout time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			tWith += with(n)
			tWithout += without(n)
		} else {
			tWithout += without(n)
			tWith += with(n)
		}
		n++
	}
	b.ReportMetric(float64(tWith.Microseconds())/float64(n), "µs/txn-with-epoch")
	b.ReportMetric(float64(tWithout.Microseconds())/float64(n), "µs/txn-without")
	b.ReportMetric(float64(tWith)/float64(tWithout), "with/without")
}
