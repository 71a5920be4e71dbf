//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "classify":
		err = classifyCmd(os.Args[2:])
	case "race":
		err = raceCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchproc:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchproc classify -claimctl BIN -gen ROOT -pairs N -rounds R -work DIR\n       benchproc race -claimctl BIN -racers N -rounds R -work DIR")
	os.Exit(2)
}

func classifyCmd(args []string) error {
	fl := flag.NewFlagSet("classify", flag.ExitOnError)
	bin := fl.String("claimctl", "", "the claimctl binary")
	gen := fl.String("gen", "", "the generated root (rootgen -active N), copied for every run")
	pairs := fl.Int("pairs", 0, "the pairs in it")
	rounds := fl.Int("rounds", 3, "rounds")
	work := fl.String("work", "", "a scratch directory on the same filesystem as -gen")
	cold := fl.Bool("cold", false, "drop the page cache (echo 3 >/proc/sys/vm/drop_caches, root only; slows every other process) before each run")
	_ = fl.Parse(args)
	if *bin == "" || *gen == "" || *pairs < 1 || *rounds < 1 || *work == "" {
		fl.Usage()
		os.Exit(2)
	}
	// Every copy is made before the first measurement and removed after the
	// last: on an ext4 without a journal (this project's machine) a new
	// inode skips every inode freed in the last 60 s (360 s while its
	// inode table block is dirty), at a cost linear in their number, so a
	// root removed between rounds would slow the next round's creates by
	// the benchmark's own doing.
	classifyRoots := make([]string, *rounds)
	floorRoots := make([]string, *rounds)
	for r := range *rounds {
		classifyRoots[r] = filepath.Join(*work, fmt.Sprintf("classify%d", r))
		floorRoots[r] = filepath.Join(*work, fmt.Sprintf("floor%d", r))
		for _, root := range []string{classifyRoots[r], floorRoots[r]} {
			if err := copyRoot(*gen, root); err != nil {
				return err
			}
		}
	}
	defer func() {
		for r := range *rounds {
			os.RemoveAll(classifyRoots[r])
			os.RemoveAll(floorRoots[r])
		}
	}()
	syscall.Sync()
	start := loadNow()
	var walk, floor []float64 // ns per pair
	var rss []int64           // KiB
	for r := range *rounds {
		runs := []func() error{
			func() error {
				if err := settle(*cold); err != nil {
					return err
				}
				d, maxRSS, out, err := runMeasured(exec.Command(*bin, "classify", "--all", "--root", classifyRoots[r]))
				if err != nil {
					return fmt.Errorf("claimctl classify --all: %v\n%s", err, out)
				}
				stopped, err := parseStopped(out)
				if err != nil || stopped != *pairs {
					return fmt.Errorf("claimctl classify --all stopped %d pairs (%v), want %d:\n%s", stopped, err, *pairs, out)
				}
				walk = append(walk, float64(d.Nanoseconds())/float64(*pairs))
				rss = append(rss, maxRSS)
				return nil
			},
			func() error {
				if err := settle(*cold); err != nil {
					return err
				}
				d, n, err := fsyncFloor(floorRoots[r])
				if err != nil {
					return err
				}
				if n != *pairs {
					return fmt.Errorf("the floor found %d pairs in %s, want %d", n, floorRoots[r], *pairs)
				}
				floor = append(floor, float64(d.Nanoseconds())/float64(n))
				return nil
			},
		}
		for i := range runs {
			if err := runs[(i+r)%len(runs)](); err != nil {
				return err
			}
		}
		fmt.Printf("  round %d: classify --all %.3f ms/pair (max RSS %.1f MiB), floor %.3f ms/pair\n", r+1, walk[r]/1e6, float64(rss[r])/1024, floor[r]/1e6)
	}
	end := loadNow()
	w, f := median(walk), median(floor)
	fmt.Printf("classify --all of %d pairs, whole process: %.3f ms/pair; serial fsync floor (3 x file + directory fsync per pair, same directories): %.3f ms/pair; classify/floor %.2f; max RSS %.1f MiB (median of %d rounds)\n",
		*pairs, w/1e6, f/1e6, w/f, float64(medianInt(rss))/1024, *rounds)
	fmt.Printf("load average at start %s, at end %s\n", start, end)
	return nil
}

