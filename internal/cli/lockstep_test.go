package cli

import (
	"bytes"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/claimstore/claimstore/claimstore"
)

// TestLockstep keeps the exit codes, the refusal codes and the JSON field
// names in lockstep between the code, REFERENCE.md and `claimctl help`. It
// fails in both directions: something documented but not implemented, or
// implemented but not documented.
func TestLockstep(t *testing.T) {
	ref, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(ref)

	// The code's own tables.
	codeExits := map[string]string{} // code -> name
	for _, x := range exitCodes {
		codeExits[strconv.Itoa(int(x.Code))] = x.Name
	}
	codeRefusals := map[string]string{} // refusal code -> exit
	for _, c := range claimstore.Codes {
		x, ok := refusalExit[c]
		if !ok {
			t.Errorf("refusal code %s has no exit code in refusalExit", c)
		}
		if refusalDocs[c] == "" {
			t.Errorf("refusal code %s has no description in refusalDocs", c)
		}
		if codeExits[strconv.Itoa(int(x))] != string(c) {
			t.Errorf("refusal code %s exits %d, which the exit code table names %q", c, x, codeExits[strconv.Itoa(int(x))])
		}
		codeRefusals[string(c)] = strconv.Itoa(int(x))
	}
	if len(refusalExit) != len(claimstore.Codes) || len(refusalDocs) != len(claimstore.Codes) {
		t.Errorf("refusalExit (%d) and refusalDocs (%d) must cover exactly claimstore.Codes (%d)", len(refusalExit), len(refusalDocs), len(claimstore.Codes))
	}

	// Every exitCode constant declared in the package is in the table, and
	// every table entry is a declared constant.
	if diff := cmp.Diff(declaredExitCodes(t), keys(codeExits)); diff != "" {
		t.Errorf("exitCode constants (-) vs the exitCodes table (+):\n%s", diff)
	}

	codeFields := codeJSONFields(t)

	// README.md names every exit code (and no other) and links the
	// reference.
	t.Run("README.md", func(t *testing.T) {
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(readme)), " ")
		if !strings.Contains(text, "(cmd/claimctl/REFERENCE.md)") {
			t.Error("README.md does not link cmd/claimctl/REFERENCE.md")
		}
		m := regexp.MustCompile(`\(exit codes: ([^)]*)\)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatal("README.md has no \"(exit codes: …)\" summary")
		}
		exits := map[string]string{}
		for _, pair := range strings.Split(m[1], ",") {
			f := strings.Fields(pair)
			if len(f) != 2 {
				t.Fatalf("README.md exit code summary: %q is not \"N name\"", pair)
			}
			exits[f[0]] = f[1]
		}
		if diff := cmp.Diff(codeExits, exits); diff != "" {
			t.Errorf("exit codes: code (-) vs README.md (+):\n%s", diff)
		}
		doc := string(readme)
		table := tableRows(section(doc, "### Exit codes"), `^\| (\d+) \| `+"`"+`([a-z-]+)`+"`"+` \|`)
		if diff := cmp.Diff(codeExits, table); diff != "" {
			t.Errorf("exit code table: code (-) vs README.md (+):\n%s", diff)
		}
		refusals := tableRows(section(doc, "### Refusal codes"), `^\| `+"`"+`([a-z-]+)`+"`"+` \| (\d+) \|`)
		if diff := cmp.Diff(codeRefusals, refusals); diff != "" {
			t.Errorf("refusal codes: code (-) vs README.md (+):\n%s", diff)
		}
		fields := map[string][]string{}
		item := regexp.MustCompile("^- `(\\w+)`: (.*)$")
		name := regexp.MustCompile("`(\\w+)`")
		for _, line := range strings.Split(section(doc, "### JSON field names"), "\n") {
			if m := item.FindStringSubmatch(line); m != nil {
				fields[m[1]] = []string{}
				for _, f := range name.FindAllStringSubmatch(m[2], -1) {
					fields[m[1]] = append(fields[m[1]], f[1])
				}
			}
		}
		if diff := cmp.Diff(codeFields, sortAll(fields)); diff != "" {
			t.Errorf("JSON fields: code (-) vs README.md (+):\n%s", diff)
		}
	})

	// REFERENCE.md.
	t.Run("REFERENCE.md", func(t *testing.T) {
		exits := tableRows(section(doc, "## Exit codes"), `^\| (\d+) \| `+"`"+`([a-z-]+)`+"`"+` \|`)
		if diff := cmp.Diff(codeExits, exits); diff != "" {
			t.Errorf("exit codes: code (-) vs REFERENCE.md (+):\n%s", diff)
		}
		refusals := tableRows(section(doc, "## Refusal codes"), `^\| `+"`"+`([a-z-]+)`+"`"+` \| (\d+) \|`)
		if diff := cmp.Diff(codeRefusals, refusals); diff != "" {
			t.Errorf("refusal codes: code (-) vs REFERENCE.md (+):\n%s", diff)
		}
		docTypes := jsonSections(section(doc, "## JSON"))
		if diff := cmp.Diff(codeFields, docTypes); diff != "" {
			t.Errorf("JSON fields: code (-) vs REFERENCE.md (+):\n%s", diff)
		}
	})

	// `claimctl help`, `claimctl help exit-codes`, `claimctl help json`.
	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"help"}, {"help", "exit-codes"}} {
			out := runForTest(t, args...)
			exits := tableRows(block(out, "Exit codes:"), `^  (\d+) +([a-z-]+) `)
			if diff := cmp.Diff(codeExits, exits); diff != "" {
				t.Errorf("claimctl %s: exit codes: code (-) vs help (+):\n%s", strings.Join(args, " "), diff)
			}
			refusals := tableRows(block(out, "Refusal codes:"), `^  ([a-z-]+) +exit (\d+) `)
			if diff := cmp.Diff(codeRefusals, refusals); diff != "" {
				t.Errorf("claimctl %s: refusal codes: code (-) vs help (+):\n%s", strings.Join(args, " "), diff)
			}
		}
		out := runForTest(t, "help", "json")
		got := map[string][]string{}
		var cur string
		for _, line := range strings.Split(out, "\n") {
			if m := regexp.MustCompile(`^(\w+) — `).FindStringSubmatch(line); m != nil {
				cur = m[1]
				got[cur] = []string{}
				continue
			}
			if m := regexp.MustCompile(`^  (\w+)  `).FindStringSubmatch(line); m != nil && cur != "" {
				got[cur] = append(got[cur], m[1])
			}
		}
		if diff := cmp.Diff(codeFields, sortAll(got)); diff != "" {
			t.Errorf("claimctl help json: code (-) vs help (+):\n%s", diff)
		}
	})
}

// codeJSONFields returns, for every documented JSON type, the json names of
// its struct's fields, after checking that the code's descriptions cover
// exactly those fields and that every JSON struct of the package is
// documented.
func codeJSONFields(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	structs := map[string]bool{}
	for _, jt := range jsonTypes {
		fields := jsonFields(jt.Value)
		described := []string{}
		for f, d := range jt.Fields {
			described = append(described, f)
			if d == "" {
				t.Errorf("JSON type %s: field %s has an empty description", jt.Name, f)
			}
		}
		if diff := cmp.Diff(sorted(fields), sorted(described)); diff != "" {
			t.Errorf("JSON type %s: struct fields (-) vs described fields (+):\n%s", jt.Name, diff)
		}
		out[jt.Name] = sorted(fields)
		structs[typeName(jt.Value)] = true
	}
	// Every struct type with json tags declared in the package is one of
	// the documented types.
	for name := range taggedStructs(t) {
		if !structs[name] {
			t.Errorf("struct %s has json tags but is not in jsonTypes: document it", name)
		}
	}
	return out
}

func typeName(v any) string { return reflect.TypeOf(v).Name() }

// declaredExitCodes parses the package's source for constants of type
// exitCode and returns their values.
func declaredExitCodes(t *testing.T) []string {
	var vals []string
	for _, f := range parsePackage(t) {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "exitCode" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok {
						t.Errorf("exitCode constant with a non-literal value at %v", v.Pos())
						continue
					}
					vals = append(vals, constant.MakeFromLiteral(lit.Value, lit.Kind, 0).ExactString())
				}
			}
		}
	}
	return sorted(vals)
}

// taggedStructs returns the package's struct types that have json tags.
func taggedStructs(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, f := range parsePackage(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				if fl.Tag != nil && strings.Contains(fl.Tag.Value, `json:"`) {
					out[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	return out
}

func parsePackage(t *testing.T) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// section returns the text of a Markdown section, up to the next heading of
// the same level.
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading)+2:]
	level := strings.SplitN(heading, " ", 2)[0] + " "
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// block returns the lines after a title line up to the next blank line.
func block(out, title string) string {
	i := strings.Index(out, title+"\n")
	if i < 0 {
		return ""
	}
	rest := out[i+len(title)+1:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// tableRows collects the first two groups of every line matching re.
func tableRows(text, re string) map[string]string {
	rx := regexp.MustCompile(re)
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if m := rx.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[2]
		}
	}
	return out
}

