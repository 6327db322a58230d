package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAfterDrains: the day -> night switch of the sample, all four day VMs on one host.
// With every day node's drain ending, their four suspends are planned after all four
// drains; with one of them still draining (not given), none is; a VM without a node
// gives nothing to wait for.
func TestAfterDrains(t *testing.T) {
	spec, w := sample(t, "day")
	in := Input{Spec: spec, Layout: "night", Inventory: w.inv, Nodes: w.nodeStates("night")}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var drains []string
	for _, s := range p.Due(1) {
		if s.Action != Drain {
			t.Fatalf("due %s %s before the drains end:\n%s", s.Action, s.VM, p)
		}
		drains = append(drains, s.VM)
	}
	if len(drains) != 4 {
		t.Fatalf("due drains %v, want the four day VMs", drains)
	}
	got := AfterDrains(in, drains)
	if len(got) != 1 || fmt.Sprint(got[0].After) != "[gpu-day-1 gpu-day-2 gpu-day-3 gpu-day-4]" || len(got[0].Suspends) != 4 {
		t.Fatalf("AfterDrains = %+v, want the four suspends after the four drains", got)
	}
	for _, s := range got[0].Suspends {
		if s.Action != Suspend || !slices.Contains(drains, s.VM) {
			t.Errorf("step %s %s after the drains, want a suspend of a day VM", s.Action, s.VM)
		}
	}
	// By inventory path, as a layout may name its VMs.
	if got := AfterDrains(in, []string{"/dc1/vm/gpu/gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"}); len(got) != 1 ||
		fmt.Sprint(got[0].After) != "[/dc1/vm/gpu/gpu-day-1 gpu-day-2 gpu-day-3 gpu-day-4]" {
		t.Errorf("AfterDrains by path = %+v", got)
	}
	if got := AfterDrains(in, drains[:3]); len(got) != 0 {
		t.Errorf("AfterDrains with %s still draining = %+v, want none", drains[3], got)
	}
	if got := AfterDrains(in, nil); got != nil {
		t.Errorf("AfterDrains with no drains = %+v", got)
	}
	noNodes := in
	noNodes.Nodes = nil
	if got := AfterDrains(noNodes, drains); got != nil {
		t.Errorf("AfterDrains with no nodes to drain = %+v, want none", got)
	}
}

// TestRandomAfterDrains builds random worlds, takes a random part of the due drains as
// ending, and checks the suspends AfterDrains plans against the world as those drains
// leave it: each is a suspend the world accepts then (its VM running, its node drained,
// its host able to suspend its profile), on the host it is listed under, after drains
// of that host only, all of them at once leaving every GPU consistent; and a host whose
// plan, once those drains end, has suspends due gets them, no fewer.
func TestRandomAfterDrains(t *testing.T) {
	stats := map[string]int{}
	for seed := uint64(1); seed <= 1500; seed++ {
		r := rand.New(rand.NewPCG(seed, 4141))
		spec, w := randomWorld(r)
		target := spec.Layouts[r.IntN(len(spec.Layouts))].Name
		in := Input{Spec: spec, Layout: target, Inventory: w.inv, Nodes: w.nodeStates(target)}
		p, err := Build(in)
		if err != nil || len(p.Problems) > 0 {
			stats["infeasible"]++
			continue
		}
		var ending []string
		for _, s := range p.Due(1 + r.IntN(4)) {
			if s.Action == Drain && r.IntN(4) > 0 {
				ending = append(ending, s.VM)
			}
		}
		if len(ending) == 0 {
			continue
		}
		got := AfterDrains(in, ending)
		vmHost := map[string]string{}
		for _, vm := range w.inv.VMs {
			vmHost[vm.Name] = vm.Host
		}
		// The world as the drains leave it: the next pass's.
		for _, vm := range ending {
			if err := w.apply(Step{VM: vm, Action: Drain}, target); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		next, err := Build(Input{Spec: spec, Layout: target, Inventory: w.inv, Nodes: w.nodeStates(target)})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		listed := map[string]bool{}
		for _, a := range got {
			listed[a.Host] = true
			for _, vm := range a.After {
				if vmHost[vm] != a.Host || !slices.Contains(ending, vm) {
					t.Fatalf("seed %d: host %s waits for the drain of %s (host %s, ending %v)", seed, a.Host, vm, vmHost[vm], ending)
				}
			}
			for _, s := range a.Suspends {
				if s.Action != Suspend || vmHost[s.VM] != a.Host {
					t.Fatalf("seed %d: %s %s (host %s) listed under host %s", seed, s.Action, s.VM, vmHost[s.VM], a.Host)
				}
				if err := w.apply(s, target); err != nil {
					t.Fatalf("seed %d: a suspend planned after the drains %v is refused then: %v\nplan then:\n%s", seed, ending, err, next)
				}
				stats["suspends after drains"]++
			}
		}
		for _, hp := range next.Hosts {
			if listed[hp.Host] || !slices.ContainsFunc(ending, func(vm string) bool { return vmHost[vm] == hp.Host }) {
				continue
			}
			if slices.ContainsFunc(hp.due(), func(s Step) bool { return s.Action == Suspend }) {
				t.Fatalf("seed %d: host %s has suspends due once the drains %v end, and none was planned after them:\n%s", seed, hp.Host, ending, next)
			}
		}
		stats["hosts with suspends after drains"] += len(got)
	}
	t.Logf("%v", stats)
	for _, k := range []string{"suspends after drains", "hosts with suspends after drains"} {
		if stats[k] < 100 {
			t.Errorf("%s: only %d; the random worlds reach too little", k, stats[k])
		}
	}
}