func raceCmd(args []string) error {
	fl := flag.NewFlagSet("race", flag.ExitOnError)
	bin := fl.String("claimctl", "", "the claimctl binary")
	racers := fl.Int("racers", 16, "processes per round")
	rounds := fl.Int("rounds", 30, "rounds")
	work := fl.String("work", "", "a scratch directory")
	_ = fl.Parse(args)
	if *bin == "" || *racers < 2 || *rounds < 1 || *work == "" {
		fl.Usage()
		os.Exit(2)
	}
	// The race's roots are removed after the last round, not between
	// rounds (see classifyCmd: freed inodes slow the creates that follow).
	var roots []string
	defer func() {
		for _, root := range roots {
			os.RemoveAll(root)
		}
	}()
	start := loadNow()
	var race, version []float64
	won := 0
	for r := range *rounds {
		runs := []func() error{
			func() error {
				root := filepath.Join(*work, fmt.Sprintf("race%d", r))
				roots = append(roots, root)
				cmds := make([]*exec.Cmd, *racers)
				for i := range cmds {
					cmds[i] = exec.Command(*bin, "acquire", "--root", root, "--seat", "s", "--project", "p", "--workspace", "/w", "--session", "x", "--owner-pid", "parent")
				}
				if err := settle(false); err != nil {
					return err
				}
				d, codes := startAll(cmds)
				if err := oneWinner(codes); err != nil {
					return fmt.Errorf("round %d: %v", r+1, err)
				}
				won++
				race = append(race, float64(d.Nanoseconds()))
				return nil
			},
			func() error {
				cmds := make([]*exec.Cmd, *racers)
				for i := range cmds {
					cmds[i] = exec.Command(*bin, "version")
				}
				if err := settle(false); err != nil {
					return err
				}
				d, codes := startAll(cmds)
				for _, c := range codes {
					if c != 0 {
						return fmt.Errorf("round %d: claimctl version exited %d", r+1, c)
					}
				}
				version = append(version, float64(d.Nanoseconds()))
				return nil
			},
		}
		for i := range runs {
			if err := runs[(i+r)%len(runs)](); err != nil {
				return err
			}
		}
	}
	end := loadNow()
	a, v := median(race), median(version)
	fmt.Printf("%d claimctl acquire racing on one pair: %.1f ms; %d claimctl version started the same way: %.1f ms; race/version %.2f (medians of %d rounds; exactly one winner in %d of %d)\n",
		*racers, a/1e6, *racers, v/1e6, a/v, *rounds, won, *rounds)
	fmt.Printf("load average at start %s, at end %s\n", start, end)
	return nil
}

// oneWinner checks a race's exit codes: exactly one 0, every other 3
// (already-active).
func oneWinner(codes []int) error {
	won := 0
	for _, c := range codes {
		switch c {
		case 0:
			won++
		case 3:
		default:
			return fmt.Errorf("a racer exited %d, want 0 (won) or 3 (already-active): %v", c, codes)
		}
	}
	if won != 1 {
		return fmt.Errorf("%d racers won, want exactly 1: %v", won, codes)
	}
	return nil
}

// startAll starts every command at once and returns how long until the
// last exited, and their exit codes (-1: not started or killed).
func startAll(cmds []*exec.Cmd) (time.Duration, []int) {
	codes := make([]int, len(cmds))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, c := range cmds {
		wg.Go(func() {
			err := c.Run()
			var ee *exec.ExitError
			switch {
			case err == nil:
				codes[i] = 0
			case errors.As(err, &ee):
				codes[i] = ee.ExitCode()
			default:
				codes[i] = -1
			}
		})
	}
	wg.Wait()
	return time.Since(t0), codes
}

