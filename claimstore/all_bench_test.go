package claimstore

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/claimstore/claimstore/claimstore/vfs"
	"github.com/claimstore/claimstore/hostid/hostidtest"
)

// noSyncFS is the OS filesystem with every fsync skipped, to build big
// roots quickly as benchmark setup. Never used where durability is tested.
type noSyncFS struct{ vfs.OSFS }

func (noSyncFS) SyncDir(string) error { return nil }

// SyncDirs skips the fsyncs too: the OS's, promoted, would make them.
func (noSyncFS) SyncDirs(names []string) []error { return make([]error, len(names)) }

func (f noSyncFS) CreateTemp(dir string, perm fs.FileMode) (vfs.TempFile, error) {
	t, err := f.OSFS.CreateTemp(dir, perm)
	return noSyncTemp{t}, err
}

type noSyncTemp struct{ vfs.TempFile }

func (noSyncTemp) Sync() error { return nil }

// buildRoot writes pairs active claims, each with a spawn marker, under
// bootA, as a root left by a machine that lost power.
func buildRoot(b *testing.B, pairs int) string {
	b.Helper()
	root := filepath.Join(b.TempDir(), "root")
	s, err := OpenRoot(root, &TOpts{FS: noSyncFS{}, Host: &hostidtest.Host{Machine: testMachine, Boot: bootA, Procs: map[int]string{4100: "500"}}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range pairs {
		seat, _ := SeatKey(fmt.Sprintf("seat-%d", i), "proj", "/ws")
		session, _ := SessionKey(fmt.Sprintf("sess-%d", i))
		c, err := s.Acquire(context.Background(), seat, session, AcquireFields{Owner: Owner{PID: 4100, Start: "500", Boot: bootA}})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Advance(context.Background(), c, Patch{State: Active, Fields: map[string]any{"spawnMarker": true}}); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkClassifyAllAfterReboot classifies every pair of a root after a
// simulated reboot: each pair costs a boot proof and a stopped revision on
// both keys, three (file, directory) fsync pairs. After each walk it
// measures, on the same filesystem, the serial floor of those three fsync
// pairs (floorPairs), and reports ns/pair, floor-ns/pair and their ratio,
// walk/floor: below 1 means independent pairs overlap.
func BenchmarkClassifyAllAfterReboot(b *testing.B) {
	for _, pairs := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("pairs=%d", pairs), func(b *testing.B) {
			if testing.Short() && pairs > 1000 {
				b.Skip("-short: the 10,000-pair root takes a while to build")
			}
			if pairs > 10000 && !*benchBig {
				b.Skip("the 100,000-pair root takes minutes to build: run with -bench.big")
			}
			var floor time.Duration
			var peak, live uint64
			for range b.N {
				b.StopTimer()
				root := buildRoot(b, pairs)
				s, err := OpenRoot(root, &TOpts{Host: &hostidtest.Host{Machine: testMachine, Boot: bootB, Procs: map[int]string{}}})
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				stopPeak := peakHeap(&peak, &live)
				b.StartTimer()
				sum, err := s.ClassifyAll(context.Background(), nil, nil)
				stopPeak()
				if err != nil {
					b.Fatal(err)
				}
				if sum.Pairs != pairs || sum.Stopped != pairs {
					b.Fatalf("classified %d pairs, %d stopped; want %d of each (%+v)", sum.Pairs, sum.Stopped, pairs, sum)
				}
				b.StopTimer()
				floor += floorPairs(b, filepath.Dir(root), 200)
				b.StartTimer()
			}
			perPair := float64(b.Elapsed().Nanoseconds()) / float64(b.N*pairs)
			b.ReportMetric(perPair, "ns/pair")
			b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N*200), "floor-ns/pair")
			b.ReportMetric(perPair/(float64(floor.Nanoseconds())/float64(b.N*200)), "walk/floor")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(live)/(1<<20), "peak-live-MiB")
			b.ReportMetric(float64(live)/float64(pairs), "live-B/pair")
		})
	}
}

var benchBig = flag.Bool("bench.big", false, "run the benchmarks' largest sizes (100,000 pairs)")

// peakHeap samples the heap every few milliseconds until the returned stop
// is called: into *peak the highest heap seen (live objects and garbage not
// yet collected, which GOGC lets grow to about twice the live heap), into
// *live the highest live heap the garbage collector marked, which is what
// the walk retains.
func peakHeap(peak, live *uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > *peak {
				*peak = v
			}
			if v := sample[1].Value.Uint64(); v > *live {
				*live = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// floorPairs measures n times the serial floor of one classified pair on
// the filesystem of dir: three times (create a file, write a record-sized
// buffer, fsync it, fsync its directory), one after the other.
func floorPairs(b *testing.B, dir string, n int) time.Duration {
	b.Helper()
	d, err := os.MkdirTemp(dir, "floor")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 700)
	t0 := time.Now()
	for i := range n {
		for j := range 3 {
			f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("f%d-%d", i, j)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
			if err := vfs.OS.SyncDir(d); err != nil {
				b.Fatal(err)
			}
		}
	}
	return time.Since(t0)
}

// BenchmarkFsyncPairs is the raw cost of n times: create a file, write a
// record-sized buffer, fsync it, fsync its directory.
func BenchmarkFsyncPairs(b *testing.B) {
	for _, n := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			buf := make([]byte, 700)
			for i := range b.N {
				for j := range n {
					f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%d-%d", i, j)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := f.Write(buf); err != nil {
						b.Fatal(err)
					}
					if err := f.Sync(); err != nil {
						b.Fatal(err)
					}
					f.Close()
					d, err := os.Open(dir)
					if err != nil {
						b.Fatal(err)
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
					d.Close()
				}
			}
		})
	}
}
