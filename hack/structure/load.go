package main

import (
	"bytes"
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
	"os/exec"
	"path/filepath"
	"sort"
)

// pkg is one package's product files, parsed and type-checked: the files a reader of the
// package maintains, so tests (never loaded) and generated files (skipped) do not count.
type pkg struct {
	path  string
	fset  *token.FileSet
	types *types.Package
	info  *types.Info
	// files are the product files by base name, names their sorted names.
	files map[string]*ast.File
	names []string
	lines map[string]int
}

// listed is what go list says of a package.
type listed struct {
	ImportPath, Dir, Export string
	GoFiles, CgoFiles       []string
	DepOnly                 bool
	Error                   *struct{ Err string }
}

// load type-checks the package in dir (such as ./controllers) from source, its imports
// from the export data go list -export builds (cached by the go command), as
// golang.org/x/tools/go/packages does; this keeps a run to seconds and go.mod free of
// a module only this tool would need.
func load(dir string) (*pkg, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-export", "-deps",
		"-json=ImportPath,Dir,Export,GoFiles,CgoFiles,DepOnly,Error", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", dir, err, stderr.String())
	}
	exports := map[string]string{}
	var root *listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if l.Error != nil {
			return nil, fmt.Errorf("%s: %s", l.ImportPath, l.Error.Err)
		}
		exports[l.ImportPath] = l.Export
		if !l.DepOnly {
			if root != nil {
				return nil, fmt.Errorf("%s: want one package, got %s and %s", dir, root.ImportPath, l.ImportPath)
			}
			root = &l
		}
	}
	if root == nil {
		return nil, fmt.Errorf("%s: no package", dir)
	}
	if len(root.CgoFiles) > 0 {
		return nil, fmt.Errorf("%s: cgo files are not supported", root.ImportPath)
	}
	p := &pkg{
		path:  root.ImportPath,
		fset:  token.NewFileSet(),
		files: map[string]*ast.File{},
		lines: map[string]int{},
		info: &types.Info{
			Types:      map[ast.Expr]types.TypeAndValue{},
			Defs:       map[*ast.Ident]types.Object{},
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
		},
	}
	var all []*ast.File
	for _, name := range root.GoFiles {
		full := filepath.Join(root.Dir, name)
		src, err := os.ReadFile(full)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(p.fset, full, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		all = append(all, f)
		if ast.IsGenerated(f) {
			continue
		}
		p.files[name] = f
		p.names = append(p.names, name)
		p.lines[name] = bytes.Count(src, []byte("\n"))
	}
	sort.Strings(p.names)
	imp := importer.ForCompiler(p.fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	conf := types.Config{Importer: imp}
	if p.types, err = conf.Check(root.ImportPath, p.fset, all, p.info); err != nil {
		return nil, err
	}
	return p, nil
}

// fileOf is the product file a position is in, "" when it is in none (another package,
// a generated file).
func (p *pkg) fileOf(pos token.Pos) string {
	if !pos.IsValid() {
		return ""
	}
	name := filepath.Base(p.fset.Position(pos).Filename)
	if _, ok := p.files[name]; !ok {
		return ""
	}
	return name
}

// funcDecls calls fn for every function and method declared in the product files, in
// file order.
func (p *pkg) funcDecls(fn func(file string, d *ast.FuncDecl)) {
	for _, name := range p.names {
		for _, decl := range p.files[name].Decls {
			if d, ok := decl.(*ast.FuncDecl); ok && d.Body != nil {
				fn(name, d)
			}
		}
	}
}

// funcName names a declared function as a reader looks for it: "f" or "T.m".
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	return recvTypeName(d.Recv.List[0].Type) + "." + d.Name.Name
}

// recvTypeName is the name of a receiver's type, without pointer or type parameters.
func recvTypeName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return "?"
		}
	}
}