// runMeasured runs cmd and returns its wall time, its maximum resident set
// (KiB, from wait4's rusage) and its combined output.
func runMeasured(cmd *exec.Cmd) (time.Duration, int64, []byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	var maxRSS int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxRSS = ru.Maxrss
	}
	return d, maxRSS, out.Bytes(), err
}

// copyRoot copies gen to root (cp -a).
func copyRoot(gen, root string) error {
	if out, err := exec.Command("cp", "-a", gen, root).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s %s: %v\n%s", gen, root, err, out)
	}
	return nil
}

// settle writes back whatever the machine holds dirty, so that no earlier
// write (a copy, the previous run's files) is flushed inside what is
// measured next; cold also drops the page cache.
func settle(cold bool) error {
	syscall.Sync()
	if cold {
		return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	}
	return nil
}

// recordSize is about the size of a revision or a boot proof.
const recordSize = 800

// fsyncFloor is the serial floor of classify --all on root: for every
// pair (the n-th seat and the n-th session directory: rootgen's pairs are
// one seat and one session each, so the counts agree), three times create
// a file, write a record's size, fsync it, close it and fsync its directory:
// in root/proofs, in the seat's key directory and in the session's, as the
// boot proof and the two stopped revisions are. Raw system calls, one after
// the other. It returns the time and the pairs.
func fsyncFloor(root string) (time.Duration, int, error) {
	seats, err := keyDirs(filepath.Join(root, "seat"))
	if err != nil {
		return 0, 0, err
	}
	sessions, err := keyDirs(filepath.Join(root, "session"))
	if err != nil {
		return 0, 0, err
	}
	if len(seats) != len(sessions) {
		return 0, 0, fmt.Errorf("%s: %d seats and %d sessions: not a root of pairs", root, len(seats), len(sessions))
	}
	proofs := filepath.Join(root, "proofs")
	if err := os.Mkdir(proofs, 0o700); err != nil {
		return 0, 0, err
	}
	buf := bytes.Repeat([]byte("x"), recordSize)
	t0 := time.Now()
	for i := range seats {
		for _, dir := range []string{proofs, seats[i], sessions[i]} {
			if err := durableFile(dir, fmt.Sprintf("floor-%08d", i), buf); err != nil {
				return 0, 0, err
			}
		}
	}
	return time.Since(t0), len(seats), nil
}

func keyDirs(kind string) ([]string, error) {
	ents, err := os.ReadDir(kind)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(kind, e.Name()))
	}
	return out, nil
}

// durableFile creates dir/name with data and makes it durable as a
// publish does: the file's fsync, then its directory's.
func durableFile(dir, name string, data []byte) error {
	p := filepath.Join(dir, name)
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o400)
	if err != nil {
		return &os.PathError{Op: "create", Path: p, Err: err}
	}
	if _, err := syscall.Write(fd, data); err != nil {
		syscall.Close(fd)
		return &os.PathError{Op: "write", Path: p, Err: err}
	}
	if err := syscall.Fsync(fd); err != nil {
		syscall.Close(fd)
		return &os.PathError{Op: "fsync", Path: p, Err: err}
	}
	syscall.Close(fd)
	dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(dfd)
	if err := syscall.Fsync(dfd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// parseStopped reads the summary table claimctl classify --all prints
// and returns its "stopped with proof" count.
func parseStopped(out []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "stopped with proof")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("no count in %q", sc.Text())
		}
		return strconv.Atoi(f[0])
	}
	return 0, errors.New(`no "stopped with proof" line in the summary`)
}

// loadNow is /proc/loadavg's three averages, or why not.
func loadNow() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	l, err := parseLoadavg(string(b))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return l
}

// parseLoadavg returns the 1-, 5- and 15-minute load averages of a
// /proc/loadavg line, space-separated.
func parseLoadavg(s string) (string, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "", fmt.Errorf("malformed /proc/loadavg %q", s)
	}
	for _, x := range f[:3] {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			return "", fmt.Errorf("malformed /proc/loadavg %q", s)
		}
	}
	return strings.Join(f[:3], " "), nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianInt(xs []int64) int64 {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return int64(median(f))
}
