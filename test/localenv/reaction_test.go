package localenv

import (
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// A synthetic switch on one host: the old VM is cordoned 0.2 s after the switch is
// asked for, its pods are gone at 1 s, its suspend runs 1.5-3.5 s; the new VM's
// reconfigure runs 3.7-4.2 s and its power-on 4.3-5.3 s; its node is ready for work at
// 7 s and relabelled at 7.4 s. vgpusim's clock runs 10 s ahead of the benchmark's.
func syntheticSwitch() *switchTrace {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	vg := func(s float64) time.Time { return at(s).Add(10 * time.Second) }
	return &switchTrace{
		Start:  t0,
		Old:    map[string]*nodeTrace{"day-00-0-0": {Cordoned: at(0.2), PodsGone: at(1)}},
		New:    map[string]*nodeTrace{"night-00-0": {ReadyForWork: at(7), Done: at(7.4)}},
		Offset: 10 * time.Second,
		HostOf: func(vm string) string { return strings.Split(vm, "-")[1] },
		Tasks: []vgpusim.TaskRecord{
			{Method: "SuspendVM_Task", VMName: "day-00-0-0", Start: vg(1.5), Finish: vg(3.5)},
			{Method: "PowerOnVM_Task", VMName: "night-00-0", Start: vg(4.3), Finish: vg(5.3)},
			{Method: "ReconfigVM_Task", VMName: "night-00-0", Start: vg(3.7), Finish: vg(4.2)},
		},
	}
}

func TestReactionsOfASyntheticSwitch(t *testing.T) {
	got := syntheticSwitch().reactions()
	want := map[string]time.Duration{
		ReactCordon: 200 * time.Millisecond, ReactPark: 500 * time.Millisecond, ReactFreed: 200 * time.Millisecond,
		ReactTask: 100 * time.Millisecond, ReactRelabel: 400 * time.Millisecond,
	}
	for k, w := range want {
		if len(got[k]) != 1 || (got[k][0]-w).Abs() > time.Microsecond {
			t.Errorf("%s: %v, want [%s]", k, got[k], w)
		}
	}
}

func TestCriticalPathOfASyntheticSwitch(t *testing.T) {
	b := syntheticSwitch().criticalPath()
	// vSphere: suspend 2 s, reconfigure 0.5 s, power-on 1 s. Kubernetes: evictions
	// 0.2-1 s, node ready 5.3-7 s. gpupool: cordon 0.2, park 0.5, freed 0.2, between
	// tasks 0.1, relabel 0.4.
	want := Breakdown{VSphere: 3500 * time.Millisecond, Kubernetes: 2500 * time.Millisecond, Gpupool: 1400 * time.Millisecond}
	near := func(a, b time.Duration) bool { return (a - b).Abs() < time.Microsecond }
	if !near(b.VSphere, want.VSphere) || !near(b.Kubernetes, want.Kubernetes) || !near(b.Gpupool, want.Gpupool) {
		t.Errorf("breakdown %+v, want %+v", b, want)
	}
	if total := b.VSphere + b.Kubernetes + b.Gpupool; !near(total, 7400*time.Millisecond) {
		t.Errorf("the breakdown adds up to %s, want the switch's 7.4 s", total)
	}
}

// TestParkWaitsForTheHostsDrains: a host with two old VMs, one emptied at 1 s and one
// at 4 s, parked together at 4.3 s (the plan parks a host's VMs once all its drains
// are done): both parks react in 0.3 s, and the critical path through that host
// counts the second node's eviction as Kubernetes' time, not gpupool's.
func TestParkWaitsForTheHostsDrains(t *testing.T) {
	tr := syntheticSwitch()
	at := func(s float64) time.Time { return tr.Start.Add(time.Duration(s * float64(time.Second))) }
	vg := func(s float64) time.Time { return at(s).Add(10 * time.Second) }
	tr.Old["day-00-0-0"].PodsGone = at(1)
	tr.Old["day-00-0-1"] = &nodeTrace{Cordoned: at(0.2), PodsGone: at(4)}
	tr.Tasks = []vgpusim.TaskRecord{
		{Method: "SuspendVM_Task", VMName: "day-00-0-0", Start: vg(4.3), Finish: vg(6.3)},
		{Method: "SuspendVM_Task", VMName: "day-00-0-1", Start: vg(4.3), Finish: vg(6.3)},
		{Method: "ReconfigVM_Task", VMName: "night-00-0", Start: vg(6.5), Finish: vg(7)},
		{Method: "PowerOnVM_Task", VMName: "night-00-0", Start: vg(7.1), Finish: vg(8.1)},
	}
	tr.New["night-00-0"] = &nodeTrace{ReadyForWork: at(9), Done: at(9.4)}
	parks := tr.reactions()[ReactPark]
	if len(parks) != 2 || (parks[0]-300*time.Millisecond).Abs() > time.Microsecond || (parks[1]-300*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("parks reacted in %v, want 300ms each", parks)
	}
	b := tr.criticalPath()
	// gpupool: cordon 0.2, park 0.3, freed 0.2, between tasks 0.1, relabel 0.4.
	// Kubernetes: evictions 0.2-4 s, node ready 8.1-9 s. vSphere: 2 + 0.5 + 1.
	want := Breakdown{VSphere: 3500 * time.Millisecond, Kubernetes: 4700 * time.Millisecond, Gpupool: 1200 * time.Millisecond}
	near := func(a, b time.Duration) bool { return (a - b).Abs() < time.Microsecond }
	if !near(b.VSphere, want.VSphere) || !near(b.Kubernetes, want.Kubernetes) || !near(b.Gpupool, want.Gpupool) {
		t.Errorf("breakdown %+v, want %+v", b, want)
	}
}

// TestSlowestOfASyntheticSwitch: the slowest lists name the worker that waited longest
// first, with times on the benchmark's clock (vgpusim's offset taken off).
func TestSlowestOfASyntheticSwitch(t *testing.T) {
	tr := syntheticSwitch()
	at := func(s float64) time.Time { return tr.Start.Add(time.Duration(s * float64(time.Second))) }
	vg := func(s float64) time.Time { return at(s).Add(10 * time.Second) }
	tr.New["night-00-1"] = &nodeTrace{ReadyForWork: at(7), Done: at(9)}
	tr.Tasks = append(tr.Tasks, vgpusim.TaskRecord{Method: "PowerOnVM_Task", VMName: "night-00-1", Start: vg(4.5), Finish: vg(5)})
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"relabels", tr.slowestRelabels(3), []string{"night-00-1 2s (ready at 7s, relabelled at 9s)", "night-00-0 400ms (ready at 7s, relabelled at 7.4s)"}},
		{"freed", tr.slowestFreed(1), []string{"night-00-1 1s (GPUs freed at 3.5s, task at 4.5s)"}},
		{"parks", tr.slowestParks(3), []string{"day-00-0-0 500ms (host drained at 1s, park at 1.5s)"}},
	} {
		if strings.Join(c.got, "; ") != strings.Join(c.want, "; ") {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestPercentilesNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	if p.N != 100 || p.P50 != 50*time.Millisecond || p.P99 != 99*time.Millisecond || p.Max != 100*time.Millisecond {
		t.Errorf("percentiles %+v", p)
	}
	if (percentiles(nil) != Percentiles{}) {
		t.Error("percentiles of nothing are not zero")
	}
	if p := percentiles([]time.Duration{time.Second}); p.P50 != time.Second || p.P99 != time.Second {
		t.Errorf("one value: %+v", p)
	}
}
