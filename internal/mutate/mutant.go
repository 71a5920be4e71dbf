package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
)

// Operator names, as they appear in mutant ids.
const (
	opRemoveCall  = "remove-call"   // drop a call statement
	opRemoveGuard = "remove-guard"  // drop an `if ... { ...; return ... }` with no else
	opNegate      = "negate"        // `if c` → `if !(c)`, also for conditions and tagless cases
	opBoundary    = "boundary"      // < ↔ <=, > ↔ >=, == ↔ !=
	opAndOr       = "and-or"        // && ↔ ||
	opSwallow     = "swallow-error" // the error result of a return → nil
	opSwap        = "swap"          // exchange two adjacent call/assignment statements
	opBranch      = "branch"        // continue ↔ break
)

// lineCol is a position as coverage profiles give it.
type lineCol struct{ line, col int }

func (a lineCol) before(b lineCol) bool {
	return a.line < b.line || a.line == b.line && a.col < b.col
}

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// A mutant is one small change to one target function.
type mutant struct {
	// ID is package.func:operator:hash, the hash taken over what the
	// mutant changes and the first line of the statement it is in (see
	// gen.add): it does not change when the function moves to another
	// file of its package, nor when code around the mutated statement
	// changes. Identical sites in one function are told apart by "~n",
	// their order among themselves.
	ID   string
	File string // slash path relative to the module root
	Func string // "Name" or "Recv.Name"
	Op   string
	K    int    // the site's number among the function's sites of Op, for people
	Line int    // line of the mutated code
	Desc string // what changed, for people only
	edit edit
	// from and to are, as line and column (1-based, columns in bytes),
	// the range of the statement the mutation is in: a test that runs
	// none of it cannot tell the mutant apart (see coverage.go). An
	// expression is anchored to its whole statement, because coverage
	// blocks do not hold case expressions, and hold an else-if's
	// condition only with its chain.
	from, to lineCol

	// prev is the context that tells apart mutants whose ids would be
	// equal (see gen.finish).
	prev string

	// What the schema (schema.go) needs: the node mutated (an expression,
	// a statement, or for swap the statement list's owner), the operator
	// that replaces a binary one, and a swap's index in its list.
	node ast.Node
	op   token.Token
	idx  int
}

// apply returns src with the mutation made; src is not modified.
func (m *mutant) apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(m.edit.text))
	out = append(out, src[:m.edit.start]...)
	out = append(out, m.edit.text...)
	return append(out, src[m.edit.end:]...)
}

// parsed is a target file and its mutants.
type parsed struct {
	file    string // slash path relative to the module root
	fset    *token.FileSet
	ast     *ast.File
	src     []byte
	funcs   []*ast.FuncDecl // the target functions
	mutants []*mutant
}

// generate returns the mutants of the named functions in src (the contents
// of file), in source order. It is an error for a name to match no
// function.
func generate(file string, src []byte, funcs []string) ([]*mutant, error) {
	p, err := parse(file, src, funcs)
	if err != nil {
		return nil, err
	}
	return p.mutants, nil
}

func parse(file string, src []byte, funcs []string) (*parsed, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	p := &parsed{file: file, fset: fset, ast: f, src: src}
	want := map[string]bool{}
	for _, name := range funcs {
		want[name] = true
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil || !want[funcName(fd)] {
			continue
		}
		delete(want, funcName(fd))
		g := &gen{fset: fset, src: src, file: file, pkg: f.Name.Name, fn: funcName(fd), count: map[string]int{}}
		g.walk(fd)
		g.finish()
		p.mutants = append(p.mutants, g.out...)
		p.funcs = append(p.funcs, fd)
	}
	if len(want) > 0 {
		var missing []string
		for name := range want {
			missing = append(missing, name)
		}
		sort.Strings(missing)
		return nil, fmt.Errorf("%s: no function %s (renamed? update internal/mutate/targets.go)", file, strings.Join(missing, ", "))
	}
	return p, nil
}

// funcName is "Name", or "Recv.Name" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// gen collects the mutants of one function.
type gen struct {
	// anchor is the statement range for the mutants being added.
	anchor [2]token.Pos
	fset   *token.FileSet
	src    []byte
	file   string
	pkg    string // the package's name: ids are package-qualified
	fn     string
	count  map[string]int
	// outer is the first line of the statement around the anchor (the if
	// whose body a return is in), which tells apart identical statements
	// in different places: every "return err" of a function.
	outer string
	// prev is the first line of the statement before it (see prevLine),
	// which tells apart the ones outer does not (see finish).
	prev string
	out  []*mutant
}

