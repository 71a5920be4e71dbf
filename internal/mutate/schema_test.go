package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// schemaSrc exercises every operator with observable effects: results,
// errors, and the order of calls (trace).
const schemaSrc = `package p

import "errors"

var errBad = errors.New("bad")

type T struct{ Trace []string }

func (t *T) step(s string) error {
	t.Trace = append(t.Trace, s)
	if s == "fail" {
		return errBad
	}
	return nil
}

func (t *T) Run(a, b int, names []string) (int, error) {
	if a < 0 || b > 10 {
		return 0, errBad
	}
	if err := t.step("first"); err != nil {
		return 0, err
	}
	if err := t.step("second"); err != nil {
		return 0, err
	}
	many := len(names)
	if many > 100 {
		return 0, errBad
	}
	n := 0
	for i := 0; i < len(names) && n <= b; i++ {
		if names[i] == "" {
			continue
		}
		if names[i] == "stop" {
			break
		}
		t.step(names[i])
		n++
	}
	x, y := a+1, b+1
	switch {
	case a >= b:
		return n, nil
	case a == 3:
		return n + x, t.step("fail")
	}
	return n * y, nil
}
`

// TestSchemaMatchesMutants compiles the schema of schemaSrc and, in
// separate packages, every mutant of it as -schema=false would, runs both
// on a set of inputs, and checks that switching mutant k on in the schema
// behaves exactly as mutant k, and that with none on it behaves as the
// original. It also checks that the type-checker tells the stillborn.
func TestSchemaMatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	dir := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("p/p.go", schemaSrc)
	p, err := parse("p/p.go", []byte(schemaSrc), []string{"T.Run"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := newChecker(dir, []string{"./p"})
	if err != nil {
		t.Fatal(err)
	}
	num := map[*mutant]int{}
	var live []*mutant
	ops := map[string]bool{}
	for i, m := range p.mutants {
		if err := c.check(m.File, m.apply(p.src), ""); err != nil {
			continue
		}
		num[m] = i + 1
		live = append(live, m)
		ops[m.Op] = true
		write(fmt.Sprintf("m%d/p.go", i+1), string(m.apply(p.src)))
	}
	for _, op := range []string{opRemoveCall, opRemoveGuard, opNegate, opBoundary, opAndOr, opSwallow, opSwap, opBranch} {
		if !ops[op] {
			t.Errorf("the snippet has no compiling %s mutant", op)
		}
	}
	sch := schema(p, num)
	if err := c.check("p/p.go", []byte(sch), schemaHelper("p")); err != nil {
		t.Fatalf("schema does not type-check: %v\n%s", err, sch)
	}
	write("s/p.go", sch)
	write("s/helper.go", schemaHelper("p"))
	write("s/set.go", "package p\n\nfunc Set(k int) { mutateSchemaActive = k }\n")

	var imports, cases strings.Builder
	fmt.Fprintf(&imports, "\torig \"example.com/m/p\"\n\tschema \"example.com/m/s\"\n")
	fmt.Fprintf(&cases, "\tcheck(0, func(a, b int, n []string) string { t := &orig.T{}; r, err := t.Run(a, b, n); return fmt.Sprint(r, err, t.Trace) })\n")
	for _, m := range live {
		k := num[m]
		fmt.Fprintf(&imports, "\tm%d \"example.com/m/m%d\"\n", k, k)
		fmt.Fprintf(&cases, "\tcheck(%d, func(a, b int, n []string) string { t := &m%d.T{}; r, err := t.Run(a, b, n); return fmt.Sprint(r, err, t.Trace) })\n", k, k)
	}
	write("main.go", `package main

import (
	"fmt"
	"os"

`+imports.String()+`)

var inputs = []struct {
	a, b int
	n    []string
}{
	{-1, 0, nil}, {0, 11, nil}, {0, 10, nil}, {5, 5, []string{"x", "", "y"}}, {3, 4, []string{"a", "stop", "b"}},
	{1, 0, []string{"fail"}}, {2, 1, []string{"a", "b", "c"}}, {0, 2, []string{"a", "b", "c", "d"}}, {3, 3, nil},
	{4, 6, []string{"", "", "q"}}, {3, 9, []string{"fail", "x"}},
}

func check(k int, f func(a, b int, n []string) string) {
	for _, in := range inputs {
		schema.Set(k)
		got := func() (s string) {
			defer func() {
				if r := recover(); r != nil {
					s = fmt.Sprint("panic: ", r)
				}
			}()
			t := &schema.T{}
			r, err := t.Run(in.a, in.b, in.n)
			return fmt.Sprint(r, err, t.Trace)
		}()
		want := func() (s string) {
			defer func() {
				if r := recover(); r != nil {
					s = fmt.Sprint("panic: ", r)
				}
			}()
			return f(in.a, in.b, in.n)
		}()
		if got != want {
			fmt.Printf("mutant %d on %v: schema %q, mutant %q\n", k, in, got, want)
			os.Exit(1)
		}
	}
}

func main() {
`+cases.String()+`	fmt.Println("ok")
}
`)
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(live) == len(p.mutants) {
		t.Error("no stillborn mutant among the snippet's: the type check is not exercised")
	}
}
