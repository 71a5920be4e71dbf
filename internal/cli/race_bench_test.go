package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkRacingAcquires starts 16 claimctl processes that acquire the
// same pair at once, and measures how long the race takes to settle (every
// process exited), against one claimctl acquire of a free pair and against
// the floor of any Go claimctl: 16 programs that only exit, started and
// waited for the same way. The three rotate in every iteration. Exactly one
// racer must win every round. It reports race-ns, one-ns, floor-ns,
// race/one, floor/one (what race/one cannot go below on this machine while
// claimctl is a Go program) and race/floor.
func BenchmarkRacingAcquires(b *testing.B) {
	bin := buildClaimctl(b)
	minimal := buildMinimal(b)
	base := b.TempDir()
	acquire := func(root string) *exec.Cmd {
		return exec.Command(bin, "acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--owner-pid", "parent", "--json")
	}
	// all starts every command at once and returns how long until all
	// exited, and how many exited 0.
	all := func(cmds []*exec.Cmd) (time.Duration, int) {
		errs := make([]error, len(cmds))
		var wg sync.WaitGroup
		t0 := time.Now()
		for i, c := range cmds {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = c.Run() }()
		}
		wg.Wait()
		d := time.Since(t0)
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			}
		}
		return d, ok
	}
	var tRace, tOne, tFloor time.Duration
	round := 0
	for b.Loop() {
		round++
		runs := []func(){
			func() {
				root := filepath.Join(base, fmt.Sprint("race", round))
				cmds := make([]*exec.Cmd, 16)
				for i := range cmds {
					cmds[i] = acquire(root)
				}
				d, won := all(cmds)
				tRace += d
				if won != 1 {
					b.Fatalf("round %d: %d racers acquired the pair, want exactly 1", round, won)
				}
			},
			func() {
				root := filepath.Join(base, fmt.Sprint("one", round))
				t0 := time.Now()
				if out, err := acquire(root).CombinedOutput(); err != nil {
					b.Fatalf("one acquire: %v\n%s", err, out)
				}
				tOne += time.Since(t0)
			},
			func() {
				cmds := make([]*exec.Cmd, 16)
				for i := range cmds {
					cmds[i] = exec.Command(minimal)
				}
				d, ok := all(cmds)
				tFloor += d
				if ok != len(cmds) {
					b.Fatalf("round %d: %d of %d minimal programs failed", round, len(cmds)-ok, len(cmds))
				}
			},
		}
		for i := range runs {
			runs[(i+round)%len(runs)]()
		}
	}
	b.ReportMetric(float64(tRace.Nanoseconds())/float64(round), "race-ns")
	b.ReportMetric(float64(tOne.Nanoseconds())/float64(round), "one-ns")
	b.ReportMetric(float64(tFloor.Nanoseconds())/float64(round), "floor-ns")
	b.ReportMetric(float64(tRace)/float64(tOne), "race/one")
	b.ReportMetric(float64(tFloor)/float64(tOne), "floor/one")
	b.ReportMetric(float64(tRace)/float64(tFloor), "race/floor")
}

// BenchmarkStartup measures claimctl's start-up (claimctl version) against
// a minimal Go program's (which only exits) and claimctl-etcd's, rotating.
// It reports claimctl/minimal and etcd/claimctl (what linking the etcd
// client would cost every start of claimctl).
func BenchmarkStartup(b *testing.B) {
	bin := buildClaimctl(b)
	etcdBin := filepath.Join(b.TempDir(), "claimctl-etcd")
	if out, err := exec.Command("go", "build", "-o", etcdBin, "../../cmd/claimctl-etcd").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	minimal := buildMinimal(b)
	cmds := []func() *exec.Cmd{
		func() *exec.Cmd { return exec.Command(bin, "version") },
		func() *exec.Cmd { return exec.Command(minimal) },
		func() *exec.Cmd { return exec.Command(etcdBin, "version") },
	}
	var t [3]time.Duration
	i := 0
	for b.Loop() {
		i++
		for k := range cmds {
			k = (k + i) % len(cmds)
			cmd := cmds[k]()
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			t[k] += time.Since(t0)
		}
	}
	b.ReportMetric(float64(t[0].Nanoseconds())/float64(i), "claimctl-ns")
	b.ReportMetric(float64(t[1].Nanoseconds())/float64(i), "minimal-ns")
	b.ReportMetric(float64(t[2].Nanoseconds())/float64(i), "etcd-ns")
	b.ReportMetric(float64(t[0])/float64(t[1]), "claimctl/minimal")
	b.ReportMetric(float64(t[2])/float64(t[0]), "etcd/claimctl")
}

// buildMinimal builds a Go program that only exits.
func buildMinimal(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	minimal := filepath.Join(dir, "minimal")
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", minimal, src).CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return minimal
}

// buildClaimctl builds the real claimctl binary (not the test binary), or
// returns $CLAIMCTL_BENCH_BIN when it is set: a claimctl built another way
// (CGO_ENABLED=0) or from another commit, to compare in the same run's
// conditions.
func buildClaimctl(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("CLAIMCTL_BENCH_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "claimctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/claimctl").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
