package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// schemaRun holds, per mutated package, the test binaries built with its
// schema (one per test package judging it) and each mutant's switch.
type schemaRun struct {
	bins      map[string]map[string]string // package dir -> test package -> binary
	num       map[*mutant]int
	stillborn map[*mutant]string // why the mutant does not compile
	timeout   map[string]time.Duration
	// fixedTimeout: -timeout was given, and applies to every mutant.
	fixedTimeout bool
}

// prepareSchema type-checks every mutant in want (a stillborn one is left
// out, as is any not in want),
// writes each package's schema into an overlay, builds the test binaries,
// and runs each binary's tests with no mutant switched on: the schema must
// be transparent, or every mutant would read as killed.
func (r *runner) prepareSchema(parsedFiles []*parsed, want map[*mutant]bool, out io.Writer, fixed time.Duration) (*schemaRun, error) {
	sr := &schemaRun{bins: map[string]map[string]string{}, num: map[*mutant]int{}, stillborn: map[*mutant]string{}, timeout: map[string]time.Duration{}}
	var dirs []string
	byDir := map[string][]*parsed{}
	tests := map[string][]string{}
	for i, p := range parsedFiles {
		dir := filepath.ToSlash(filepath.Dir(targets[i].File))
		if byDir[dir] == nil {
			dirs = append(dirs, dir)
		}
		byDir[dir] = append(byDir[dir], p)
		for _, t := range targets[i].Tests {
			if !contains(tests[dir], t) {
				tests[dir] = append(tests[dir], t)
			}
		}
	}
	t0 := time.Now()
	var rel []string
	for _, d := range dirs {
		rel = append(rel, "./"+d)
	}
	c, err := newChecker(r.root, rel)
	if err != nil {
		return nil, err
	}
	nStill := 0
	for _, dir := range dirs {
		k := 0
		for _, p := range byDir[dir] {
			for _, m := range p.mutants {
				if !want[m] {
					continue // not to be run: left out
				}
				if err := c.check(m.File, m.apply(p.src), ""); err != nil {
					sr.stillborn[m] = err.Error()
					nStill++
					continue
				}
				k++
				sr.num[m] = k
			}
		}
	}
	fmt.Fprintf(out, "mutate: type-checked %d mutants in %s: %d stillborn\n", len(want), time.Since(t0).Round(100*time.Millisecond), nStill)

	for _, dir := range dirs {
		t0 := time.Now()
		replace := map[string]string{}
		sdir := filepath.Join(r.tmp, "schema-"+strings.ReplaceAll(dir, "/", "_"))
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return nil, err
		}
		pkgName := byDir[dir][0].ast.Name.Name
		for _, p := range byDir[dir] {
			file := p.file
			src := schema(p, sr.num)
			if err := c.check(file, []byte(src), schemaHelper(pkgName)); err != nil {
				return nil, fmt.Errorf("the schema of %s does not compile (a bug in internal/mutate; -schema=false runs without it): %v", file, err)
			}
			path := filepath.Join(sdir, filepath.Base(file))
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				return nil, err
			}
			replace[filepath.Join(r.root, filepath.FromSlash(file))] = path
		}
		helper := filepath.Join(sdir, "zz_mutate_schema.go")
		if err := os.WriteFile(helper, []byte(schemaHelper(pkgName)), 0o644); err != nil {
			return nil, err
		}
		replace[filepath.Join(r.root, filepath.FromSlash(dir), "zz_mutate_schema.go")] = helper
		overlay, err := writeOverlayMap(sdir, replace)
		if err != nil {
			return nil, err
		}
		sr.bins[dir] = map[string]string{}
		for _, t := range tests[dir] {
			bin := filepath.Join(sdir, strings.NewReplacer("/", "_", ".", "_").Replace(t)+".test")
			if _, err := output(r.root, "go", "test", "-c", "-vet=off", "-overlay="+overlay, "-o", bin, t); err != nil {
				return nil, err
			}
			sr.bins[dir][t] = bin
		}
		// Transparency: with no mutant on, the tests pass as they do on
		// the unmutated tree. This also times them for the timeout.
		var base time.Duration
		for _, t := range tests[dir] {
			t1 := time.Now()
			res, output := r.runBinary(context.Background(), sr.bins[dir][t], t, "", 0, 10*time.Minute)
			if res != survived {
				return nil, fmt.Errorf("with no mutant switched on, %s's tests do not pass against the schema of %s (%s):\n%s", t, dir, res, output)
			}
			base += time.Since(t1)
		}
		sr.timeout[dir], sr.fixedTimeout = fixed, fixed != 0
		if fixed == 0 {
			sr.timeout[dir] = max(time.Minute, 10*base)
		}
		fmt.Fprintf(out, "mutate: schema of ./%s built and checked in %s (its tests pass in %s with no mutant on)\n", dir, time.Since(t0).Round(100*time.Millisecond), base.Round(100*time.Millisecond))
	}
	return sr, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// schemaMutant runs m's covering tests with m switched on.
func (r *runner) schemaMutant(sr *schemaRun, m *mutant, src []byte, pkgs []string) *result {
	t0 := time.Now()
	res := &result{ID: m.ID, File: m.File, Line: m.Line, Desc: m.Desc}
	defer func() { res.Duration = time.Since(t0) }()
	if why, ok := sr.stillborn[m]; ok {
		res.Outcome, res.Detail = stillborn, why
		return res
	}
	mutated := m.apply(src)
	dir := filepath.ToSlash(filepath.Dir(m.File))
	ran := false
	for _, p := range pkgs {
		run, timeout := "", sr.timeout[dir]
		if r.cov != nil {
			names := r.cov.covering(p, m)
			if len(names) == 0 {
				continue
			}
			run = runPattern(names)
			if !sr.fixedTimeout {
				// Ten times what the selected tests took alone: a mutant
				// that loops forever (a negated loop condition) costs
				// that, not the whole suite's timeout.
				var took time.Duration
				for _, n := range names {
					took += r.cov.took[p][n]
				}
				timeout = min(timeout, max(30*time.Second, 10*took))
			}
		}
		ran = true
		out, detail := r.runBinary(context.Background(), sr.bins[dir][p], p, run, sr.num[m], timeout)
		if out != survived {
			res.Outcome, res.Detail = out, detail
			return res
		}
	}
	res.Outcome, res.Detail = survived, diff(src, mutated, 2)
	if !ran {
		res.Uncovered = true
		res.Detail = "no test executes this code\n" + res.Detail
	}
	return res
}

// runBinary runs a test binary of package pkg (module-relative) in its
// directory, as go test would, with mutant k switched on (0: none).
func (r *runner) runBinary(ctx context.Context, bin, pkg, run string, k int, timeout time.Duration) (string, string) {
	args := []string{"-test.short", "-test.count=1", "-test.failfast", "-test.timeout=" + timeout.String()}
	if run != "" {
		args = append(args, "-test.run="+run)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	cmd := command(ctx, filepath.Join(r.root, filepath.FromSlash(pkg)), bin, args...)
	cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", schemaEnv, k))
	outb, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		return survived, string(outb)
	case bytes.Contains(outb, []byte("panic: test timed out")) || ctx.Err() != nil:
		return timedOut, string(outb)
	}
	return killed, err.Error() + "\n" + string(outb)
}