// prevLine returns the first line of the statement before the one that
// holds n in its list (the assignment an `if err != nil` checks), or, for a
// statement first in its list, before the nearest enclosing one that has
// one; "" when none has.
func (g *gen) prevLine(n ast.Node, stack []ast.Node) string {
	nodes := append(stack[:len(stack):len(stack)], n)
	for i := len(nodes) - 1; i > 0; i-- {
		st, ok := nodes[i].(ast.Stmt)
		if !ok {
			continue
		}
		var list []ast.Stmt
		switch p := nodes[i-1].(type) {
		case *ast.BlockStmt:
			list = p.List
		case *ast.CaseClause:
			list = p.Body
		case *ast.CommClause:
			list = p.Body
		default:
			continue
		}
		for j, x := range list {
			if x == st && j > 0 {
				return firstLine(g.text(list[j-1]))
			}
		}
		// First in its list: the statement before the enclosing one (the
		// assignment before the if whose body this return opens).
	}
	return ""
}

// outerLine returns the first line of the innermost statement enclosing
// the statement that holds n, or "".
func (g *gen) outerLine(n ast.Node, stack []ast.Node) string {
	nodes := append(stack[:len(stack):len(stack)], n)
	found := 0
	for i := len(nodes) - 1; i >= 0; i-- {
		switch nodes[i].(type) {
		case *ast.CaseClause, *ast.CommClause:
			if found == 1 {
				return firstLine(g.text(nodes[i]))
			}
		case *ast.BlockStmt:
		case ast.Stmt:
			found++
			if found == 2 {
				return firstLine(g.text(nodes[i]))
			}
		}
	}
	return ""
}

func (g *gen) lineCol(p token.Pos) lineCol {
	pos := g.fset.Position(p)
	return lineCol{pos.Line, pos.Column}
}

func (g *gen) off(p token.Pos) int { return g.fset.Position(p).Offset }

func (g *gen) text(n ast.Node) string { return string(g.src[g.off(n.Pos()):g.off(n.End())]) }

// add records a mutant replacing [from, to) with text. site is the code
// the mutant is about (the comparison a boundary flips, the statement a
// removal drops); with the first line of the enclosing statement and the
// replacement it makes the mutant's id.
func (g *gen) add(op string, site ast.Node, from, to token.Pos, text, desc string) *mutant {
	g.count[op]++
	k := g.count[op]
	id := fmt.Sprintf("%s.%s:%s:%s", g.pkg, g.fn, op, hash8(op, g.outer, firstLine(string(g.src[g.off(g.anchor[0]):g.off(g.anchor[1])])), squash(g.text(site)), text))
	m := &mutant{
		ID:   id,
		prev: g.prev,
		File: g.file, Func: g.fn, Op: op, K: k,
		Line: g.fset.Position(from).Line,
		Desc: desc,
		edit: edit{start: g.off(from), end: g.off(to), text: text},
		from: g.lineCol(g.anchor[0]),
		to:   g.lineCol(g.anchor[1]),
	}
	g.out = append(g.out, m)
	return m
}

// hash8 is 8 hex digits of a SHA-256 over parts.
func hash8(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:4])
}

// finish makes the function's ids unique. A site whose id another site
// shares (the same statement, in the same place, twice: every "return
// nil, err" after an "if err != nil") gets the hash of the statement
// before it appended, so that an edit elsewhere in the function changes
// no other id; sites that still share one are numbered in source order.
func (g *gen) finish() {
	count := map[string]int{}
	for _, m := range g.out {
		count[m.ID]++
	}
	seen := map[string]int{}
	for _, m := range g.out {
		if count[m.ID] > 1 {
			m.ID += "." + hash8(m.prev)
		}
		seen[m.ID]++
		if n := seen[m.ID]; n > 1 {
			m.ID += fmt.Sprintf("~%d", n)
		}
	}
}

// firstLine is the first line of a statement, its white space squashed:
// enough to tell one statement from another (an if's condition and init, a
// call with its arguments) without depending on its body.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return squash(line)
}

// squash collapses every run of white space to one space, so that an id
// does not change when code is re-indented (moved into or out of a block).
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// walk visits the body in source order (pre-order), keeping the stack of
// enclosing nodes so that a return knows its function's results.
func (g *gen) walk(fd *ast.FuncDecl) {
	stack := []ast.Node{fd}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		g.anchor = anchorOf(fd, n, stack)
		g.outer, g.prev = g.outerLine(n, stack), g.prevLine(n, stack)
		g.visit(n, stack)
		stack = append(stack, n)
		return true
	})
}

