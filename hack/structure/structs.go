package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"sort"
)

// methodsOf counts the methods declared on the named type, by file.
func methodsOf(p *pkg, typeName string) (total int, byFile map[string]int) {
	byFile = map[string]int{}
	p.funcDecls(func(file string, d *ast.FuncDecl) {
		if d.Recv != nil && len(d.Recv.List) > 0 && recvTypeName(d.Recv.List[0].Type) == typeName {
			total++
			byFile[file]++
		}
	})
	return total, byFile
}

// taker is a function with a parameter or receiver of the struct (or a pointer to it):
// which of the struct's fields it reads and writes itself, and the functions it hands
// the struct on to.
type taker struct {
	name, file string
	obj        *types.Func
	params     []*types.Var // the struct-typed parameters (and receiver)
	read       map[string]bool
	written    map[string]bool
	// calls are the functions of the package the struct is handed on to; escapes: it is
	// used whole in another way (stored, returned, handed to a function not analysed),
	// so what of it is read further is not known.
	calls   map[*types.Func]bool
	escapes bool
	// fields are read and written, the callees' included (closure over calls).
	fields map[string]bool
}

// structUse is what the package does with one struct type.
type structUse struct {
	fields []string
	// inner counts the fields of each field whose type is a struct of the package
	// (facts), nested all of them.
	inner  map[string]int
	nested int
	takers []*taker // in file order
}

// useOfStruct finds the functions taking the struct and what they use of it.
func useOfStruct(p *pkg, structName string) (*structUse, error) {
	tn, ok := p.types.Scope().Lookup(structName).(*types.TypeName)
	if !ok {
		return nil, fmt.Errorf("no type %s in %s", structName, p.path)
	}
	st, ok := tn.Type().Underlying().(*types.Struct)
	if !ok {
		return nil, fmt.Errorf("%s is not a struct", structName)
	}
	u := &structUse{inner: map[string]int{}}
	for i := 0; i < st.NumFields(); i++ {
		f := st.Field(i)
		u.fields = append(u.fields, f.Name())
		if nt, ok := f.Type().(*types.Named); ok && nt.Obj().Pkg() == p.types {
			if inner, ok := nt.Underlying().(*types.Struct); ok {
				u.inner[f.Name()] = inner.NumFields()
				u.nested += inner.NumFields()
			}
		}
	}
	isIt := func(t types.Type) bool {
		if ptr, ok := t.(*types.Pointer); ok {
			t = ptr.Elem()
		}
		return types.Identical(t, tn.Type())
	}
	byObj := map[*types.Func]*taker{}
	p.funcDecls(func(file string, d *ast.FuncDecl) {
		fn, _ := p.info.Defs[d.Name].(*types.Func)
		if fn == nil {
			return
		}
		t := &taker{name: funcName(d), file: file, obj: fn, read: map[string]bool{},
			written: map[string]bool{}, calls: map[*types.Func]bool{}}
		sig := fn.Signature()
		if r := sig.Recv(); r != nil && isIt(r.Type()) {
			t.params = append(t.params, r)
		}
		for i := 0; i < sig.Params().Len(); i++ {
			if v := sig.Params().At(i); isIt(v.Type()) {
				t.params = append(t.params, v)
			}
		}
		if len(t.params) == 0 {
			return
		}
		u.takers = append(u.takers, t)
		byObj[fn] = t
	})
	for _, t := range u.takers {
		d := declOf(p, t)
		scanTaker(p, t, d, st, isIt)
	}
	closeOverCalls(u.takers, byObj)
	return u, nil
}

func declOf(p *pkg, t *taker) *ast.FuncDecl {
	var found *ast.FuncDecl
	p.funcDecls(func(_ string, d *ast.FuncDecl) {
		if p.info.Defs[d.Name] == t.obj {
			found = d
		}
	})
	return found
}

// scanTaker records the fields a function selects on its struct parameters (the first
// field of the selection's path: a field promoted from an embedded one counts as that
// embedded field) and the calls it hands them to. A field is written when it, or
// anything reached from it, is assigned, incremented or has its address taken.
func scanTaker(p *pkg, t *taker, d *ast.FuncDecl, st *types.Struct, isIt func(types.Type) bool) {
	isParam := func(e ast.Expr) bool {
		id, ok := ast.Unparen(e).(*ast.Ident)
		if !ok {
			return false
		}
		v, _ := p.info.Uses[id].(*types.Var)
		for _, pv := range t.params {
			if v == pv {
				return true
			}
		}
		return false
	}
	written := writtenExprs(p, d.Body, true)
	handled := map[*ast.Ident]bool{}
	ast.Inspect(d.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if !isParam(n.X) {
				return true
			}
			handled[ast.Unparen(n.X).(*ast.Ident)] = true
			sel := p.info.Selections[n]
			if sel == nil {
				return true
			}
			if sel.Kind() == types.MethodVal && len(sel.Index()) == 1 {
				if m, ok := sel.Obj().(*types.Func); ok {
					t.calls[m.Origin()] = true
				}
				return true
			}
			f := st.Field(sel.Index()[0]).Name()
			if _, w := written[n]; w {
				t.written[f] = true
			} else {
				t.read[f] = true
			}
		case *ast.CallExpr:
			callee := calleeOf(p, n)
			for _, arg := range n.Args {
				if !isParam(arg) {
					continue
				}
				handled[ast.Unparen(arg).(*ast.Ident)] = true
				if callee != nil && callee.Pkg() == p.types {
					t.calls[callee.Origin()] = true
				} else {
					t.escapes = true
				}
			}
		case *ast.Ident:
			if v, ok := p.info.Uses[n].(*types.Var); ok && !handled[n] {
				for _, pv := range t.params {
					if v == pv {
						// Visited after its parent selector or call (pre-order), so
						// an unhandled use is some other use of the whole value.
						t.escapes = true
					}
				}
			}
		}
		return true
	})
}

// calleeOf is the function or method a call names statically, nil for a call of a func
// value, a conversion or a builtin.
func calleeOf(p *pkg, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.IndexExpr: // generic instantiation
		if x, ok := f.X.(*ast.Ident); ok {
			id = x
		}
	}
	if id == nil {
		return nil
	}
	fn, _ := p.info.Uses[id].(*types.Func)
	return fn
}

// closeOverCalls gives each function the fields its callees use, until nothing changes;
// a callee whose use is unknown makes the caller's unknown too.
func closeOverCalls(takers []*taker, byObj map[*types.Func]*taker) {
	for _, t := range takers {
		t.fields = map[string]bool{}
		for f := range t.read {
			t.fields[f] = true
		}
		for f := range t.written {
			t.fields[f] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, t := range takers {
			for c := range t.calls {
				ct := byObj[c]
				if ct == nil {
					if !t.escapes {
						t.escapes, changed = true, true
					}
					continue
				}
				if ct.escapes && !t.escapes {
					t.escapes, changed = true, true
				}
				for f := range ct.fields {
					if !t.fields[f] {
						t.fields[f], changed = true, true
					}
				}
			}
		}
	}
}

// narrow are the functions that, callees included, use at most one field of the struct
// and nothing else of it: they could take that field instead.
func (u *structUse) narrow() []*taker {
	var out []*taker
	for _, t := range u.takers {
		if !t.escapes && len(t.fields) <= 1 {
			out = append(out, t)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
