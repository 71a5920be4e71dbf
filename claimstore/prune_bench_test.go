//go:build linux

package claimstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPruneAfterWalk is prune's rate once it has walked the root,
// the measure of docs/BENCHMARKS.md's "Retention" sections, taken inside
// the process: a whole-process figure is the prune less a dry run of
// another process, and on this project's two processors that difference
// carries both runs' noise. A root of finished sessions is written once by
// internal/rootgen (the files real lifecycles leave) and copied for each
// iteration, made durable (and left five seconds to settle) before the
// clock starts; Prune's progress marks
// the end of its walk. It reports the keys removed a second from there to
// Prune's return (everything after the walk: the decisions, the heads read
// again, the archive, tombstones, compactions, removals and the last
// sweep), the processor time the process spent in that part (user and
// system: on two processors the steadier of the two figures, since this
// part is bound by system calls), and the walk's own time.
//
// CLAIMSTORE_BENCH_PRUNE=SESSIONS,SEATS,PER_DAY,WINDOW_DAYS sizes it
// (default 20000,20,2000,7: about 6,000 sessions removed); TMPDIR chooses
// the filesystem. Each iteration takes seconds:
//
//	TMPDIR=/mnt/ext4 go test ./claimstore -run '^$' -bench PruneAfterWalk -benchtime 5x
func BenchmarkPruneAfterWalk(b *testing.B) {
	size := []int{20000, 20, 2000, 7}
	if v := os.Getenv("CLAIMSTORE_BENCH_PRUNE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d,%d,%d", &size[0], &size[1], &size[2], &size[3]); err != nil {
			b.Fatalf("CLAIMSTORE_BENCH_PRUNE=%q: want SESSIONS,SEATS,PER_DAY,WINDOW_DAYS: %v", v, err)
		}
	}
	dir := b.TempDir()
	tmpl := filepath.Join(dir, "generated")
	gen := exec.Command("go", "run", "../internal/rootgen", "-root", tmpl,
		"-sessions", strconv.Itoa(size[0]), "-seats", strconv.Itoa(size[1]), "-per-day", strconv.Itoa(size[2]))
	if out, err := gen.CombinedOutput(); err != nil {
		b.Fatalf("generating the root: %v\n%s", err, out)
	}
	ctx := context.Background()
	var walk, after, cpu time.Duration
	removed := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		root := filepath.Join(dir, fmt.Sprint("root-", i))
		if out, err := exec.Command("cp", "-a", tmpl, root).CombinedOutput(); err != nil {
			b.Fatalf("copying the root: %v\n%s", err, out)
		}
		if out, err := exec.Command("sync").CombinedOutput(); err != nil {
			b.Fatalf("sync: %v\n%s", err, out)
		}
		// The copy's writeback (a loop-mounted image's, into the
		// filesystem under it) settles before the clock starts.
		time.Sleep(5 * time.Second)
		s := openStore(b, root, &TOpts{Now: time.Now})
		var walked time.Time
		var walkedCPU time.Duration
		opts := &PruneOptions{OlderThan: time.Duration(size[3]) * 24 * time.Hour, Progress: func(phase string, done, total int) {
			if phase == "read" && done == total {
				walked, walkedCPU = time.Now(), processCPU(b)
			}
		}}
		b.StartTimer()
		start := time.Now()
		rep, err := s.Prune(ctx, opts)
		end, endCPU := time.Now(), processCPU(b)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if walked.IsZero() || rep.Removed == 0 {
			b.Fatalf("the walk's end was not reported, or nothing was removed (%+v)", rep)
		}
		walk += walked.Sub(start)
		after += end.Sub(walked)
		cpu += endCPU - walkedCPU
		removed += rep.Removed
		if err := os.RemoveAll(root); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(removed)/after.Seconds(), "keys/s-after-walk")
	b.ReportMetric(after.Seconds()/float64(b.N), "s-after-walk")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s-after-walk")
	b.ReportMetric(walk.Seconds()/float64(b.N), "s-walk")
	b.ReportMetric(float64(removed)/float64(b.N), "removed")
}

// processCPU is the processor time (user and system) this process has
// used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
