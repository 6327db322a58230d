package controllers

import (
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/vsphere"
)

// TestPowerOnsAheadOfParks: day -> night on the one-host world with the starts past the
// pass, as the manager runs them. The pass that suspends the four day VMs stores the
// night VM's power-on intent in the same write and hands it out ahead of them. While the
// suspends run (held in vgpusim) the power-on is not asked, also across two more passes,
// and no pass asks vCenter about its intent. Once they end it is asked, with no pass in
// between, once. With one suspend failing it is not asked then; the passes after clear
// its intent, retry the suspend, and night's power-on is asked once in all.
func TestPowerOnsAheadOfParks(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		fail         bool
	}{
		{"the parks end well", "pah-", false},
		{"a park fails", "paf-", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			door, starts := h.doorStarts(true)
			pool := h.dayNight()
			h.clock.SetTime(monday1000)
			h.create(pool)
			h.converge(pool.Name, "day", 30)
			asked := door.counts()
			door.mu.Lock()
			door.powerOns = 0
			door.mu.Unlock()
			night := h.vm("night-1").Ref

			h.clock.SetTime(monday1950)
			h.sim.HoldTasksOf("SuspendVM_Task")
			if c.fail {
				h.sim.FailTasks("SuspendVM_Task", 1, nil)
			}
			if !h.handAhead(pool.Name, starts, 5) {
				t.Fatal("no pass handed out the four suspends and night's power-on")
			}
			intent := func() *gpupoolv1.TaskReference {
				for _, w := range h.get(pool.Name).Status.Workers {
					if strings.HasSuffix(w.VM, "night-1") {
						return w.Task
					}
				}
				return nil
			}
			if task := intent(); task == nil || task.Operation != string(vsphere.OpPowerOn) || task.ID != "" {
				t.Fatalf("night-1's stored task %+v, want the power-on's intent", task)
			}
			for range 2 {
				h.reconcile(pool.Name) // passes while the parks run
			}
			door.mu.Lock()
			powerOns, finds := door.powerOns, door.finds
			door.mu.Unlock()
			if powerOns != 0 || finds != 0 {
				t.Fatalf("while the suspends run: %d power-ons asked, %d intents looked up in vCenter; want none", powerOns, finds)
			}
			if task := intent(); !c.fail && (task == nil || task.Operation != string(vsphere.OpPowerOn) || task.ID != "") {
				t.Fatalf("night-1's stored task %+v after two passes, want its power-on's intent still", task)
			}

			h.sim.ReleaseTasks()
			starts.Wait() // no pass: the power-on is asked, or not, past them
			door.mu.Lock()
			powerOns = door.powerOns
			door.mu.Unlock()
			if want := map[bool]int{false: 1, true: 0}[c.fail]; powerOns != want {
				t.Fatalf("%d power-ons asked once the suspends ended, want %d", powerOns, want)
			}

			h.converge(pool.Name, "night", 60)
			h.checkNight(h.get(pool.Name))
			now, total := door.counts(), 0
			for vm, n := range now {
				total += n - asked[vm]
				if n-asked[vm] > 1 && (!c.fail || vm == night) { // a day VM's failed suspend is retried
					t.Errorf("VM %s's operations asked %d times, want once", vm, n-asked[vm])
				}
			}
			if want := map[bool]int{false: 5, true: 6}[c.fail]; total != want {
				t.Errorf("%d operations asked, want %d (four suspends, one retried when it failed, and night's power-on)", total, want)
			}
			door.mu.Lock()
			defer door.mu.Unlock()
			if door.powerOns != 1 {
				t.Errorf("night's power-on asked %d times in all, want once", door.powerOns)
			}
			if door.finds != 0 {
				t.Errorf("vCenter was asked %d times for the task of an intent", door.finds)
			}
			if len(door.unstored) > 0 {
				t.Errorf("starts asked before their intents were stored: %v", door.unstored)
			}
		})
	}
}

// TestPowerOnsAheadDroppedForAnotherLayout: day -> night hands night's power-on out
// ahead of the four suspends; while they run, an override asks for day again. The pass
// on the new spec drops the power-on not yet asked: once the suspends end it is not
// asked, and the pool goes back to day with each day VM suspended and resumed once and
// night never powered on.
func TestPowerOnsAheadDroppedForAnotherLayout(t *testing.T) {
	h := newHarness(t, "pad-")
	door, starts := h.doorStarts(true)
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	asked := door.counts()
	night := h.vm("night-1").Ref

	h.clock.SetTime(monday1950)
	h.sim.HoldTasksOf("SuspendVM_Task")
	if !h.handAhead(pool.Name, starts, 5) {
		t.Fatal("no pass handed out the four suspends and night's power-on")
	}
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Override = &gpupoolv1.Override{Layout: "day"} })
	h.reconcile(pool.Name)
	h.sim.ReleaseTasks()
	starts.Wait()
	if n := door.counts()[night] - asked[night]; n != 0 {
		t.Fatalf("night's power-on asked %d times after day was wanted again, want never", n)
	}
	h.converge(pool.Name, "day", 60)
	h.checkDay(h.get(pool.Name))
	now, total := door.counts(), 0
	for vm, n := range now {
		total += n - asked[vm]
		if vm != night && n-asked[vm] != 2 {
			t.Errorf("day VM %s: %d operations asked, want its suspend and its resume", vm, n-asked[vm])
		}
	}
	if total != 8 || now[night] != asked[night] {
		t.Errorf("%d operations asked, night's %d; want 8 (four suspends, four resumes) and none of night's", total, now[night]-asked[night])
	}
	door.mu.Lock()
	defer door.mu.Unlock()
	if door.finds != 0 || len(door.unstored) > 0 {
		t.Errorf("intents looked up in vCenter %d times; starts asked before their intents were stored: %v", door.finds, door.unstored)
	}
}
