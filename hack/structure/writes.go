package main

import (
	"go/ast"
	"go/types"
	"sort"
	"strings"
)

// writtenExprs are the expressions of body that are written: the left of an assignment
// (or of a range with =), the operand of ++/--, the first argument of the builtins
// delete, clear and copy, and every expression such a target is selected, indexed,
// sliced or dereferenced from (writing x.a[i].b writes x.a[i], x.a and x). The value is
// true for a target itself, false for what it is reached from.
//
// An address taken (&x, or a method with a pointer receiver called on x) may be written
// through later. With all set, it counts as a write of x, as the struct-use figures want
// (a function handing on &s.facts uses facts). Without, only where the pointer leaves
// the package (an argument of a function of another package, a pointer method declared
// elsewhere, DeepCopy and DeepCopyInto excepted): the writers' figures follow a pointer
// kept in the package by its type instead (writers).
func writtenExprs(p *pkg, body ast.Node, all bool) map[ast.Expr]bool {
	out := map[ast.Expr]bool{}
	mark := func(e ast.Expr) {
		for first := true; e != nil; first = false {
			out[e] = out[e] || first
			switch x := e.(type) {
			case *ast.ParenExpr:
				e = x.X
			case *ast.SelectorExpr:
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.IndexListExpr:
				e = x.X
			case *ast.SliceExpr:
				e = x.X
			case *ast.StarExpr:
				e = x.X
			default:
				e = nil
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				mark(l)
			}
		case *ast.IncDecStmt:
			mark(n.X)
		case *ast.RangeStmt:
			if n.Tok.String() == "=" {
				mark(n.Key)
				mark(n.Value)
			}
		case *ast.UnaryExpr:
			if all && n.Op.String() == "&" {
				mark(n.X)
			}
		case *ast.CallExpr:
			if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && len(n.Args) > 0 {
				if _, builtin := p.info.Uses[id].(*types.Builtin); builtin {
					switch id.Name {
					case "delete", "clear", "copy":
						mark(n.Args[0])
					}
				}
			}
			if callee := calleeOf(p, n); !all && callee != nil && callee.Pkg() != p.types {
				for _, arg := range n.Args {
					if u, ok := ast.Unparen(arg).(*ast.UnaryExpr); ok && u.Op.String() == "&" {
						mark(u.X)
					}
				}
			}
		case *ast.SelectorExpr:
			sel := p.info.Selections[n]
			if sel == nil || sel.Kind() != types.MethodVal {
				return true
			}
			m := sel.Obj().(*types.Func)
			_, ptrRecv := m.Signature().Recv().Type().(*types.Pointer)
			_, ptrOperand := sel.Recv().Underlying().(*types.Pointer)
			if !ptrRecv || ptrOperand {
				return true
			}
			if all || (m.Pkg() != p.types && m.Name() != "DeepCopy" && m.Name() != "DeepCopyInto") {
				mark(n.X)
			}
		}
		return true
	})
	return out
}

// fieldPath is a field path such as Status.Workers and the types found along it.
type fieldPath struct {
	names []string
	// prefix[k] is the type of the path's first k names (Status: GPUPoolProfileStatus),
	// for 0 < k < len(names); nil where no selection of the whole path was found.
	prefix []types.Type
	// elem is the named struct the path holds (E, *E, []E, [n]E, map[K]E), or nil.
	elem *types.Named
}

// write is one function writing a field path.
type write struct {
	name, file string
	kinds      map[string]bool
}

// writers finds the functions that write a field path such as Status.Workers: its first
// name is a field or the name of the type it is selected on (facts.stepErrors matches
// s.facts.stepErrors and f.stepErrors for an f of type facts), the others fields. A
// function writes the path when a written expression (writtenExprs) selects:
//   - direct: the path (assigned, appended to, an element or an element's field
//     assigned, its address or an element's handed out of the package), or its rest
//     through a pointer to what its start selects (st.Workers with st a
//     *GPUPoolProfileStatus);
//   - whole: a prefix of it, itself the target (x.Status = ..., *st = ...; not
//     x.Status.Phase = ...);
//   - via *E, where the path holds structs E: a field of a *E or an element of a []E is
//     written. This approximates a pointer or slice obtained from the path, here or in a
//     caller; it also counts writes to a fresh *E or []E that never was the path's, and
//     misses a copy of a value kept in a variable of another type.
func writers(p *pkg, names []string) []write {
	fp := resolvePath(p, names)
	var out []write
	p.funcDecls(func(file string, d *ast.FuncDecl) {
		w := write{name: funcName(d), file: file, kinds: map[string]bool{}}
		for e, target := range writtenExprs(p, d.Body, false) {
			if k := fp.match(p, e, target); k != "" {
				w.kinds[k] = true
			}
		}
		if len(w.kinds) > 0 {
			out = append(out, w)
		}
	})
	return out
}

