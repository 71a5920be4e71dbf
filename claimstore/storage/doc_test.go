package storage

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestBackendDocListsEveryCapability: Backend's doc comment names every
// optional capability the package declares (an interface whose doc calls it
// one), so that a backend's author reading it learns all of them; one added
// without being listed fails here.
func TestBackendDocListsEveryCapability(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "storage.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var backendDoc string
	var capabilities []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, sp := range g.Specs {
			ts := sp.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.InterfaceType); !ok {
				continue
			}
			doc := g.Doc.Text()
			switch {
			case ts.Name.Name == "Backend":
				backendDoc = doc
			case strings.Contains(doc, "optional capability"):
				capabilities = append(capabilities, ts.Name.Name)
			}
		}
	}
	if backendDoc == "" || len(capabilities) < 10 {
		t.Fatalf("found Backend's doc %q and capabilities %v: the parse is wrong", backendDoc, capabilities)
	}
	for _, c := range capabilities {
		if !strings.Contains(backendDoc, c) {
			t.Errorf("Backend's doc does not name the optional capability %s", c)
		}
	}
}
