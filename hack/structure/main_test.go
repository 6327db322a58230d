package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The fixture: a.go -> b.go -> c.go -> a.go is a cycle, d.go uses a.go and b.go; a
// generated file and a test file, which would add arrows and writers, do not count.
func TestFixtureFigures(t *testing.T) {
	f, err := measure("./testdata/fixture", "R", "scope", []string{"Status.Workers", "facts.stepErrors"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.go", "b.go", "c.go", "d.go"}; !reflect.DeepEqual(f.files, want) {
		t.Errorf("files = %v, want %v", f.files, want)
	}
	var arrows []string
	for _, a := range f.graph.arrows {
		arrows = append(arrows, a.From+"->"+a.To)
	}
	if want := []string{"a.go->b.go", "b.go->c.go", "c.go->a.go", "d.go->a.go", "d.go->b.go"}; !reflect.DeepEqual(arrows, want) {
		t.Errorf("arrows = %v, want %v", arrows, want)
	}
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("mutual pairs", f.mutual, 0)
	check("linked pairs", f.linked, 5)
	check("largest SCC", f.comps[0], []string{"a.go", "b.go", "c.go"})
	check("files in cycles", f.inCycles, 3)
	check("arrows inside cycles", f.arrowsIn, 3)
	check("back arrows", len(f.back), 1)
	check("methods of R", f.methodsBy, map[string]int{"a.go": 1, "d.go": 3})
	check("scope fields", f.structUse.fields, []string{"pool", "now", "facts"})

	uses := map[string]string{}
	for _, tk := range f.structUse.takers {
		uses[tk.name] = strings.Join(sortedKeys(tk.fields), " ")
		if tk.escapes {
			uses[tk.name] += " *"
		}
	}
	check("scope takers' fields", uses, map[string]string{
		"onlyNow":  "now",
		"R.record": "pool",
		"R.fail":   "facts pool",
		"R.pass":   "facts now pool", // through fail and onlyNow
	})
	var narrow []string
	for _, tk := range f.structUse.narrow() {
		narrow = append(narrow, tk.name)
	}
	check("narrow", narrow, []string{"onlyNow", "R.record"})

	writers := map[string][]string{}
	for path, ws := range f.writers {
		for _, w := range ws {
			writers[path] = append(writers[path], fmt.Sprintf("%s %s", w.name, strings.Join(sortedKinds(w), ",")))
		}
	}
	check("writers", writers, map[string][]string{
		// Not R.fail (writes Status.Phase) nor readOnly (takes &p.Status to read it).
		"Status.Workers":   {"reset direct", "R.record direct", "setPhase via *WorkerStatus"},
		"facts.stepErrors": {"R.fail direct"},
	})

	var out bytes.Buffer
	f.print(&out, true)
	for _, want := range []string{
		"files                                        4\n",
		"back arrows (see below)                      1\n",
		"R methods                                    4 in 2 files\n",
		"functions taking *scope                      4 in 1 file\n",
		"writers of Status.Workers                    3 in 2 files\n",
		"  c.go -> a.go (2)\n",
		"  onlyNow (d.go): now(r)\n",
		"  R.pass (d.go): via callees: facts now pool +3\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// Taking the back arrows away leaves no cycle, and on small graphs the heuristic finds
// the fewest arrows that do.
func TestBackArrowsBreakEveryCycle(t *testing.T) {
	for _, tc := range []struct {
		arrows string
		want   int
	}{
		{"a>b b>a", 1},
		{"a>b b>c c>a", 1},
		{"a>b b>a b>c c>b c>a a>c", 3},     // every pair mutual: 3 must go
		{"a>b b>c c>a c>d d>c d>e", 2},     // two cycles sharing c
		{"a>b b>c c>d d>a b>d d>b", 2},     // the 4-cycle and b<->d
		{"x>y y>z", 0},                     // no cycle
		{"a>b b>a a>c c>d d>c d>e e>a", 2}, // b>a and c>d break all three cycles
	} {
		g := graphOf(tc.arrows)
		back := g.backArrows(g.sccs())
		if len(back) != tc.want {
			t.Errorf("%s: %d back arrows %v, want %d", tc.arrows, len(back), back, tc.want)
		}
		rest := graphOf(tc.arrows)
		for _, a := range back {
			delete(rest.out[a.From], a.To)
		}
		for _, c := range rest.sccs() {
			if len(c) > 1 {
				t.Errorf("%s: without %v, %v is still a cycle", tc.arrows, back, c)
			}
		}
	}
}

func graphOf(spec string) *fileGraph {
	g := &fileGraph{out: map[string]map[string]int{}}
	seen := map[string]bool{}
	for _, a := range strings.Fields(spec) {
		from, to, _ := strings.Cut(a, ">")
		for _, v := range []string{from, to} {
			if !seen[v] {
				seen[v] = true
				g.nodes = append(g.nodes, v)
			}
		}
		if g.out[from] == nil {
			g.out[from] = map[string]int{}
		}
		g.out[from][to] = 1
		g.arrows = append(g.arrows, arrow{From: from, To: to, refs: 1})
	}
	return g
}
