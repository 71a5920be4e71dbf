package claimstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/etcdbackend"
	"github.com/claimstore/claimstore/internal/etcdtest"
)

// BenchmarkLifecycleEtcdVsDir measures one lifecycle (acquire, advance to
// active, advance to stopping, release: 8 revisions on fresh keys) on the
// directory backend and on a single-member etcd (embedded, fsync on, its
// data in the test's temporary directory, on the same disk), alternating
// the two in every iteration so that both see the same machine load. It
// reports each one's mean and their ratio (etcd/dir).
func BenchmarkLifecycleEtcdVsDir(b *testing.B) {
	dir := openStore(b, newRoot(b), nil)
	c := etcdtest.Start(b, 1)
	eb, err := etcdbackend.New(c.Client(b), etcdtest.Prefix(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	etcd := openStore(b, "etcd://"+c.Hosts()[0]+eb.Prefix(), &TOpts{Backend: eb})
	f := fields(b, dir)
	lifecycle := func(s *Store, i int) time.Duration {
		start := time.Now()
		seat, session := seatKey(b, fmt.Sprint("s", i)), sessionKey(b, fmt.Sprint("x", i))
		cl, err := s.Acquire(context.Background(), seat, session, f)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Advance(context.Background(), cl, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			b.Fatal(err)
		}
		if err := s.Advance(context.Background(), cl, Patch{State: Stopping}); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(context.Background(), cl, NewProof(ProofCohort, "bench")); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	lifecycle(dir, -1) // warm: the root and kind directories exist
	lifecycle(etcd, -1)
	var tDir, tEtcd time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			tDir += lifecycle(dir, n)
			tEtcd += lifecycle(etcd, n)
		} else {
			tEtcd += lifecycle(etcd, n)
			tDir += lifecycle(dir, n)
		}
		n++
	}
	b.ReportMetric(float64(tDir.Microseconds())/float64(n), "µs/dir-lifecycle")
	b.ReportMetric(float64(tEtcd.Microseconds())/float64(n), "µs/etcd-lifecycle")
	b.ReportMetric(float64(tEtcd)/float64(tDir), "etcd/dir")
}