// anchorOf returns the range of the innermost statement holding n (n
// itself if it is one), widened to the switch or select of a case and to
// the first if of an else-if chain.
func anchorOf(fd *ast.FuncDecl, n ast.Node, stack []ast.Node) [2]token.Pos {
	nodes := append(stack[:len(stack):len(stack)], n)
	for i := len(nodes) - 1; i >= 0; i-- {
		switch nodes[i].(type) {
		case *ast.CaseClause, *ast.CommClause, *ast.BlockStmt:
			continue
		case ast.Stmt:
			for i > 0 {
				if p, ok := nodes[i-1].(*ast.IfStmt); ok && p.Else == nodes[i] {
					i--
					continue
				}
				break
			}
			return [2]token.Pos{nodes[i].Pos(), nodes[i].End()}
		}
	}
	return [2]token.Pos{fd.Pos(), fd.End()}
}

// visit emits the mutants rooted at n; stack holds n's ancestors.
func (g *gen) visit(n ast.Node, stack []ast.Node) {
	switch n := n.(type) {
	case *ast.BlockStmt:
		g.swaps(n, n.List)
	case *ast.CaseClause:
		g.swaps(n, n.Body)
		// A tagless switch's cases are conditions.
		if len(stack) >= 2 {
			if sw, ok := stack[len(stack)-2].(*ast.SwitchStmt); ok && sw.Tag == nil {
				for _, e := range n.List {
					g.negate(e)
				}
			}
		}
	case *ast.CommClause:
		g.swaps(n, n.Body)
	case *ast.ExprStmt:
		if call, ok := n.X.(*ast.CallExpr); ok && !isMutexCall(call) && inList(stack) {
			g.add(opRemoveCall, n, n.Pos(), n.End(), "", "remove "+snippet(g.text(n))).node = n
		}
	case *ast.IfStmt:
		if n.Else == nil && len(n.Body.List) > 0 && inList(stack) {
			if _, ok := n.Body.List[len(n.Body.List)-1].(*ast.ReturnStmt); ok {
				g.add(opRemoveGuard, n, n.Pos(), n.End(), "", "remove "+snippet(g.text(n))).node = n
			}
		}
		g.negate(n.Cond)
	case *ast.ForStmt:
		if n.Cond != nil {
			g.negate(n.Cond)
		}
	case *ast.BinaryExpr:
		if !inCondition(stack) {
			return
		}
		if to, ok := boundary[n.Op]; ok {
			m := g.add(opBoundary, n, n.OpPos, n.OpPos+token.Pos(len(n.Op.String())), to.String(),
				fmt.Sprintf("%s → %s in %s", n.Op, to, snippet(g.text(n))))
			m.node, m.op = n, to
		}
		if to, ok := andOr[n.Op]; ok {
			m := g.add(opAndOr, n, n.OpPos, n.OpPos+token.Pos(len(n.Op.String())), to.String(),
				fmt.Sprintf("%s → %s in %s", n.Op, to, snippet(g.text(n))))
			m.node, m.op = n, to
		}
	case *ast.ReturnStmt:
		g.swallow(n, stack)
	case *ast.BranchStmt:
		if n.Label == nil && (n.Tok == token.CONTINUE || n.Tok == token.BREAK) && inList(stack) {
			to := token.BREAK
			if n.Tok == token.BREAK {
				to = token.CONTINUE
			}
			m := g.add(opBranch, n, n.Pos(), n.End(), to.String(), fmt.Sprintf("%s → %s", n.Tok, to))
			m.node, m.op = n, to
		}
	}
}

// inList reports whether the statement whose ancestors these are stands in
// a statement list (not as an if's init or a for's post statement), where
// it can be dropped or wrapped.
func inList(stack []ast.Node) bool {
	switch stack[len(stack)-1].(type) {
	case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause:
		return true
	}
	return false
}

// inCondition reports whether a binary expression with these ancestors
// decides something (an if, for or case condition, a returned or assigned
// boolean) rather than only feeding a call's argument or a literal, such as
// an error message.
func inCondition(stack []ast.Node) bool {
	for i := len(stack) - 1; i >= 0; i-- {
		switch stack[i].(type) {
		case *ast.CallExpr, *ast.CompositeLit, *ast.FuncLit:
			return false
		case ast.Stmt:
			return true
		}
	}
	return false
}

var boundary = map[token.Token]token.Token{
	token.LSS: token.LEQ, token.LEQ: token.LSS,
	token.GTR: token.GEQ, token.GEQ: token.GTR,
	token.EQL: token.NEQ, token.NEQ: token.EQL,
}

var andOr = map[token.Token]token.Token{token.LAND: token.LOR, token.LOR: token.LAND}

