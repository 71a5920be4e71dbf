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
// process exited), against one claimctl acquire of a free pair, the two
// alternating in every iteration. Exactly one racer must win every round.
// It reports race-ns, one-ns and race/one. Most of a racer's time is
// process start-up on two cores: compare one-ns with BenchmarkStartup.
func BenchmarkRacingAcquires(b *testing.B) {
	bin := buildClaimctl(b)
	base := b.TempDir()
	acquire := func(root string, i int) *exec.Cmd {
		return exec.Command(bin, "acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--json")
	}
	var tRace, tOne time.Duration
	round := 0
	for b.Loop() {
		round++
		runs := []func(){
			func() {
				root := filepath.Join(base, fmt.Sprint("race", round))
				cmds := make([]*exec.Cmd, 16)
				for i := range cmds {
					cmds[i] = acquire(root, i)
				}
				errs := make([]error, len(cmds))
				var wg sync.WaitGroup
				t0 := time.Now()
				for i, c := range cmds {
					wg.Add(1)
					go func() { defer wg.Done(); errs[i] = c.Run() }()
				}
				wg.Wait()
				tRace += time.Since(t0)
				won := 0
				for _, err := range errs {
					if err == nil {
						won++
					}
				}
				if won != 1 {
					b.Fatalf("round %d: %d racers acquired the pair, want exactly 1", round, won)
				}
			},
			func() {
				root := filepath.Join(base, fmt.Sprint("one", round))
				t0 := time.Now()
				if out, err := acquire(root, 0).CombinedOutput(); err != nil {
					b.Fatalf("one acquire: %v\n%s", err, out)
				}
				tOne += time.Since(t0)
			},
		}
		if round%2 == 0 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, r := range runs {
			r()
		}
	}
	b.ReportMetric(float64(tRace.Nanoseconds())/float64(round), "race-ns")
	b.ReportMetric(float64(tOne.Nanoseconds())/float64(round), "one-ns")
	b.ReportMetric(float64(tRace)/float64(tOne), "race/one")
}

// BenchmarkStartup measures claimctl's start-up (claimctl version) against
// a minimal Go program's (which only exits), alternating.
func BenchmarkStartup(b *testing.B) {
	bin := buildClaimctl(b)
	dir := b.TempDir()
	minimal := filepath.Join(dir, "minimal")
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", minimal, src).CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	var tClaimctl, tMinimal time.Duration
	i := 0
	for b.Loop() {
		i++
		for _, claimctl := range []bool{i%2 == 0, i%2 != 0} {
			cmd := exec.Command(minimal)
			if claimctl {
				cmd = exec.Command(bin, "version")
			}
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			if claimctl {
				tClaimctl += time.Since(t0)
			} else {
				tMinimal += time.Since(t0)
			}
		}
	}
	b.ReportMetric(float64(tClaimctl.Nanoseconds())/float64(i), "claimctl-ns")
	b.ReportMetric(float64(tMinimal.Nanoseconds())/float64(i), "minimal-ns")
	b.ReportMetric(float64(tClaimctl)/float64(tMinimal), "claimctl/minimal")
}

// buildClaimctl builds the real claimctl binary (not the test binary).
func buildClaimctl(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "claimctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/claimctl").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
