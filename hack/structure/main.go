// Command structure measures how a Go package is put together, the figures issue 36
// asks of the pool controller before and after its redesign:
//
//	go run ./hack/structure ./controllers
//	go run ./hack/structure -type GPUPoolProfileReconciler -struct scope -writes Status.Workers,facts.stepErrors ./controllers
//
// It counts product files only (no _test.go file, no generated file): files and lines;
// the file graph (an arrow from a file to each other file declaring a package-level
// name or a method it uses), its mutual pairs, cycles and back arrows; the methods of a
// type; the functions taking a struct and the fields they use of it; the functions
// writing a field path. make structure runs it on ./controllers.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

func main() {
	typeName := flag.String("type", "GPUPoolProfileReconciler", "count the methods of this type (empty: skip)")
	structName := flag.String("struct", "scope", "find the functions taking this struct or a pointer to it (empty: skip)")
	paths := flag.String("writes", "Status.Workers,facts.stepErrors", "comma-separated field paths whose writers to find (empty: skip)")
	brief := flag.Bool("brief", false, "print the table only, not the lists after it")
	uses := flag.String("uses", "", "print only the arrows from and to this file (such as phases.go) with the names they stand for")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: structure [flags] PACKAGE_DIR (such as ./controllers)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	var writes []string
	if *paths != "" {
		writes = strings.Split(*paths, ",")
	}
	if *uses != "" {
		p, err := load(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, l := range buildGraph(p).uses(*uses) {
			fmt.Println(l)
		}
		return
	}
	m, err := measure(flag.Arg(0), *typeName, *structName, writes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "structure:", err)
		os.Exit(1)
	}
	m.print(os.Stdout, !*brief)
}

// figures are what measure found.
type figures struct {
	pkg        string
	files      []string
	lines      int
	graph      *fileGraph
	linked     int
	mutual     int
	comps      [][]string // strongly connected components, largest first
	inCycles   int        // files in components of two files or more
	arrowsIn   int        // arrows inside such components
	back       []arrow
	typeName   string
	methods    int
	methodsBy  map[string]int
	structName string
	structUse  *structUse
	writes     []string
	writers    map[string][]write
}

func measure(dir, typeName, structName string, paths []string) (*figures, error) {
	p, err := load(dir)
	if err != nil {
		return nil, err
	}
	f := &figures{pkg: p.path, files: p.names, graph: buildGraph(p), typeName: typeName,
		structName: structName, writes: paths, writers: map[string][]write{}}
	for _, n := range p.names {
		f.lines += p.lines[n]
	}
	f.linked, f.mutual = f.graph.pairs()
	f.comps = f.graph.sccs()
	compOf := map[string]int{}
	for i, c := range f.comps {
		if len(c) > 1 {
			f.inCycles += len(c)
		}
		for _, v := range c {
			compOf[v] = i
		}
	}
	for _, a := range f.graph.arrows {
		if compOf[a.From] == compOf[a.To] {
			f.arrowsIn++
		}
	}
	f.back = f.graph.backArrows(f.comps)
	if typeName != "" {
		f.methods, f.methodsBy = methodsOf(p, typeName)
	}
	if structName != "" {
		if f.structUse, err = useOfStruct(p, structName); err != nil {
			return nil, err
		}
	}
	for _, path := range paths {
		f.writers[path] = writers(p, strings.Split(path, "."))
	}
	return f, nil
}

// filesOf counts the distinct files of a list.
func filesOf[T any](items []T, file func(T) string) int {
	seen := map[string]bool{}
	for _, it := range items {
		seen[file(it)] = true
	}
	return len(seen)
}

func (f *figures) print(w io.Writer, details bool) {
	largest := 0
	if len(f.comps) > 0 && len(f.comps[0]) > 1 {
		largest = len(f.comps[0])
	}
	fmt.Fprintf(w, "%s: product files only (no _test.go, no generated file)\n\n", f.pkg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, args...))
	}
	row("files", "%d", len(f.files))
	row("lines", "%d", f.lines)
	row("arrows (file A uses a name file B declares)", "%d", len(f.graph.arrows))
	row("file pairs with an arrow either way", "%d", f.linked)
	row("mutual pairs (A->B and B->A)", "%d", f.mutual)
	row("files in a cycle (SCC of 2+ files)", "%d", f.inCycles)
	row("largest cycle (largest SCC)", "%d files", largest)
	row("arrows inside cycles", "%d", f.arrowsIn)
	row("back arrows (see below)", "%d", len(f.back))
	if f.typeName != "" {
		row(f.typeName+" methods", "%d in %s", f.methods, nFiles(len(f.methodsBy)))
	}
	var narrow []*taker
	if u := f.structUse; u != nil {
		narrow = u.narrow()
		if len(u.inner) > 0 {
			row(f.structName+" fields", "%d (+%d in %s)", len(u.fields), u.nested, strings.Join(sortedKeys(keysOf(u.inner)), ", "))
		} else {
			row(f.structName+" fields", "%d", len(u.fields))
		}
		row("functions taking *"+f.structName, "%d in %s", len(u.takers),
			nFiles(filesOf(u.takers, func(t *taker) string { return t.file })))
		row("  of which use one field of it or none", "%d in %s", len(narrow),
			nFiles(filesOf(narrow, func(t *taker) string { return t.file })))
	}
	for _, path := range f.writes {
		ws := f.writers[path]
		row("writers of "+path, "%d in %s", len(ws), nFiles(filesOf(ws, func(w write) string { return w.file })))
	}
	tw.Flush()
	if details {
		f.printDetails(w, narrow)
	}
}

