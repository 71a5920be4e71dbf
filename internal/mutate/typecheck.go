package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// checker type-checks a package with one file replaced, as the compiler
// would: it tells a stillborn mutant (one that does not compile, e.g. a
// removed check leaving a variable unused, a swap using a name before its
// declaration) without a build. Dependencies come from their export data,
// which go list -export provides from the build cache.
type checker struct {
	fset    *token.FileSet
	imp     types.Importer
	pkgs    map[string]*listedPkg // by directory relative to the module root, slash-separated
	astOf   map[string]*ast.File  // parsed unmutated files, by absolute path
	modRoot string
}

type listedPkg struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	Export     string
	Standard   bool
	DepOnly    bool
}

// newChecker lists dirs (module-relative, "./claimstore") and their
// dependencies with export data.
func newChecker(root string, dirs []string) (*checker, error) {
	// os and strconv: the schema's helper file imports them.
	args := append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,Name,GoFiles,Export,Standard,DepOnly", "os", "strconv"}, dirs...)
	out, err := output(root, "go", args...)
	if err != nil {
		return nil, err
	}
	c := &checker{fset: token.NewFileSet(), pkgs: map[string]*listedPkg{}, astOf: map[string]*ast.File{}, modRoot: root}
	export := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var p listedPkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		export[p.ImportPath] = p.Export
		if !p.DepOnly && !p.Standard {
			rel, err := filepath.Rel(root, p.Dir)
			if err != nil {
				return nil, err
			}
			c.pkgs[filepath.ToSlash(rel)] = &p
		}
	}
	c.imp = importer.ForCompiler(c.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	return c, nil
}

// check type-checks the package of file (module-relative, slash-separated)
// with file's contents replaced by src; extra, if not empty, is added as
// one more file of the package.
func (c *checker) check(file string, src []byte, extra string) error {
	p := c.pkgs[filepath.ToSlash(filepath.Dir(file))]
	if p == nil {
		return fmt.Errorf("%s: package not listed", file)
	}
	target := filepath.Join(c.modRoot, filepath.FromSlash(file))
	var files []*ast.File
	for _, name := range p.GoFiles {
		path := filepath.Join(p.Dir, name)
		if path == target {
			f, err := parser.ParseFile(c.fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, f)
			continue
		}
		f := c.astOf[path]
		if f == nil {
			var err error
			if f, err = parser.ParseFile(c.fset, path, nil, parser.SkipObjectResolution); err != nil {
				return err
			}
			c.astOf[path] = f
		}
		files = append(files, f)
	}
	if extra != "" {
		f, err := parser.ParseFile(c.fset, "mutate_schema.go", extra, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	var first error
	conf := types.Config{
		Importer: c.imp,
		Error: func(err error) {
			if first == nil {
				first = err
			}
		},
	}
	_, _ = conf.Check(p.ImportPath, c.fset, files, nil)
	return first
}
