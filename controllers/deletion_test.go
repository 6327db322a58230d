package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/vsphere"
)

// untilPowerOnsInFlight switches the pool from night to day with vgpusim holding the
// power-ons, and reconciles until the day VMs' power-ons are in flight.
func (h *harness) untilPowerOnsInFlight(name string) {
	h.t.Helper()
	h.clock.SetTime(monday1950)
	h.converge(name, "night", 60)
	h.sim.HoldTasksOf("PowerOnVM_Task")
	h.clock.SetTime(tuesday0750)
	h.until(name, 60, "the day VMs' power-ons in flight", func(p *gpupoolv1.GPUPoolProfile) bool {
		n := 0
		for _, w := range p.Status.Workers {
			if w.Task != nil && w.Task.Operation == string(vsphere.OpPowerOn) && w.Task.ID != "" {
				n++
			}
		}
		return n == 4
	})
}

// released checks that a running VM's node got back everything gpupool added.
func (h *harness) released(vm string) {
	h.t.Helper()
	n := h.node(vm)
	if n.Spec.Unschedulable {
		h.t.Errorf("%s: node still cordoned", vm)
	}
	if len(gpupoolTaints(n)) != 0 {
		h.t.Errorf("%s: node keeps taints %v", vm, n.Spec.Taints)
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") {
			h.t.Errorf("%s: node keeps label %s", vm, k)
		}
	}
	for k := range n.Annotations {
		// gpupool.dev/sim-* are the test world's (the power wire and kwok's stages).
		if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") && !strings.HasPrefix(k, cluster.SimKeyPrefix) {
			h.t.Errorf("%s: node keeps annotation %s", vm, k)
		}
	}
}

func (h *harness) gone(name string) bool {
	err := k8s.Get(h.ctx, client.ObjectKey{Name: name}, &gpupoolv1.GPUPoolProfile{})
	return apierrors.IsNotFound(err)
}

// TestDeletionWaitsForTasksInFlight (issue 21): a pool deleted while its VMs are being
// powered on keeps its finalizer until the power-ons have ended, says so in status and
// events, and then gives the running VMs' nodes back (uncordoned, unmarked); the VM it
// had parked stays parked.
func TestDeletionWaitsForTasksInFlight(t *testing.T) {
	h := newHarness(t, "dwt-")
	pool := h.dayNight()
	h.create(pool)
	h.untilPowerOnsInFlight(pool.Name)

	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	for range 3 {
		res := h.reconcile(pool.Name)
		if h.gone(pool.Name) {
			t.Fatal("the finalizer was removed while the power-ons were in flight")
		}
		if res.RequeueAfter <= 0 || res.RequeueAfter > deletionTaskWait {
			t.Errorf("requeue after %s while waiting for tasks", res.RequeueAfter)
		}
		h.clock.Step(requeueTask)
	}
	p := h.get(pool.Name)
	if c := findCondition(p, gpupoolv1.ConditionReady); c == nil || c.Reason != ReasonDeleting || !strings.Contains(c.Message, "waiting for 4 vSphere task(s)") {
		t.Errorf("Ready %+v, want Deleting and the tasks waited for", c)
	}
	// The first transition, before any layout was active, says where it started from.
	containsAll(t, "events", h.events(), "DeletionWaitsForTasks", "switching from the VMs as found (no layout active yet) to \"night\"")
	if n := h.sim.ReleaseTasks(); n != 4 {
		t.Fatalf("released %d tasks, want the 4 power-ons", n)
	}
	h.settle()
	h.reconcile(pool.Name)
	if !h.gone(pool.Name) {
		t.Fatalf("pool still there once its tasks ended: %s", testworld.Conditions(h.get(pool.Name)))
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		h.released(vm)
	}
	if n := h.node("night-1"); !n.Spec.Unschedulable || n.Labels[LabelParked] != "true" {
		t.Errorf("night-1, parked, lost its parked marks: unschedulable %v, labels %v", n.Spec.Unschedulable, n.Labels)
	}
	if got := h.sim.Calls("PowerOnVM_Task"); got != 5 { // night-1 once, the day VMs once each
		t.Errorf("PowerOnVM_Task called %d times, want 5", got)
	}
}

// TestDeletionWaitIsBounded: tasks that never end (vCenter lost them, or cannot be
// reached) hold a deletion at most deletionTaskWait from when gpupool started them; then
// a Warning says so and the nodes are released by their VMs' observed power states.
func TestDeletionWaitIsBounded(t *testing.T) {
	h := newHarness(t, "dwb-")
	pool := h.dayNight()
	h.create(pool)
	h.untilPowerOnsInFlight(pool.Name)
	t.Cleanup(func() { h.sim.ReleaseTasks() })

	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	h.reconcile(pool.Name)
	h.clock.Step(deletionTaskWait - 2*time.Second) // the tasks started a pass or two ago
	h.reconcile(pool.Name)
	if h.gone(pool.Name) {
		t.Fatal("the finalizer was removed before deletionTaskWait")
	}
	h.clock.Step(5 * time.Second)
	h.reconcile(pool.Name)
	if !h.gone(pool.Name) {
		t.Fatalf("pool still there %s after its tasks started: %s", deletionTaskWait, testworld.Conditions(h.get(pool.Name)))
	}
	containsAll(t, "events", h.events(), "DeletionTasksUnsettled")
	// The held power-ons never ran: the day VMs are suspended, their nodes stay parked.
	for _, vm := range []string{"day-1", "night-1"} {
		if n := h.node(vm); !n.Spec.Unschedulable || n.Labels[LabelParked] != "true" {
			t.Errorf("%s, not running, lost its parked marks: %v", vm, n.Labels)
		}
	}
}

// TestPauseFollowsTasksInFlight: a pool paused while its power-ons are in flight starts
// nothing more, but records the tasks as they end, and its Paused condition names them
// until then.
func TestPauseFollowsTasksInFlight(t *testing.T) {
	h := newHarness(t, "pft-")
	pool := h.dayNight()
	h.create(pool)
	h.untilPowerOnsInFlight(pool.Name)
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = true })
	calls := h.sim.CallCounts()
	res := h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if c := findCondition(p, gpupoolv1.ConditionPaused); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "4 vSphere task(s) started before the pause") {
		t.Errorf("Paused %+v, want it to name the 4 power-ons in flight", c)
	}
	if res.RequeueAfter <= 0 {
		t.Error("a paused pool with tasks in flight is not looked at again")
	}
	h.sim.ReleaseTasks()
	h.settle()
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	for _, w := range p.Status.Workers {
		if w.Task != nil {
			t.Errorf("worker %s still shows task %+v after it ended", w.VM, w.Task)
		}
	}
	if c := findCondition(p, gpupoolv1.ConditionPaused); c == nil || strings.Contains(c.Message, "task(s)") {
		t.Errorf("Paused %+v still names tasks", c)
	}
	after := h.sim.CallCounts()
	for _, m := range []string{"PowerOnVM_Task", "SuspendVM_Task", "PowerOffVM_Task", "ReconfigVM_Task"} {
		if after[m] != calls[m] {
			t.Errorf("%s called while paused: %d -> %d", m, calls[m], after[m])
		}
	}
	var n corev1.Node
	h.must(k8s.Get(h.ctx, client.ObjectKey{Name: h.prefix + "day-1"}, &n))
	if !n.Spec.Unschedulable {
		t.Error("a paused pool touched day-1's node")
	}
}
