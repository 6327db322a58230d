package main

import (
	"strings"
	"testing"
)

// TestControllersShape holds the pool controller's package to the shape issue 36 gave
// it: no cycle of more than three files (the Kueue controller's), no function that takes
// the pass's scope for one field or none, and no writer of the workers' status outside
// internal/execute. A change that breaks one says which, with the files to look at.
func TestControllersShape(t *testing.T) {
	f, err := measure("../../controllers", "", "scope", []string{"Status.Workers"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.comps {
		if len(c) > 3 {
			t.Errorf("%d files of controllers/ reference each other in a cycle: %s; run make structure for the arrows", len(c), strings.Join(c, " "))
		}
	}
	for _, tk := range f.structUse.narrow() {
		t.Errorf("%s (%s) takes the scope for %s: give it what it reads", tk.name, tk.file, fieldUse(tk))
	}
	for _, w := range f.writers["Status.Workers"] {
		t.Errorf("%s (%s) writes the workers' status: only internal/execute does", w.name, w.file)
	}
}
