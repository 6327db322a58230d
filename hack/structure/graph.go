package main

import (
	"go/ast"
	"go/types"
	"sort"
	"strings"
)

// arrow is file From using a package-level name (func, type, var, const) or a method that
// file To declares; refs counts the uses.
type arrow struct {
	From, To string
	refs     int
}

// fileGraph is the file graph of a package: its product files and the arrows between them.
type fileGraph struct {
	nodes  []string
	arrows []arrow // sorted by From, To
	out    map[string]map[string]int
	// names are the names each arrow stands for: names[from][to][name].
	names map[string]map[string]map[string]bool
}

// buildGraph draws an arrow from every file to each other file declaring a name it uses.
// go/types resolves every identifier, so a method call through a selector points at the
// file declaring that method, and a field points nowhere (fields are not package-level;
// a file reading a struct's fields almost always names the type, or calls something
// returning it, in the same file).
func buildGraph(p *pkg) *fileGraph {
	g := &fileGraph{nodes: p.names, out: map[string]map[string]int{}, names: map[string]map[string]map[string]bool{}}
	for _, from := range p.names {
		ast.Inspect(p.files[from], func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.info.Uses[id]
			if obj == nil || !declaredAtPackageLevel(p, obj) {
				return true
			}
			to := p.fileOf(obj.Pos())
			if to == "" || to == from {
				return true
			}
			if g.out[from] == nil {
				g.out[from] = map[string]int{}
			}
			g.out[from][to]++
			if g.names[from] == nil {
				g.names[from] = map[string]map[string]bool{}
			}
			if g.names[from][to] == nil {
				g.names[from][to] = map[string]bool{}
			}
			g.names[from][to][obj.Name()] = true
			return true
		})
	}
	for from, tos := range g.out {
		for to, n := range tos {
			g.arrows = append(g.arrows, arrow{From: from, To: to, refs: n})
		}
	}
	sort.Slice(g.arrows, func(i, j int) bool {
		if g.arrows[i].From != g.arrows[j].From {
			return g.arrows[i].From < g.arrows[j].From
		}
		return g.arrows[i].To < g.arrows[j].To
	})
	return g
}

// declaredAtPackageLevel: obj is a name of the package's scope, or a method (concrete or
// of an interface) declared in the package.
func declaredAtPackageLevel(p *pkg, obj types.Object) bool {
	if obj.Pkg() != p.types {
		return false
	}
	if obj.Parent() == p.types.Scope() {
		return true
	}
	fn, ok := obj.(*types.Func)
	return ok && fn.Signature().Recv() != nil
}

func (g *fileGraph) has(from, to string) bool { return g.out[from][to] > 0 }

// pairs counts the unordered file pairs joined by an arrow either way, and those joined
// both ways (mutual).
func (g *fileGraph) pairs() (linked, mutual int) {
	for _, a := range g.arrows {
		if !g.has(a.To, a.From) {
			linked++
		} else if a.From < a.To {
			linked++
			mutual++
		}
	}
	return linked, mutual
}

// sccs are the strongly connected components (Tarjan), each sorted, largest first then by
// first name: the files of one component all reach one another through arrows.
func (g *fileGraph) sccs() [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.sortedOut(v) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		sort.Strings(comp)
		out = append(out, comp)
	}
	for _, v := range g.nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i][0] < out[j][0]
	})
	return out
}

func (g *fileGraph) sortedOut(v string) []string {
	tos := make([]string, 0, len(g.out[v]))
	for to := range g.out[v] {
		tos = append(tos, to)
	}
	sort.Strings(tos)
	return tos
}

// backArrows are the arrows pointing up in a layering of the files, users above what
// they use: between components the layering is a topological order of the condensation
// (no arrow between two components points up), inside a component it is the order the
// Eades-Lin-Smyth heuristic finds, improved by moving single files while that removes
// back arrows. Taking the back arrows away leaves no cycle, and few orders do with fewer:
// they are (an upper bound of) the arrows one must remove to layer the package.
func (g *fileGraph) backArrows(comps [][]string) []arrow {
	var back []arrow
	for _, comp := range comps {
		if len(comp) < 2 {
			continue
		}
		order := g.improve(g.elsOrder(comp))
		pos := map[string]int{}
		for i, v := range order {
			pos[v] = i
		}
		for _, a := range g.arrows {
			pi, inFrom := pos[a.From]
			pj, inTo := pos[a.To]
			if inFrom && inTo && pi > pj {
				back = append(back, a)
			}
		}
	}
	return back
}

// elsOrder orders a component's files top (users) to bottom (used) by Eades, Lin and
// Smyth: sinks go to the bottom, sources to the top, else the file with the most arrows
// out less arrows in goes to the top; ties go to the first name, so the order is stable.
func (g *fileGraph) elsOrder(comp []string) []string {
	left := map[string]bool{}
	for _, v := range comp {
		left[v] = true
	}
	deg := func(v string) (in, out int) {
		for w := range left {
			if w == v {
				continue
			}
			if g.has(v, w) {
				out++
			}
			if g.has(w, v) {
				in++
			}
		}
		return in, out
	}
	var top, bottom []string
	for len(left) > 0 {
		names := make([]string, 0, len(left))
		for v := range left {
			names = append(names, v)
		}
		sort.Strings(names)
		moved := false
		for _, v := range names {
			if in, out := deg(v); out == 0 {
				bottom = append(bottom, v)
				delete(left, v)
				moved = true
			} else if in == 0 {
				top = append(top, v)
				delete(left, v)
				moved = true
			}
		}
		if moved {
			continue
		}
		best, bestDelta := "", 0
		for _, v := range names {
			in, out := deg(v)
			if best == "" || out-in > bestDelta {
				best, bestDelta = v, out-in
			}
		}
		top = append(top, best)
		delete(left, best)
	}
	for i := len(bottom) - 1; i >= 0; i-- {
		top = append(top, bottom[i])
	}
	return top
}

// improve moves one file at a time to the place with the fewest back arrows while that
// lowers their number (bounded: each round removes at least one).
func (g *fileGraph) improve(order []string) []string {
	count := func(o []string) int {
		n := 0
		for i, v := range o {
			for j := 0; j < i; j++ {
				if g.has(v, o[j]) {
					n++
				}
			}
		}
		return n
	}
	best := count(order)
	for improved := true; improved; {
		improved = false
		for i := range order {
			v := order[i]
			rest := append(append([]string{}, order[:i]...), order[i+1:]...)
			for j := 0; j <= len(rest); j++ {
				cand := append(append(append([]string{}, rest[:j]...), v), rest[j:]...)
				if c := count(cand); c < best {
					order, best, improved = cand, c, true
				}
			}
		}
	}
	return order
}

// uses lists, for file f, the names it uses from each other file and the names each
// other file uses from it ("a.go -> b.go: x, y"), sorted.
func (g *fileGraph) uses(f string) []string {
	var out []string
	line := func(from, to string) string {
		var ns []string
		for n := range g.names[from][to] {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		return from + " -> " + to + ": " + strings.Join(ns, ", ")
	}
	for _, a := range g.arrows {
		if a.From == f || a.To == f {
			out = append(out, line(a.From, a.To))
		}
	}
	return out
}