// match is the kind of write of the path a written expression is, "" for none.
func (fp *fieldPath) match(p *pkg, e ast.Expr, target bool) string {
	n := len(fp.names)
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if selectsNames(p, sel, fp.names) {
			return "direct"
		}
		for k := 1; k < n; k++ {
			if fp.prefix[k] != nil && selectsOn(p, sel, fp.names[k:], fp.prefix[k]) {
				return "direct"
			}
		}
		if target {
			for k := n - 1; k >= 1; k-- {
				if selectsNames(p, sel, fp.names[:k]) && holds(p.info.TypeOf(sel), fp.names[k:]) {
					return "whole (" + strings.Join(fp.names[:k], ".") + ")"
				}
			}
		}
	}
	if star, ok := e.(*ast.StarExpr); ok && target {
		for k := 1; k < n; k++ {
			if pt := pointee(p.info.TypeOf(star.X)); pt != nil && fp.prefix[k] != nil && types.Identical(pt, fp.prefix[k]) {
				return "whole (" + strings.Join(fp.names[:k], ".") + ")"
			}
		}
	}
	if fp.elem != nil && throughElem(p, e, fp.elem) {
		return "via *" + fp.elem.Obj().Name()
	}
	return ""
}

// selectsNames: sel is X.n1.n2...nk with fields named names, where n1 is also matched by
// the name of the type of the expression it would be selected on.
func selectsNames(p *pkg, sel *ast.SelectorExpr, names []string) bool {
	var e ast.Expr = sel
	for i := len(names) - 1; i >= 0; i-- {
		s, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if i == 0 && (!ok || s.Sel.Name != names[0]) {
			// The first name may be the type's: f.stepErrors with f of type facts.
			return named(p.info.TypeOf(e)) == names[0]
		}
		if !ok || s.Sel.Name != names[i] || !isField(p, s) {
			return false
		}
		e = s.X
	}
	return true
}

// selectsOn: sel is X.n1...nk with fields named names and X a pointer to base.
func selectsOn(p *pkg, sel *ast.SelectorExpr, names []string, base types.Type) bool {
	var e ast.Expr = sel
	for i := len(names) - 1; i >= 0; i-- {
		s, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if !ok || s.Sel.Name != names[i] || !isField(p, s) {
			return false
		}
		e = s.X
	}
	pt := pointee(p.info.TypeOf(e))
	return pt != nil && types.Identical(pt, base)
}

func isField(p *pkg, s *ast.SelectorExpr) bool {
	ps := p.info.Selections[s]
	return ps != nil && ps.Kind() == types.FieldVal
}

// holds: a value of type t has the field path rest.
func holds(t types.Type, rest []string) bool {
	for _, name := range rest {
		st, ok := deref(t).Underlying().(*types.Struct)
		if !ok {
			return false
		}
		found := false
		for i := 0; i < st.NumFields(); i++ {
			if st.Field(i).Name() == name {
				t, found = st.Field(i).Type(), true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// resolvePath finds the types along the path on the first selection of the whole path
// in the package.
func resolvePath(p *pkg, names []string) *fieldPath {
	fp := &fieldPath{names: names, prefix: make([]types.Type, len(names))}
	var found *ast.SelectorExpr
	for _, name := range p.names {
		ast.Inspect(p.files[name], func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && found == nil && selectsNames(p, sel, names) {
				found = sel
			}
			return found == nil
		})
	}
	if found == nil {
		return fp
	}
	var e ast.Expr = found
	for k := len(names) - 1; k >= 1; k-- {
		e = ast.Unparen(e).(*ast.SelectorExpr).X
		fp.prefix[k] = deref(p.info.TypeOf(e))
	}
	t := p.info.TypeOf(found)
	switch u := t.Underlying().(type) {
	case *types.Slice:
		t = u.Elem()
	case *types.Array:
		t = u.Elem()
	case *types.Map:
		t = u.Elem()
	}
	if nt, ok := deref(t).(*types.Named); ok {
		if _, isStruct := nt.Underlying().(*types.Struct); isStruct {
			fp.elem = nt
		}
	}
	return fp
}

// throughElem: e writes an E through a pointer (x.f or *x with x a *E) or a slice (x[i]
// with x a []E).
func throughElem(p *pkg, e ast.Expr, elem *types.Named) bool {
	var x ast.Expr
	switch v := e.(type) {
	case *ast.SelectorExpr:
		if !isField(p, v) {
			return false
		}
		x = v.X
	case *ast.StarExpr:
		x = v.X
	case *ast.IndexExpr:
		if s, ok := p.info.TypeOf(v.X).Underlying().(*types.Slice); ok {
			return types.Identical(s.Elem(), elem)
		}
		return false
	default:
		return false
	}
	pt := pointee(p.info.TypeOf(x))
	return pt != nil && types.Identical(pt, elem)
}

func pointee(t types.Type) types.Type {
	if t == nil {
		return nil
	}
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		return ptr.Elem()
	}
	return nil
}

func deref(t types.Type) types.Type {
	if ptr, ok := t.(*types.Pointer); ok {
		return ptr.Elem()
	}
	return t
}

// named is the name of a (pointer to a) named type, "" for others.
func named(t types.Type) string {
	if t == nil {
		return ""
	}
	if nt, ok := deref(t).(*types.Named); ok {
		return nt.Obj().Name()
	}
	return ""
}

func sortedKinds(w write) []string {
	out := make([]string, 0, len(w.kinds))
	for k := range w.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