// jsonSections reads "### `name`" subsections and their "| `field` |" rows.
func jsonSections(text string) map[string][]string {
	out := map[string][]string{}
	head := regexp.MustCompile("^### `(\\w+)`$")
	row := regexp.MustCompile("^\\| `(\\w+)` \\|")
	var cur string
	for _, line := range strings.Split(text, "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			cur = m[1]
			out[cur] = []string{}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil && cur != "" {
			out[cur] = append(out[cur], m[1])
		}
	}
	return sortAll(out)
}

func runForTest(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(testOptions, args, nil, &stdout, &stderr, func(string) string { return "" }, false); code != exitOK {
		t.Fatalf("claimctl %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func sortAll(m map[string][]string) map[string][]string {
	for k, v := range m {
		m[k] = sorted(v)
	}
	return m
}

// The help's and README's word on which commands take --json is the
// command table's: "Every command but help, completion and run takes
// --json" names exactly the commands defined without it.
func TestJSONExceptionsSaidTruly(t *testing.T) {
	var want []string
	for _, c := range commands {
		if c.noJSON {
			want = append(want, c.name)
		}
	}
	sort.Strings(want)
	said := func(where, text, prefix string) {
		t.Helper()
		i := strings.Index(text, prefix)
		if i < 0 {
			t.Fatalf("%s does not say %q", where, prefix)
		}
		rest := text[i+len(prefix):]
		list, _, ok := strings.Cut(rest, " takes")
		if !ok {
			t.Fatalf("%s: %q is not followed by a list and \"takes\"", where, prefix)
		}
		var got []string
		for _, f := range strings.FieldsFunc(strings.ReplaceAll(list, " and ", ","), func(r rune) bool { return r == ',' }) {
			got = append(got, strings.Trim(strings.TrimSpace(f), "`"))
		}
		sort.Strings(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s names the commands without --json wrongly (-table +text):\n%s", where, diff)
		}
	}
	said("claimctl help", strings.Join(strings.Fields(mainGlobal), " "), "Every command but ")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	said("README.md", strings.Join(strings.Fields(string(readme)), " "), "Every command but ")
	ref, err := os.ReadFile("../../cmd/claimctl/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	said("REFERENCE.md", strings.Join(strings.Fields(string(ref)), " "), "Every command but ")
}
