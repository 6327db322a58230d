package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/vsphere"
)

// TestEveryNodeToDrainIsCordonedFirst: the first pass of a transition cordons every node
// the plan drains before it evicts anything, so an evicted pod lands on a node that
// stays rather than on one whose drain comes later.
func TestEveryNodeToDrainIsCordonedFirst(t *testing.T) {
	h := newHarness(t, "cda-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	for i := 1; i <= 4; i++ {
		h.addPod("p"+string(rune('0'+i)), h.prefix+"day-"+string(rune('0'+i)), map[string]string{"app": "p"})
	}
	h.clock.SetTime(monday1950)
	h.reconcile(pool.Name)
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if n := h.node(vm); !n.Spec.Unschedulable {
			t.Errorf("node %s not cordoned in the first pass", n.Name)
		}
	}
}

// TestShortfallWhileTasksRunIsWaitedOut: a layout that reads infeasible while a vSphere
// task of the pool is in flight is not reported (the read may be caught between two
// states); once the tasks are done, a real shortfall is.
func TestShortfallWhileTasksRunIsWaitedOut(t *testing.T) {
	h := newHarness(t, "set-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.sim.HoldTasks()
	for i := 0; i < 20 && !h.anyTaskInFlight(pool.Name); i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	if !h.anyTaskInFlight(pool.Name) {
		t.Fatal("no task in flight")
	}
	h.rename("night-1", "night-1-renamed")
	p := h.passes(pool.Name, 3, 2*time.Second)
	if c := findCondition(p, gpupoolv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("Stalled while tasks were in flight: %s", c.Message)
	}
	h.sim.ReleaseTasks()
	p = h.passes(pool.Name, 5, 2*time.Second)
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonInfeasible, h.prefix+"night-1")
}

func (h *harness) anyTaskInFlight(name string) bool {
	for _, w := range h.get(name).Status.Workers {
		if w.Task != nil {
			return true
		}
	}
	return false
}

// TestAPassStoresItsIntentsInOneWrite: a pass that starts tasks for several VMs stores
// all their intents in one status write, and asks vCenter for none of them before that
// write succeeded; it then starts every one of them in the same pass.
func TestAPassStoresItsIntentsInOneWrite(t *testing.T) {
	h := newHarness(t, "bsw-")
	writes, suspendsAtFirstWrite := 0, -1
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, isPool := obj.(*gpupoolv1.GPUPoolProfile); isPool && sub == "status" {
					if writes++; writes == 1 {
						suspendsAtFirstWrite = h.sim.Calls("SuspendVM_Task")
					}
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.clock.SetTime(monday1950)
	for i := 0; i < 20; i++ {
		before := h.sim.Calls("SuspendVM_Task")
		writes, suspendsAtFirstWrite = 0, -1
		res := h.reconcile(pool.Name)
		if started := h.sim.Calls("SuspendVM_Task") - before; started > 0 {
			if started < 2 {
				t.Fatalf("the pass started %d suspend, want all the due ones (the day layout's VMs) together", started)
			}
			if writes != 2 || suspendsAtFirstWrite != before {
				t.Errorf("the pass that started %d suspends wrote the status %d times (want 2: the intents, then the task ids), and had asked vCenter for %d of them at its first write (want 0)",
					started, writes, suspendsAtFirstWrite-before)
			}
			for _, w := range h.get(pool.Name).Status.Workers {
				if w.Task != nil && w.Task.Operation == string(vsphere.OpSuspend) && w.Task.ID == "" {
					t.Errorf("worker %s: a suspend intent without its task id after the pass", w.VM)
				}
			}
			return
		}
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	t.Fatal("no pass started a suspend")
}
