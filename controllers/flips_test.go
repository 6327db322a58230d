package controllers

import (
	"fmt"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestFlipsAtEveryStep (issue 21): the wanted layout flips back to night after k passes
// of the way to day, for k = 1, 2, ..., while the tasks the last pass started are still
// in flight (vgpusim holds them), and the pass after the flip is made with them in
// flight. vSphere must refuse nothing (no power-on into a GPU that a power-on in flight
// takes), each VM gets each operation at most once per flip cycle, and the pool ends at
// night with no running VM's node cordoned.
func TestFlipsAtEveryStep(t *testing.T) {
	h := newHarness(t, "flp-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	override := func(layout string) {
		h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Override = &gpupoolv1.Override{Layout: layout} })
	}
	refs := map[string]string{}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4", "night-1"} {
		st, _ := h.sim.VM(h.prefix + vm)
		refs[st.Ref] = vm
	}
	inFlightAtFlip, powerOnsAtFlip := 0, 0
	for k := 1; k <= 8; k++ {
		before := h.sim.VMCallCounts()
		h.events() // what came before this cycle
		override("day")
		h.sim.HoldTasks()
		for range k {
			h.sim.ReleaseTasks() // the tasks of the pass before end now
			h.sim.HoldTasks()
			h.settle()
			h.reconcile(pool.Name)
			h.clock.Step(requeueTask)
		}
		// Flip while the last pass's tasks run, and plan once with them in flight.
		override("night")
		if p := h.get(pool.Name); len(inFlight(p)) > 0 {
			inFlightAtFlip++
			if plannedInFlight(p)[h.prefix+"day-1"] == "PowerOnRequired" {
				powerOnsAtFlip++
			}
		}
		h.reconcile(pool.Name)
		h.sim.ReleaseTasks()
		h.settle()
		h.converge(pool.Name, "night", 60)

		for _, e := range h.events() {
			if strings.Contains(e, "Failed") {
				t.Errorf("flip after %d passes: %s", k, e)
			}
		}
		after := h.sim.VMCallCounts()
		for ref, vm := range refs {
			for _, m := range []string{"PowerOnVM_Task", "SuspendVM_Task"} {
				if n := after[ref][m] - before[ref][m]; n > 1 {
					t.Errorf("flip after %d passes: VM %s got %d %s calls in one cycle", k, vm, n, m)
				}
			}
		}
		h.noStrandedNode(fmt.Sprintf("flip after %d passes", k))
	}
	if inFlightAtFlip < 2 || powerOnsAtFlip == 0 {
		t.Errorf("%d flips came with tasks in flight, %d with the day VMs' power-ons: the test shows little", inFlightAtFlip, powerOnsAtFlip)
	}
}

// noStrandedNode fails on a running VM whose node gpupool left cordoned.
func (h *harness) noStrandedNode(when string) {
	h.t.Helper()
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4", "night-1"} {
		if h.vm(vm).PowerState == "poweredOn" && h.node(vm).Spec.Unschedulable {
			h.t.Errorf("%s: VM %s runs, its node is cordoned", when, vm)
		}
	}
}
