package claimstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
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

// BenchmarkAcquireEtcdLongSeat is acquire on etcd, by a store opened for
// it as a new process opens one, on a seat whose history holds what a
// compacted seat keeps after a 7-day retention at 2,000 sessions a day over
// 20 seats (2,800 revisions), against the same acquire on a fresh seat,
// alternating; it reports each one's mean and their ratio (long/fresh), the
// measure of issue 22's "acquire on a compacted seat within 1.5× of a
// fresh seat's". CLAIMSTORE_BENCH_SEAT_REVISIONS sizes the history.
func BenchmarkAcquireEtcdLongSeat(b *testing.B) {
	revs := 2800
	if v := os.Getenv("CLAIMSTORE_BENCH_SEAT_REVISIONS"); v != "" {
		var err error
		if revs, err = strconv.Atoi(v); err != nil || revs < 2 {
			b.Fatalf("CLAIMSTORE_BENCH_SEAT_REVISIONS=%q: want a number of revisions, at least 2", v)
		}
	}
	c := etcdtest.Start(b, 1)
	prefix := etcdtest.Prefix(b)
	open := func() *Store {
		eb, err := etcdbackend.New(c.Client(b), prefix, nil)
		if err != nil {
			b.Fatal(err)
		}
		return openStore(b, "etcd://"+c.Hosts()[0]+eb.Prefix(), &TOpts{Backend: eb})
	}
	s := open()
	f := fields(b, s)
	ctx := context.Background()
	long := seatKey(b, "long")
	for i := range revs / 2 {
		cl, err := s.Acquire(ctx, long, sessionKey(b, fmt.Sprint("history-", i)), f)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, cl, NewProof(ProofCohort, "bench")); err != nil {
			b.Fatal(err)
		}
	}
	acquire := func(seat Key, session string) time.Duration {
		fresh := open()
		start := time.Now()
		cl, err := fresh.Acquire(ctx, seat, sessionKey(b, session), f)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := fresh.Release(ctx, cl, NewProof(ProofCohort, "bench")); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var tLong, tFresh time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			tLong += acquire(long, fmt.Sprint("l", n))
			tFresh += acquire(seatKey(b, fmt.Sprint("fresh-", n)), fmt.Sprint("f", n))
		} else {
			tFresh += acquire(seatKey(b, fmt.Sprint("fresh-", n)), fmt.Sprint("f", n))
			tLong += acquire(long, fmt.Sprint("l", n))
		}
		n++
	}
	b.ReportMetric(float64(tLong.Microseconds())/float64(n), "µs/long-seat")
	b.ReportMetric(float64(tFresh.Microseconds())/float64(n), "µs/fresh-seat")
	b.ReportMetric(float64(tLong)/float64(tFresh), "long/fresh")
}
