package inventory

import "testing"

// TestIndexFindsAsFindVM: the index finds what FindVM finds, for a path, a unique name,
// a name two VMs carry, a path that is also another VM's name, and nothing.
func TestIndexFindsAsFindVM(t *testing.T) {
	inv := &Inventory{VMs: []VM{
		{Name: "a", Path: "/dc/vm/a"},
		{Name: "dup", Path: "/dc/vm/x/dup"},
		{Name: "dup", Path: "/dc/vm/y/dup"},
		{Name: "/dc/vm/b", Path: ""},
		{Name: "b", Path: "/dc/vm/b"},
		{Name: "nopath"},
	}}
	x := inv.Index()
	for _, id := range []string{"a", "/dc/vm/a", "dup", "/dc/vm/x/dup", "/dc/vm/y/dup", "/dc/vm/b", "b", "nopath", "none", ""} {
		want, wok := inv.FindVM(id)
		got, ok := x.FindVM(id)
		if ok != wok || got != want {
			t.Errorf("%q: index found %v %v, FindVM %v %v", id, got, ok, want, wok)
		}
	}
}
