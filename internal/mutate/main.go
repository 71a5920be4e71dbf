package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	budget     time.Duration
	seed       string
	list       bool
	only       string
	equivalent string
	jobs       int
	timeout    time.Duration
	jsonOut    string
	verbose    bool
	cover      bool
	schema     bool
	report     bool
}

// outcome of one mutant.
// etcdShortEnv is etcdtest.ShortEnv (not imported: it would link an etcd
// server into this tool).
const etcdShortEnv = "CLAIMSTORE_TEST_ETCD_SHORT"

const (
	killed    = "killed"
	survived  = "survived"
	stillborn = "stillborn"
	timedOut  = "timeout" // killed by the test timeout
)

type result struct {
	ID       string        `json:"id"`
	File     string        `json:"file"`
	Line     int           `json:"line"`
	Desc     string        `json:"desc"`
	Outcome  string        `json:"outcome"`
	Listed   bool          `json:"equivalent,omitempty"` // listed in the equivalent file
	Duration time.Duration `json:"duration_ns"`
	Detail   string        `json:"detail,omitempty"` // a build error, or the diff of a survivor
	// Uncovered: no test executes the mutated code, so none ran.
	Uncovered bool `json:"uncovered,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&c.budget, "budget", 0, "start no mutant after this much time (0: run all)")
	fs.StringVar(&c.seed, "seed", "", "shuffle the mutants with this seed (empty: source order)")
	fs.BoolVar(&c.list, "list", false, "print the mutants and exit")
	fs.StringVar(&c.only, "only", "", "run only these mutant ids (comma-separated)")
	fs.StringVar(&c.equivalent, "equivalent", "internal/mutate/equivalent.txt", "the list of equivalent mutants (relative to the module root)")
	fs.IntVar(&c.jobs, "j", 2, "mutants tested in parallel")
	fs.DurationVar(&c.timeout, "timeout", 0, "go test -timeout per mutant (0: ten times the unmutated run, at least 1m)")
	fs.StringVar(&c.jsonOut, "json", "", "also write every result as JSON to this file")
	fs.BoolVar(&c.verbose, "v", false, "print the build error of stillborn mutants")
	fs.BoolVar(&c.schema, "schema", true, "build each package once with every mutant behind a switch (false: build per mutant with -overlay)")
	fs.BoolVar(&c.cover, "cover", true, "run against each mutant only the tests that execute its code (false: every test of its packages)")
	fs.BoolVar(&c.report, "report", false, "report survivors without failing on them (until the survivors of a full run are killed or judged equivalent); a stale equivalent list still fails")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || c.jobs < 1 {
		fs.Usage()
		return 2
	}
	if err := mutate(&c, stdout); err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	return 0
}

// errSurvivors fails the run after its report was printed.
var errSurvivors = errors.New("")

func mutate(c *config, out io.Writer) error {
	start := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	srcs := map[string][]byte{}
	tests := map[string][]string{}
	var all []*mutant
	var parsedFiles []*parsed
	for _, t := range targets {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(t.File)))
		if err != nil {
			return err
		}
		p, err := parse(t.File, src, t.Funcs)
		if err != nil {
			return err
		}
		srcs[t.File], tests[t.File] = src, t.Tests
		all = append(all, p.mutants...)
		parsedFiles = append(parsedFiles, p)
	}
	byID := map[string]*mutant{}
	for _, m := range all {
		byID[m.ID] = m
	}
	eqPath := filepath.FromSlash(c.equivalent)
	if !filepath.IsAbs(eqPath) {
		eqPath = filepath.Join(root, eqPath)
	}
	equiv, err := readEquivalent(eqPath)
	if err != nil {
		return err
	}
	var stale []string
	for _, e := range equiv.order {
		if byID[e] == nil {
			stale = append(stale, e)
		}
	}
	if c.list {
		for _, m := range all {
			mark := ""
			if _, ok := equiv.reason[m.ID]; ok {
				mark = "  [equivalent]"
			}
			fmt.Fprintf(out, "%s\t%s:%d\t%s%s\n", m.ID, m.File, m.Line, m.Desc, mark)
		}
		fmt.Fprintf(out, "%d mutants\n", len(all))
		return staleError(stale)
	}
	todo := all
	if c.only != "" {
		todo = nil
		for id := range strings.SplitSeq(c.only, ",") {
			m := byID[strings.TrimSpace(id)]
			if m == nil {
				return fmt.Errorf("no mutant %q (see -list)", id)
			}
			todo = append(todo, m)
		}
	} else if c.seed != "" {
		h := fnv.New64a()
		h.Write([]byte(c.seed))
		r := rand.New(rand.NewPCG(h.Sum64(), 0))
		todo = append([]*mutant(nil), all...)
		r.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	}

	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r := &runner{root: root, tmp: tmp, timeout: c.timeout}

	// The unmutated tests must pass, or every mutant would read as killed;
	// their time sets the per-mutant timeout. With a schema, taking the
	// coverage (every test, unmutated) and the schema's transparency check
	// do that instead.
	var pkgs []string
	seen := map[string]bool{}
	for _, t := range targets {
		for _, p := range t.Tests {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	fmt.Fprintf(out, "mutate: %d mutants in %d files; -j %d\n", len(all), len(targets), c.jobs)
	if !c.schema || !c.cover {
		t0 := time.Now()
		if res, output := r.test(context.Background(), "", pkgs, "", 10*time.Minute); res != survived {
			return fmt.Errorf("the unmutated tests do not pass (%s), so no mutant can be judged:\n%s", res, output)
		}
		base := time.Since(t0)
		if r.timeout == 0 {
			r.timeout = max(time.Minute, 10*base)
		}
		fmt.Fprintf(out, "mutate: unmutated tests pass in %s\n", base.Round(100*time.Millisecond))
	}
	if c.cover {
		t0 := time.Now()
		if r.cov, err = r.collectCoverage(pkgs, c.jobs); err != nil {
			return err
		}
		n := 0
		for _, tests := range r.cov.tests {
			n += len(tests)
		}
		fmt.Fprintf(out, "mutate: coverage of %d tests taken in %s\n", n, time.Since(t0).Round(100*time.Millisecond))
	}
	var sr *schemaRun
	if c.schema {
		want := map[*mutant]bool{}
		for _, m := range todo {
			want[m] = true
		}
		if sr, err = r.prepareSchema(parsedFiles, want, out, c.timeout); err != nil {
			return err
		}
	}

	results := make([]*result, len(todo))
	var mu sync.Mutex
	done := 0
	next := make(chan int)
	var wg sync.WaitGroup
	for range c.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := todo[i]
				var res *result
				if sr != nil {
					res = r.schemaMutant(sr, m, srcs[m.File], tests[m.File])
				} else {
					res = r.mutant(m, srcs[m.File], tests[m.File])
				}
				_, res.Listed = equiv.reason[m.ID]
				mu.Lock()
				results[i] = res
				done++
				mark := ""
				if res.Outcome == survived && !res.Listed {
					mark = "  <- SURVIVED"
				} else if res.Outcome == survived {
					mark = "  (equivalent)"
				}
				fmt.Fprintf(out, "[%d/%d] %-9s %s  %s%s\n", done, len(todo), res.Outcome, m.ID,
					res.Duration.Round(100*time.Millisecond), mark)
				if res.Outcome == stillborn && c.verbose {
					fmt.Fprintln(out, indent(res.Detail))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range todo {
		if c.budget > 0 && time.Since(start) >= c.budget {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()

	var ran []*result
	for _, res := range results {
		if res != nil {
			ran = append(ran, res)
		}
	}
	return report(out, c, ran, len(all), len(todo), equiv, stale, time.Since(start))
}

func report(out io.Writer, c *config, ran []*result, total, todo int, equiv *equivalents, stale []string, elapsed time.Duration) error {
	var nKilled, nTimeout, nStill, nEquiv, nSurv, nKilledListed int
	var survivors []*result
	var mutantTime time.Duration
	for _, res := range ran {
		mutantTime += res.Duration
		switch res.Outcome {
		case killed, timedOut:
			nKilled++
			if res.Outcome == timedOut {
				nTimeout++
			}
			if res.Listed {
				nKilledListed++
				fmt.Fprintf(out, "mutate: warning: %s is listed as equivalent but was killed (%s); remove it from %s\n", res.ID, res.Outcome, c.equivalent)
			}
		case stillborn:
			nStill++
		case survived:
			if res.Listed {
				nEquiv++
			} else {
				nSurv++
				survivors = append(survivors, res)
			}
		}
	}
	for _, res := range survivors {
		fmt.Fprintf(out, "\nSURVIVED %s\n  %s:%d: %s\n%s", res.ID, res.File, res.Line, res.Desc, indent(res.Detail))
	}
	judged := nKilled + nSurv
	score := 100.0
	if judged > 0 {
		score = 100 * float64(nKilled) / float64(judged)
	}
	perMutant := time.Duration(0)
	if len(ran) > 0 {
		perMutant = mutantTime / time.Duration(len(ran))
	}
	fmt.Fprintf(out, "\nmutate: score %.1f%% (%d killed of %d; %d timed out) | ran %d of %d mutants (%d selected): %d stillborn, %d equivalent, %d survived | runtime %s, %s per mutant (-j %d)\n",
		score, nKilled, judged, nTimeout, len(ran), total, todo, nStill, nEquiv, nSurv,
		elapsed.Round(time.Second), perMutant.Round(100*time.Millisecond), c.jobs)
	if c.jsonOut != "" {
		data, err := json.MarshalIndent(ran, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if err := staleError(stale); err != nil {
		return err
	}
	if nSurv > 0 && c.report {
		fmt.Fprintf(out, "mutate: %d mutants survived that %s does not list (reported, not failing: -report)\n", nSurv, c.equivalent)
		return nil
	}
	if nSurv > 0 {
		return fmt.Errorf("%d mutants survived that %s does not list: strengthen the tests, or list them with the reason they are equivalent", nSurv, c.equivalent)
	}
	return nil
}

func staleError(stale []string) error {
	if len(stale) == 0 {
		return nil
	}
	return fmt.Errorf("the equivalent list names mutants that no longer exist (the code changed; re-judge and remove them): %s", strings.Join(stale, ", "))
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

// equivalents is the parsed equivalent file.
type equivalents struct {
	reason map[string]string
	order  []string
}

// readEquivalent parses lines "ID  reason"; blank lines and lines starting
// with # are comments. Every entry needs a reason: an unexplained entry is
// an unreviewable one.
func readEquivalent(path string) (*equivalents, error) {
	e := &equivalents{reason: map[string]string{}}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, why, _ := strings.Cut(line, " ")
		if strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("%s:%d: %s has no reason", path, n, id)
		}
		if _, dup := e.reason[id]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", path, n, id)
		}
		e.reason[id] = strings.TrimSpace(why)
		e.order = append(e.order, id)
	}
	return e, sc.Err()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// runner builds and tests mutants through go's -overlay, so the tree is
// never copied or modified.
type runner struct {
	root    string
	tmp     string
	timeout time.Duration
	cov     *coverage // nil: every mutant runs all its packages' tests
	seq     int
	mu      sync.Mutex
}

func (r *runner) mutant(m *mutant, src []byte, pkgs []string) *result {
	t0 := time.Now()
	res := &result{ID: m.ID, File: m.File, Line: m.Line, Desc: m.Desc}
	defer func() { res.Duration = time.Since(t0) }()
	mutated := m.apply(src)
	run := ""
	if r.cov != nil {
		var names, covered []string
		for _, p := range pkgs {
			if n := r.cov.covering(p, m); len(n) > 0 {
				names, covered = append(names, n...), append(covered, p)
			}
		}
		if len(names) == 0 {
			res.Outcome, res.Detail = survived, "no test executes this code\n"+diff(src, mutated, 2)
			res.Uncovered = true
			return res
		}
		slices.Sort(names)
		pkgs, run = covered, runPattern(slices.Compact(names))
	}

	r.mu.Lock()
	r.seq++
	dir := filepath.Join(r.tmp, fmt.Sprint(r.seq))
	r.mu.Unlock()
	overlay, err := writeOverlay(dir, filepath.Join(r.root, filepath.FromSlash(m.File)), mutated)
	if err != nil {
		res.Outcome, res.Detail = stillborn, err.Error()
		return res
	}
	defer os.RemoveAll(dir)

	// Building the mutated package alone first tells a mutant that does
	// not compile (stillborn) from one the tests kill.
	build := command(context.Background(), r.root, "go", "build", "-overlay="+overlay, "./"+filepath.ToSlash(filepath.Dir(m.File)))
	if output, err := build.CombinedOutput(); err != nil {
		res.Outcome, res.Detail = stillborn, string(output)
		return res
	}
	res.Outcome, res.Detail = r.test(context.Background(), overlay, pkgs, run, r.timeout)
	if res.Outcome == survived {
		res.Detail = diff(src, mutated, 2)
	}
	return res
}

// test runs the packages' tests, with the overlay if one is given, and
// tells how they ended: survived (passed), killed (failed), timedOut (the
// test timeout fired: a mutant that hangs is caught), or stillborn (a test
// package did not build).
func (r *runner) test(ctx context.Context, overlay string, pkgs []string, run string, timeout time.Duration) (string, string) {
	args := []string{"test", "-short", "-count=1", "-failfast", "-vet=off", "-timeout=" + timeout.String()}
	if run != "" {
		args = append(args, "-run="+run)
	}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	args = append(args, pkgs...)
	// go test's own timeout panics the test binary; this one is a
	// backstop for a hung build or a child the binary left behind.
	ctx, cancel := context.WithTimeout(ctx, timeout+2*time.Minute)
	defer cancel()
	cmd := command(ctx, r.root, "go", args...)
	output, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		return survived, string(output)
	case bytes.Contains(output, []byte("[build failed]")) || bytes.Contains(output, []byte("[setup failed]")):
		return stillborn, string(output)
	case bytes.Contains(output, []byte("panic: test timed out")) || ctx.Err() != nil:
		return timedOut, string(output)
	}
	return killed, string(output)
}

// command runs in the module root with CI unset: with CI set, a test that
// cannot find systemd or Node.js fails instead of skipping, and a missing
// component would then read as a killed mutant. A test that skips does
// not kill. The tests on a real etcd cluster, which skip under -short,
// run (etcdtest.ShortEnv): some of the core's mutants are reached only
// through a backend without the directory backend's capabilities.
func command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, etcdShortEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, etcdShortEnv+"=run")
	killGroup(cmd)
	return cmd
}

// writeOverlay writes the mutated source into dir and a go -overlay file
// mapping path to it, returning the overlay file's path.
func writeOverlay(dir, path string, src []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(file, src, 0o644); err != nil {
		return "", err
	}
	return writeOverlayMap(dir, map[string]string{path: file})
}

// writeOverlayMap writes a go -overlay file into dir replacing each key
// (a path in the tree, existing or not) by its value.
func writeOverlayMap(dir string, replace map[string]string) (string, error) {
	data, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, data, 0o644)
}
