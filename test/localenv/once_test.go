package localenv

import (
	"strings"
	"testing"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// TestOnceCheck: operations per changed VM by method and cordons per node, with every
// repeat named; a switch with none flags none.
func TestOnceCheck(t *testing.T) {
	task := func(vm, method string) vgpusim.TaskRecord { return vgpusim.TaskRecord{VMName: vm, Method: method} }
	clean := &switchTrace{
		Tasks:   []vgpusim.TaskRecord{task("day-1", "SuspendVM_Task"), task("day-2", "SuspendVM_Task"), task("night-1", "PowerOnVM_Task")},
		Cordons: map[string]int{"day-1": 1, "day-2": 1, "night-1": 0},
	}
	c := onceCheck("day>night", clean, 2)
	if len(c.Repeats) != 0 || c.CordonsPerNode != 1 || c.PerChangedVM["SuspendVM_Task"] != 1 || c.PerChangedVM["PowerOnVM_Task"] != 0.5 ||
		c.Calls["SuspendVM_Task"] != 2 || c.VMs["SuspendVM_Task"] != 2 {
		t.Errorf("clean switch: %+v", c)
	}
	repeated := &switchTrace{
		Tasks: []vgpusim.TaskRecord{task("day-1", "SuspendVM_Task"), task("day-1", "PowerOnVM_Task"), task("day-1", "SuspendVM_Task"),
			task("day-2", "SuspendVM_Task")},
		Cordons: map[string]int{"day-1": 2, "day-2": 1},
	}
	c = onceCheck("day>night", repeated, 2)
	want := []string{"day-1: SuspendVM_Task x2", "day-1: cordoned x2"}
	if strings.Join(c.Repeats, "|") != strings.Join(want, "|") || c.CordonsPerNode != 1.5 {
		t.Errorf("repeats %q, cordons per node %.2f; want %q and 1.50", c.Repeats, c.CordonsPerNode, want)
	}
	out := FormatOnce([]*BenchResult{{Hosts: 4, Once: []OnceCheck{c}}})
	if !strings.Contains(out, "REPEATED (2)") || !strings.Contains(out, "SuspendVM_Task 3 on 2 VMs (1.50 per changed VM)") {
		t.Errorf("report does not flag the repeats:\n%s", out)
	}
}