func (f *figures) printDetails(w io.Writer, narrow []*taker) {
	fmt.Fprintf(w, "\nAn arrow A->B: file A uses a package-level func, type, var or const, or a method,\n"+
		"that file B declares (go/types resolves each identifier; fields do not count).\n"+
		"A cycle is a strongly connected component (SCC) of two files or more.\n"+
		"Back arrows point up in a layering of the files, users above what they use:\n"+
		"between SCCs a topological order (no arrow points up), inside each SCC the order\n"+
		"with the fewest upward arrows the Eades-Lin-Smyth heuristic and single moves find.\n"+
		"Removing them leaves no cycle; arrows inside cycles count both ways.\n")
	if len(f.comps) > 0 && len(f.comps[0]) > 1 {
		for i, c := range f.comps {
			if len(c) < 2 {
				break
			}
			fmt.Fprintf(w, "\ncycle %d (%d files): %s\n", i+1, len(c), strings.Join(c, " "))
		}
	}
	if len(f.back) > 0 {
		fmt.Fprintf(w, "\nback arrows (uses):\n")
		for _, a := range f.back {
			fmt.Fprintf(w, "  %s -> %s (%d)\n", a.From, a.To, a.refs)
		}
	}
	if f.typeName != "" && f.methods > 0 {
		fmt.Fprintf(w, "\n%s methods by file:%s\n", f.typeName, byFile(f.methodsBy))
	}
	if u := f.structUse; u != nil {
		fmt.Fprintf(w, "\n%s fields: %s\n", f.structName, strings.Join(u.fields, " "))
		for _, n := range sortedKeys(keysOf(u.inner)) {
			fmt.Fprintf(w, "  %s: %d fields\n", n, u.inner[n])
		}
		fmt.Fprintf(w, "\nfunctions taking *%s that use one field of it or none (callees included; r: read, w: written):\n", f.structName)
		for _, t := range narrow {
			fmt.Fprintf(w, "  %s (%s): %s\n", t.name, t.file, fieldUse(t))
		}
		fmt.Fprintf(w, "\nall functions taking *%s: fields used directly (r/w), +n more through callees, * hands it on where its use is not followed\n", f.structName)
		for _, t := range u.takers {
			more := ""
			if n := len(t.fields) - len(union(t.read, t.written)); n > 0 {
				more = fmt.Sprintf(" +%d", n)
			}
			if t.escapes {
				more += " *"
			}
			fmt.Fprintf(w, "  %s (%s): %s%s\n", t.name, t.file, fieldUse(t), more)
		}
	}
	for _, path := range f.writes {
		fmt.Fprintf(w, "\nwriters of %s (direct: it, an element or an element's field is assigned or\n"+
			"appended to, its address handed out of the package, or the same through a pointer\n"+
			"to what a prefix of the path selects; whole: a prefix of the path is assigned;\n"+
			"via *E: a field of a *E or an element of a []E is written, E being what the path\n"+
			"holds, wherever the pointer or slice came from):\n", path)
		for _, wr := range f.writers[path] {
			fmt.Fprintf(w, "  %s (%s): %s\n", wr.name, wr.file, strings.Join(sortedKinds(wr), ", "))
		}
	}
}

func nFiles(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

func byFile(m map[string]int) string {
	var b strings.Builder
	for _, k := range sortedKeys(keysOf(m)) {
		fmt.Fprintf(&b, " %s %d", k, m[k])
	}
	return b.String()
}

func keysOf(m map[string]int) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func union(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// fieldUse spells the fields a function uses itself: name(r), name(w) or name(rw).
func fieldUse(t *taker) string {
	var parts []string
	for _, k := range sortedKeys(union(t.read, t.written)) {
		mode := ""
		if t.read[k] {
			mode += "r"
		}
		if t.written[k] {
			mode += "w"
		}
		parts = append(parts, k+"("+mode+")")
	}
	if len(t.fields) > len(parts) {
		var via []string
		own := union(t.read, t.written)
		for _, k := range sortedKeys(t.fields) {
			if !own[k] {
				via = append(via, k)
			}
		}
		parts = append(parts, "via callees: "+strings.Join(via, " "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
