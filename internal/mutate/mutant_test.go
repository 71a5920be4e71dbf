package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const snippetSrc = `package p

type T struct{ n int }

func (t *T) publish(a, b func() error, n int) error {
	if err := a(); err != nil {
		return err
	}
	if err := b(); err != nil {
		return err
	}
	for i := 0; i < n && t.n >= 0; i++ {
		if i == 3 {
			continue
		}
		t.sync()
	}
	return nil
}

func (t *T) sync() {}

func other(x int) bool { return x > 1 }
`

// mutantsOf generates the mutants of funcs in src, failing the test on error.
func mutantsOf(t *testing.T, src string, funcs ...string) []*mutant {
	t.Helper()
	ms, err := generate("p/p.go", []byte(src), funcs)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// find returns the mutant "file:func:op:k": the k-th site of op in func.
func find(t *testing.T, ms []*mutant, id string) *mutant {
	t.Helper()
	parts := strings.Split(id, ":")
	k, _ := strconv.Atoi(parts[3])
	for _, m := range ms {
		if m.File == parts[0] && m.Func == parts[1] && m.Op == parts[2] && m.K == k {
			return m
		}
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	t.Fatalf("no mutant %s among:\n%s", id, strings.Join(ids, "\n"))
	return nil
}

// TestOperators checks the source each operator produces: the line(s) of
// the original that change, and what they become.
func TestOperators(t *testing.T) {
	ms := mutantsOf(t, snippetSrc, "T.publish")
	for _, tc := range []struct {
		id       string
		old, new string
	}{
		{"p/p.go:T.publish:remove-guard:1", "\tif err := a(); err != nil {\n\t\treturn err\n\t}\n", "\t\n"},
		{"p/p.go:T.publish:remove-guard:2", "\tif err := b(); err != nil {\n\t\treturn err\n\t}\n", "\t\n"},
		{"p/p.go:T.publish:remove-call:1", "\t\tt.sync()\n", "\t\t\n"},
		{"p/p.go:T.publish:boundary:1", "err != nil {\n\t\treturn err\n\t}\n\tif err := b()", "err == nil {\n\t\treturn err\n\t}\n\tif err := b()"},
		{"p/p.go:T.publish:boundary:3", "i < n", "i <= n"},
		{"p/p.go:T.publish:boundary:4", "t.n >= 0", "t.n > 0"},
		{"p/p.go:T.publish:boundary:5", "i == 3", "i != 3"},
		{"p/p.go:T.publish:and-or:1", "n && t.n", "n || t.n"},
		{"p/p.go:T.publish:negate:1", "i < n && t.n >= 0;", "!(i < n && t.n >= 0);"},
		{"p/p.go:T.publish:swallow-error:1", "if err := a(); err != nil {\n\t\treturn err", "if err := a(); err != nil {\n\t\treturn nil"},
		{"p/p.go:T.publish:branch:1", "continue", "break"},
		{
			"p/p.go:T.publish:swap:1",
			"\tif err := a(); err != nil {\n\t\treturn err\n\t}\n\tif err := b(); err != nil {\n\t\treturn err\n\t}\n",
			"\tif err := b(); err != nil {\n\t\treturn err\n\t}\n\tif err := a(); err != nil {\n\t\treturn err\n\t}\n",
		},
	} {
		t.Run(tc.id, func(t *testing.T) {
			m := find(t, ms, tc.id)
			got := string(m.apply([]byte(snippetSrc)))
			want := strings.Replace(snippetSrc, tc.old, tc.new, 1)
			if want == snippetSrc {
				t.Fatalf("test case: %q not in the snippet", tc.old)
			}
			if got != want {
				t.Errorf("%s (%s):\n%s", m.ID, m.Desc, diff([]byte(want), []byte(got), 1))
			}
		})
	}
	// `i == 3` is flipped by boundary; negating it too would only repeat
	// that mutant.
	for _, m := range ms {
		if m.Op == opNegate && strings.Contains(m.Desc, "i == 3") {
			t.Errorf("%s duplicates a boundary mutant", m.ID)
		}
	}
	// return nil swallows nothing; the last statement's return is not mutated.
	if n := count(ms, opSwallow); n != 2 {
		t.Errorf("%d swallow-error mutants, want 2", n)
	}
}

func count(ms []*mutant, op string) int {
	n := 0
	for _, m := range ms {
		if m.Op == op {
			n++
		}
	}
	return n
}

// TestOnlyTargets checks that only the named functions are mutated.
func TestOnlyTargets(t *testing.T) {
	for _, m := range mutantsOf(t, snippetSrc, "other") {
		if m.Func != "other" {
			t.Errorf("%s outside the target", m.ID)
		}
	}
	if _, err := generate("p/p.go", []byte(snippetSrc), []string{"T.publish", "T.gone"}); err == nil || !strings.Contains(err.Error(), "T.gone") {
		t.Errorf("a missing target: err = %v, want it named", err)
	}
}

// TestIDsStable checks that a mutant's id survives what refactoring does
// around it: code added above the function or elsewhere in the file, the
// function moved to another file of its package, statements added to the
// function before the mutated one, and re-indentation. Only its line moves.
func TestIDsStable(t *testing.T) {
	before := mutantsOf(t, snippetSrc, "T.publish")
	ids := func(ms []*mutant) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	edited := strings.Replace(snippetSrc, "type T struct{ n int }", "// A comment.\ntype T struct{ n int }\n\nfunc helper(a, b int) bool { return a < b && b > 0 }\n", 1)
	edited = strings.Replace(edited, "return x > 1", "return x >= 1 || x == 0", 1)
	after := mutantsOf(t, edited, "T.publish")
	if !slices.Equal(ids(before), ids(after)) {
		t.Errorf("ids changed by an edit outside the function:\nbefore %v\nafter  %v", ids(before), ids(after))
	}
	if before[0].Line == after[0].Line {
		t.Errorf("line did not move; the edit is not above the function")
	}
	moved, err := generate("p/other.go", []byte(snippetSrc), []string{"T.publish"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(before), ids(moved)) {
		t.Errorf("ids changed by a move to another file:\nbefore %v\nafter  %v", ids(before), ids(moved))
	}
	// A new first statement in the function: every earlier mutant keeps
	// its id (the new statement adds mutants of its own).
	grown := strings.Replace(snippetSrc, "func (t *T) publish(", "func (t *T) publish0() {}\n\nfunc (t *T) publish(", 1)
	grown = strings.Replace(grown, "\tif err := a(); err != nil {", "\tif err := t.check(); err != nil {\n\t\treturn err\n\t}\n\tif err := a(); err != nil {", 1)
	if grown == snippetSrc {
		t.Fatal("test case: the snippet has no `if err := a()`")
	}
	have := map[string]bool{}
	for _, id := range ids(mutantsOf(t, grown, "T.publish")) {
		have[id] = true
	}
	for _, id := range ids(before) {
		if !have[id] {
			t.Errorf("%s is gone after a statement was added at the top of the function", id)
		}
	}
	// Re-indented (the body wrapped in a block): the same ids.
	wrapped := strings.Replace(snippetSrc, "func (t *T) publish(", "func (t *T) publish0() {}\n\nfunc (t *T) publish(", 1)
	if got := mutantsOf(t, wrapped, "T.publish"); !slices.Equal(ids(before), ids(got)) {
		t.Errorf("ids changed by a function added before it:\nbefore %v\nafter  %v", ids(before), ids(got))
	}
	// The same source gives the same mutants in the same order.
	if again := mutantsOf(t, snippetSrc, "T.publish"); !slices.Equal(ids(before), ids(again)) {
		t.Error("generation is not deterministic")
	}
	for _, id := range ids(before) {
		if !strings.HasPrefix(id, "p.T.publish:") {
			t.Errorf("id %s is not package-qualified", id)
		}
	}
}

// TestMutantsCompileShape checks that every mutant of the snippet still
// parses: operators replace whole tokens, expressions or statements.
func TestMutantsParse(t *testing.T) {
	for _, m := range mutantsOf(t, snippetSrc, "T.publish", "other") {
		if _, err := generate("p/p.go", m.apply([]byte(snippetSrc)), nil); err != nil {
			t.Errorf("%s: %v", m.ID, err)
		}
	}
}

// TestNoMutexMutants checks that lock calls are neither removed nor moved.
func TestNoMutexMutants(t *testing.T) {
	src := "package p\n\nimport \"sync\"\n\nvar mu sync.Mutex\nvar x int\n\nfunc f() {\n\tmu.Lock()\n\tx = 1\n\tmu.Unlock()\n}\n"
	for _, m := range mutantsOf(t, src, "f") {
		t.Errorf("unexpected mutant %s: %s", m.ID, m.Desc)
	}
}

// TestAnchor checks that a case expression is anchored to its whole
// switch, since coverage blocks never hold case expressions.
func TestAnchor(t *testing.T) {
	src := "package p\n\nfunc f(a, b int) int {\n\tswitch {\n\tcase a < b:\n\t\treturn 1\n\t}\n\treturn 0\n}\n"
	m := find(t, mutantsOf(t, src, "f"), "p/p.go:f:boundary:1")
	if m.from != (lineCol{4, 2}) || m.to != (lineCol{7, 3}) {
		t.Errorf("anchor %v-%v, want the switch 4.2-7.3", m.from, m.to)
	}
}

func TestCovering(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "c.out")
	data := "mode: set\n" +
		"example.com/m/p/p.go:4.10,6.3 2 1\n" +
		"example.com/m/p/p.go:7.1,8.2 1 0\n" +
		"example.com/m/q/q.go:1.1,2.2 1 1\n"
	if err := os.WriteFile(prof, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := readProfile(prof, "example.com/m/")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks["p/p.go"]) != 1 || len(blocks["q/q.go"]) != 1 {
		t.Fatalf("blocks = %v; want the executed block of each file", blocks)
	}
	c := &coverage{tests: map[string]map[string]map[string][]block{"./p": {"TestA": blocks, "TestB": nil}}}
	in := &mutant{File: "p/p.go", from: lineCol{5, 1}, to: lineCol{5, 9}}
	out := &mutant{File: "p/p.go", from: lineCol{7, 1}, to: lineCol{8, 2}}
	if got := c.covering("./p", in); !slices.Equal(got, []string{"TestA"}) {
		t.Errorf("covering(in) = %v, want [TestA]", got)
	}
	if got := c.covering("./p", out); len(got) != 0 {
		t.Errorf("covering(unexecuted) = %v, want none", got)
	}
	if got := runPattern([]string{"TestA", "TestB"}); got != "^(TestA|TestB)$" {
		t.Errorf("runPattern = %q", got)
	}
}

func TestReadEquivalent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "eq.txt")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# comment\n\na:f:negate:1  redundant: b checks it too\n")
	e, err := readEquivalent(path)
	if err != nil || e.reason["a:f:negate:1"] != "redundant: b checks it too" {
		t.Errorf("readEquivalent = %v, %v", e, err)
	}
	write("a:f:negate:1\n")
	if _, err := readEquivalent(path); err == nil {
		t.Error("an entry without a reason was accepted")
	}
	write("a:f:negate:1 x\na:f:negate:1 y\n")
	if _, err := readEquivalent(path); err == nil {
		t.Error("a duplicate entry was accepted")
	}
	if e, err := readEquivalent(filepath.Join(dir, "none")); err != nil || len(e.order) != 0 {
		t.Errorf("a missing file: %v, %v; want an empty list", e, err)
	}
}

// TestTargetsExist checks that every target function is in the tree: a
// rename must update targets.go, not silently drop mutants.
func TestTargetsExist(t *testing.T) {
	for _, tg := range targets {
		src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(tg.File)))
		if err != nil {
			t.Fatal(err)
		}
		ms, err := generate(tg.File, src, tg.Funcs)
		if err != nil {
			t.Error(err)
			continue
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m.ID] {
				t.Errorf("duplicate id %s", m.ID)
			}
			seen[m.ID] = true
		}
	}
}

func TestEquivalentListCurrent(t *testing.T) {
	e, err := readEquivalent("equivalent.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, tg := range targets {
		src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(tg.File)))
		if err != nil {
			t.Fatal(err)
		}
		ms, err := generate(tg.File, src, tg.Funcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			ids[m.ID] = true
		}
	}
	for _, id := range e.order {
		if !ids[id] {
			t.Errorf("equivalent.txt names %s, which no longer exists", id)
		}
	}
}
