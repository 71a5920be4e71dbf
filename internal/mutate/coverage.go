package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// A block is a covered range of a source file.
type block struct{ from, to lineCol }

// coverage says, per test package and test, which blocks of the target
// files the test executed: a mutant is tested only by the tests that run
// the code it changed. A mutant no test runs survives without a build.
type coverage struct {
	// tests[pkg][file] lists, for each test of pkg, the blocks of file
	// (slash path relative to the module root) it ran.
	tests map[string]map[string]map[string][]block
	// took[pkg][test] is how long the test ran alone (with coverage, so
	// a little longer than without): the base of a mutant's timeout.
	took map[string]map[string]time.Duration
}

// collectCoverage runs every test of every package in pkgs once, alone,
// with a coverage profile of the target packages. It costs about one
// unmutated run of the suites, plus a process start per test.
func (r *runner) collectCoverage(pkgs []string, jobs int) (*coverage, error) {
	modPath, err := output(r.root, "go", "list", "-m")
	if err != nil {
		return nil, err
	}
	var coverPkgs []string
	for _, t := range targets {
		p := "./" + filepath.ToSlash(filepath.Dir(t.File))
		if !slices.Contains(coverPkgs, p) {
			coverPkgs = append(coverPkgs, p)
		}
	}
	cov := &coverage{tests: map[string]map[string]map[string][]block{}, took: map[string]map[string]time.Duration{}}
	for _, pkg := range pkgs {
		bin := filepath.Join(r.tmp, "cover-"+strings.NewReplacer("/", "_", ".", "_").Replace(pkg)+".test")
		if _, err := output(r.root, "go", "test", "-c", "-vet=off", "-cover", "-covermode=set",
			"-coverpkg="+strings.Join(coverPkgs, ","), "-o", bin, pkg); err != nil {
			return nil, err
		}
		dir := filepath.Join(r.root, filepath.FromSlash(pkg))
		list, err := output(dir, bin, "-test.list", ".")
		if err != nil {
			return nil, err
		}
		var names []string
		for _, name := range strings.Fields(list) {
			// go test -short runs tests, examples and fuzz seeds;
			// benchmarks only on request.
			if !strings.HasPrefix(name, "Benchmark") {
				names = append(names, name)
			}
		}
		perTest := map[string]map[string][]block{}
		took := map[string]time.Duration{}
		var mu sync.Mutex
		var firstErr error
		next := make(chan string)
		var wg sync.WaitGroup
		for range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for name := range next {
					prof := bin + "." + name + ".cover"
					t0 := time.Now()
					_, err := output(dir, bin, "-test.run", "^"+regexp.QuoteMeta(name)+"$",
						"-test.short", "-test.count=1", "-test.timeout=10m", "-test.coverprofile="+prof)
					var blocks map[string][]block
					if err == nil {
						blocks, err = readProfile(prof, modPath+"/")
					}
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("coverage of %s %s: %w", pkg, name, err)
					}
					perTest[name] = blocks
					took[name] = time.Since(t0)
					mu.Unlock()
				}
			}()
		}
		for _, name := range names {
			next <- name
		}
		close(next)
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
		cov.tests[pkg] = perTest
		cov.took[pkg] = took
	}
	return cov, nil
}

// covering returns the tests of pkg that ran any part of m, sorted.
func (c *coverage) covering(pkg string, m *mutant) []string {
	var names []string
	for name, files := range c.tests[pkg] {
		for _, b := range files[m.File] {
			if b.from.before(m.to) && m.from.before(b.to) {
				names = append(names, name)
				break
			}
		}
	}
	slices.Sort(names)
	return names
}

// readProfile parses a coverage profile ("mode: set", then
// "path/file.go:l1.c1,l2.c2 stmts count" lines), keeping the executed
// blocks of files under prefix (the module path and a slash).
func readProfile(path, prefix string) (map[string][]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]block{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 || fields[2] == "0" {
			continue
		}
		file, rng, ok := strings.Cut(fields[0], ":")
		rel, under := strings.CutPrefix(file, prefix)
		if !ok || !under {
			continue
		}
		var b block
		if _, err := fmt.Sscanf(rng, "%d.%d,%d.%d", &b.from.line, &b.from.col, &b.to.line, &b.to.col); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		out[rel] = append(out[rel], b)
	}
	return out, sc.Err()
}

// output runs a command in dir (CI unset, as for every test run here) and
// returns its standard output; a failure carries its combined output.
func output(dir, name string, args ...string) (string, error) {
	cmd := command(context.Background(), dir, name, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// runPattern is a go test -run pattern selecting exactly names.
func runPattern(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}