// negate emits `!(cond)`, except where cond is a single == or != comparison:
// the boundary operator already flips it, and the same mutant twice would
// only cost a second test run.
func (g *gen) negate(cond ast.Expr) {
	if b, ok := ast.Unparen(cond).(*ast.BinaryExpr); ok && (b.Op == token.EQL || b.Op == token.NEQ) {
		return
	}
	g.add(opNegate, cond, cond.Pos(), cond.End(), "!("+g.text(cond)+")", "negate "+snippet(g.text(cond))).node = cond
}

// swaps emits an exchange of every two adjacent statements that are both
// calls or assignments (an `if` with an init statement counts: it is how
// a call and its error check are written). Exchanging publications is how
// a swapped publish order is seeded.
func (g *gen) swaps(owner ast.Node, list []ast.Stmt) {
	for _, st := range list {
		if _, ok := st.(*ast.LabeledStmt); ok {
			return // a schema repeats the list, and a label cannot be repeated
		}
	}
	for i := 0; i+1 < len(list); i++ {
		a, b := list[i], list[i+1]
		if !swappable(a) || !swappable(b) {
			continue
		}
		between := string(g.src[g.off(a.End()):g.off(b.Pos())])
		g.anchor = [2]token.Pos{a.Pos(), b.End()}
		m := g.add(opSwap, &ast.BlockStmt{Lbrace: a.Pos(), Rbrace: b.End() - 1}, a.Pos(), b.End(), g.text(b)+between+g.text(a),
			fmt.Sprintf("swap %s with %s", snippet(g.text(a)), snippet(g.text(b))))
		m.node, m.idx = owner, i
	}
}

func swappable(s ast.Stmt) bool {
	switch s := s.(type) {
	case *ast.ExprStmt:
		call, ok := s.X.(*ast.CallExpr)
		return ok && !isMutexCall(call)
	case *ast.AssignStmt:
		return true
	case *ast.IfStmt:
		return s.Init != nil && s.Else == nil
	}
	return false
}

// isMutexCall reports x.Lock(), x.Unlock(), x.RLock(), x.RUnlock(): moving
// or dropping them breaks only what the race detector sees, and these runs
// do not use it (see doc.go).
func isMutexCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	switch sel.Sel.Name {
	case "Lock", "Unlock", "RLock", "RUnlock":
		return true
	}
	return false
}

// swallow emits a return whose error result is nil, in a function (or
// function literal) whose last result is error.
func (g *gen) swallow(r *ast.ReturnStmt, stack []ast.Node) {
	var ft *ast.FuncType
	for i := len(stack) - 1; i >= 0 && ft == nil; i-- {
		switch f := stack[i].(type) {
		case *ast.FuncLit:
			ft = f.Type
		case *ast.FuncDecl:
			ft = f.Type
		}
	}
	if ft == nil || ft.Results == nil || len(ft.Results.List) == 0 {
		return
	}
	last := ft.Results.List[len(ft.Results.List)-1]
	if id, ok := last.Type.(*ast.Ident); !ok || id.Name != "error" {
		return
	}
	nres := 0
	for _, f := range ft.Results.List {
		nres += max(1, len(f.Names))
	}
	if len(r.Results) != nres {
		return // a bare return, or one returning a call's results
	}
	e := r.Results[nres-1]
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return
	}
	// The error is still computed, only dropped: replacing a call by nil
	// would also remove the call's effects, a second mutation.
	text := "nil"
	if _, ok := e.(*ast.Ident); !ok {
		text = "func(error) error { return nil }(" + g.text(e) + ")"
	}
	g.add(opSwallow, r, e.Pos(), e.End(), text, "swallow the error of "+snippet(g.text(r))).node = e
}

// snippet is the first line of s, shortened for a one-line description.
func snippet(s string) string {
	multi := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, multi = s[:i], true
	}
	s = strings.TrimSpace(s)
	if len(s) > 70 {
		s, multi = s[:67], true
	}
	if multi {
		s += "…"
	}
	return "`" + s + "`"
}

// diff returns the lines of orig and mutated that differ, with context
// lines around them, in the style of a unified diff (one hunk: a mutant
// changes one place).
func diff(orig, mutated []byte, context int) string {
	a := strings.Split(string(orig), "\n")
	b := strings.Split(string(mutated), "\n")
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var buf bytes.Buffer
	from := max(0, pre-context)
	fmt.Fprintf(&buf, "@@ line %d @@\n", from+1)
	for _, l := range a[from:pre] {
		buf.WriteString("  " + l + "\n")
	}
	for _, l := range a[pre : len(a)-suf] {
		buf.WriteString("- " + l + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		buf.WriteString("+ " + l + "\n")
	}
	for _, l := range a[len(a)-suf : min(len(a), len(a)-suf+context)] {
		buf.WriteString("  " + l + "\n")
	}
	return buf.String()
}
