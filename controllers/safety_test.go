package controllers

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/testworld"
)

// The tests in this file each drive one fault of a real site through the reconciler on
// envtest + kwok + vgpusim, and check that the pool ends safe and explained: no node
// left cordoned without a reason in status, every VM in a known state.

// blockingPDB makes a PodDisruptionBudget that allows no disruption of the pods with
// app=name, and stands in for the disruption controller that envtest lacks.
func (h *harness) blockingPDB(name string) {
	h.t.Helper()
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
	h.must(k8s.Create(h.ctx, pdb))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	h.must(k8s.Status().Update(h.ctx, pdb))
}

// passes reconciles n times, letting the world settle and the clock move by the requeue
// delay (at most maxStep) after each pass, and returns the pool.
func (h *harness) passes(name string, n int, maxStep time.Duration) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	for i := 0; i < n; i++ {
		res := h.reconcile(name)
		h.settle()
		h.clock.Step(testworld.StepAtMost(res, maxStep))
	}
	return h.get(name)
}

func condition(t *testing.T, p *gpupoolv1.GPUPoolProfile, typ string, status metav1.ConditionStatus, reason string, contains ...string) {
	t.Helper()
	c := findCondition(p, typ)
	if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
		t.Errorf("%s = %+v, want %s with reason %s", typ, c, status, reason)
		return
	}
	for _, s := range contains {
		if !strings.Contains(c.Message, s) {
			t.Errorf("%s message %q lacks %q", typ, c.Message, s)
		}
	}
}

func worker(p *gpupoolv1.GPUPoolProfile, vm string) *gpupoolv1.WorkerStatus {
	for i := range p.Status.Workers {
		if p.Status.Workers[i].VM == vm {
			return &p.Status.Workers[i]
		}
	}
	return nil
}

// TestRepairDrainAbortsWithoutATransition (1): editing the active layout so that a VM
// leaves it is a repair, with no transition; its drain timing out with Abort must
// uncordon, remember the abort and report it, not panic.
func TestRepairDrainAbortsWithoutATransition(t *testing.T) {
	h := newHarness(t, "rab-")
	pool := h.dayNight()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.addPod("stuck", h.prefix+"day-4", map[string]string{"app": "stuck"})
	h.blockingPDB("stuck")

	// day-4 moves from the day layout to the night one: by day it must be parked.
	cur := h.get(pool.Name)
	cur.Spec.Layouts[0].Workers = cur.Spec.Layouts[0].Workers[:3]
	cur.Spec.Layouts[1].Workers = append(cur.Spec.Layouts[1].Workers, gpupoolv1.Worker{VM: h.prefix + "day-4", Profile: "grid_p100-16q"})
	h.must(k8s.Update(h.ctx, cur))

	p := h.passes(pool.Name, 12, 10*time.Second)
	if p.Status.Transition == nil || p.Status.Transition.AbortedTime == nil {
		t.Fatalf("want the repair's drain aborted, got transition %+v phase %s", p.Status.Transition, p.Status.Phase)
	}
	if p.Status.Phase != gpupoolv1.PhaseBlocked || p.Status.ActiveLayout != "day" {
		t.Errorf("phase %s active %s, want Blocked with day active", p.Status.Phase, p.Status.ActiveLayout)
	}
	condition(t, p, gpupoolv1.ConditionDegraded, metav1.ConditionTrue, ReasonDrainAborted, h.prefix+"apps/stuck")
	if n := h.node("day-4"); n.Spec.Unschedulable {
		t.Error("day-4 left cordoned after the abort")
	}
	if st := h.vm("day-4"); st.PowerState != "poweredOn" {
		t.Errorf("day-4 %s, want it left running", st.PowerState)
	}
	// More passes change nothing (and do not panic).
	h.passes(pool.Name, 3, time.Minute)
	if n := h.node("day-4"); n.Spec.Unschedulable {
		t.Error("the aborted repair was retried without a spec change")
	}
	containsAll(t, "events", h.events(), "TransitionAborted")
}

// TestLaggardNodeDoesNotHoldTheOthers (2): one day VM's node never registers; the other
// three are relabelled and uncordoned without waiting for it, and after nodeReadyTimeout
// the transition completes with that worker flagged Degraded (NodeNotReady).
func TestLaggardNodeDoesNotHoldTheOthers(t *testing.T) {
	h := newHarness(t, "lag-")
	pool := h.dayNight()
	pool.Spec.NodeReadyTimeout = &metav1.Duration{Duration: 3 * time.Minute}
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	h.must(k8s.Delete(h.ctx, h.node("day-3")))

	h.clock.SetTime(tuesday0750)
	var p *gpupoolv1.GPUPoolProfile
	othersUp := false
	for i := 0; i < 80; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		p = h.get(pool.Name)
		lag := worker(p, h.prefix+"day-3")
		if !othersUp && lag != nil && lag.Step == gpupoolv1.StepWaitNodeReady {
			othersUp = true
			for _, vm := range []string{"day-1", "day-2", "day-4"} {
				if n := h.node(vm); n.Spec.Unschedulable || n.Labels[LabelLayout] != "day" {
					othersUp = false
				}
			}
		}
		if p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "day" {
			break
		}
		h.clock.Step(testworld.Step(res))
	}
	if !othersUp {
		t.Error("the Ready day nodes were never all relabelled and uncordoned while day-3 was still waiting")
	}
	if p.Status.Phase != gpupoolv1.PhaseSteady || p.Status.ActiveLayout != "day" || p.Status.Transition != nil {
		t.Fatalf("phase %s active %s transition %+v: the transition did not complete around the laggard", p.Status.Phase, p.Status.ActiveLayout, p.Status.Transition)
	}
	condition(t, p, gpupoolv1.ConditionDegraded, metav1.ConditionTrue, ReasonNodeNotReady, h.prefix+"day-3")
	if w := worker(p, h.prefix+"day-3"); w == nil || w.Step != gpupoolv1.StepWaitNodeReady {
		t.Errorf("day-3's worker %+v, want it flagged at WaitNodeReady", w)
	}
	if st := h.vm("day-3"); st.PowerState != "poweredOn" {
		t.Errorf("day-3 %s, want powered on (only its node is missing)", st.PowerState)
	}
}

// TestForceFinishesWithStuckTerminatingPods (3): a pod that never goes away once deleted
// (its kubelet is dead, or a finalizer holds it) must not hold a Force drain forever.
func TestForceFinishesWithStuckTerminatingPods(t *testing.T) {
	h := newHarness(t, "frc-")
	pool := h.dayNight()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
	pool.Spec.Drain.OnTimeout = gpupoolv1.DrainForce
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	pod := h.addPod("held", h.prefix+"day-2", map[string]string{"app": "held"})
	before := pod.DeepCopy()
	pod.Finalizers = []string{"example.com/never"}
	h.must(k8s.Patch(h.ctx, pod, client.MergeFrom(before)))
	t.Cleanup(func() {
		var cur corev1.Pod
		if k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &cur) == nil {
			b := cur.DeepCopy()
			cur.Finalizers = nil
			_ = k8s.Patch(context.Background(), &cur, client.MergeFrom(b))
		}
	})
	h.blockingPDB("held")

	h.clock.SetTime(monday1950)
	p := h.converge(pool.Name, "night", 80)
	h.checkNight(p)
	var cur corev1.Pod
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &cur))
	if cur.DeletionTimestamp == nil {
		t.Error("the held pod was never deleted")
	}
	containsAll(t, "events", h.events(), "DrainForced")
}

// TestEvictionErrorsCountTowardTheTimeout (4): a pod that two PodDisruptionBudgets cover
// cannot be evicted (the API server answers 500). The error is named, the other node's
// drain goes on in the same passes, and Abort happens at the timeout.
func TestEvictionErrorsCountTowardTheTimeout(t *testing.T) {
	h := newHarness(t, "evx-")
	pool := h.dayNight()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.addPod("twice", h.prefix+"day-1", map[string]string{"app": "twice", "tier": "x"})
	h.addPod("free", h.prefix+"day-2", map[string]string{"app": "free"})
	for _, name := range []string{"twice-a", "twice-b"} {
		one := intstr.FromInt32(0)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "twice"}}},
		}
		h.must(k8s.Create(h.ctx, pdb))
	}

	h.clock.SetTime(monday1950)
	sawError := false
	var p *gpupoolv1.GPUPoolProfile
	for i := 0; i < 20; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		p = h.get(pool.Name)
		if c := findCondition(p, gpupoolv1.ConditionProgressing); c != nil && strings.Contains(c.Message, h.prefix+"apps/twice") && strings.Contains(c.Message, "eviction failed") {
			sawError = true
		}
		if p.Status.Phase == gpupoolv1.PhaseBlocked {
			break
		}
		h.clock.Step(testworld.Step(res))
	}
	if !sawError {
		t.Error("the eviction error was never named in the Progressing condition")
	}
	if p.Status.Transition == nil || p.Status.Transition.AbortedTime == nil {
		t.Fatalf("want the transition aborted at the timeout, got %+v", p.Status.Transition)
	}
	var pods corev1.PodList
	h.must(k8s.List(h.ctx, &pods, client.InNamespace(h.prefix+"apps"), client.MatchingLabels{"app": "free"}))
	if len(pods.Items) != 0 {
		t.Error("day-2's pod was not evicted while day-1's eviction failed")
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if n := h.node(vm); n.Spec.Unschedulable {
			t.Errorf("node %s left cordoned after the abort", n.Name)
		}
	}
}

// TestRunningVMWithoutNodeIsNeverParked (5): a day VM whose node cannot be found is held
// (Stalled, NodeNotFound) rather than suspended under its pods; the others go on. Once
// the spec says it is no Kubernetes worker, it is parked without a drain.
func TestRunningVMWithoutNodeIsNeverParked(t *testing.T) {
	h := newHarness(t, "nnf-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.must(k8s.Delete(h.ctx, h.node("day-4")))

	h.clock.SetTime(monday1950)
	p := h.passes(pool.Name, 25, 10*time.Second)
	if st := h.vm("day-4"); st.PowerState != "poweredOn" {
		t.Fatalf("day-4 is %s: a running VM without a node was parked", st.PowerState)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, plan.ReasonNodeNotFound, h.prefix+"day-4", "workers[].noNode")
	for _, vm := range []string{"day-1", "day-2", "day-3"} {
		if st := h.vm(vm); st.PowerState != "suspended" {
			t.Errorf("%s is %s, want the VMs with nodes parked", vm, st.PowerState)
		}
	}

	cur := h.get(pool.Name)
	for i := range cur.Spec.Layouts[0].Workers {
		if cur.Spec.Layouts[0].Workers[i].VM == h.prefix+"day-4" {
			cur.Spec.Layouts[0].Workers[i].NoNode = true
		}
	}
	h.must(k8s.Update(h.ctx, cur))
	p = h.converge(pool.Name, "night", 40)
	if st := h.vm("day-4"); st.PowerState != "suspended" {
		t.Errorf("day-4 is %s after noNode, want parked", st.PowerState)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionFalse, "")
}

// rename renames a VM in vgpusim through the vSphere API, as an admin would. vm is the
// name the VM had when the simulator started.
func (h *harness) rename(vm, to string) {
	h.t.Helper()
	c := h.admin()
	ref, ok := h.sim.VMRef(h.prefix + vm)
	if !ok {
		h.t.Fatalf("no VM %s", vm)
	}
	task, err := object.NewVirtualMachine(c.Client, vimtypes.ManagedObjectReference{Type: "VirtualMachine", Value: ref}).Rename(h.ctx, h.prefix+to)
	h.must(err)
	h.must(task.Wait(h.ctx))
}

// admin is a govmomi client of the simulator, as an admin's govc would be; it logs out
// when the test ends.
func (h *harness) admin() *govmomi.Client {
	h.t.Helper()
	u := *h.sim.URL
	u.User = url.UserPassword(h.sim.Username, h.sim.Password)
	c, err := govmomi.NewClient(h.ctx, &u, true)
	h.must(err)
	h.t.Cleanup(func() { _ = c.Logout(context.Background()) })
	return c
}

// TestInfeasibleMidTransitionBringsBackThePreviousLayout (6): a day VM is renamed after
// night-1 was parked, so the day layout cannot be completed. The pool brings night back
// (night-1 resumes, its node is uncordoned) and says so; once the name is back, day is
// reached.
func TestInfeasibleMidTransitionBringsBackThePreviousLayout(t *testing.T) {
	h := newHarness(t, "mid-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)

	h.clock.SetTime(tuesday0750)
	for i := 0; i < 40 && h.vm("night-1").PowerState == "poweredOn"; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	if h.vm("night-1").PowerState == "poweredOn" {
		t.Fatal("night-1 was never parked")
	}
	h.rename("day-2", "day-2-renamed")

	p := h.passes(pool.Name, 30, 10*time.Second)
	if st := h.vm("night-1"); st.PowerState != "poweredOn" {
		t.Errorf("night-1 is %s: the pool was left without capacity", st.PowerState)
	}
	if n := h.node("night-1"); n.Spec.Unschedulable || !nodes.Ready(n) {
		t.Errorf("night-1's node: unschedulable %v ready %v, want it back in service", n.Spec.Unschedulable, nodes.Ready(n))
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonInfeasible, h.prefix+"day-2", "layout night is brought back")
	if p.Status.Phase != gpupoolv1.PhaseBlocked {
		t.Errorf("phase %s, want Blocked", p.Status.Phase)
	}
	for _, vm := range []string{"day-1", "day-3", "day-4"} {
		if n := h.node(vm); n.Spec.Unschedulable && n.Labels[LabelParked] != "true" {
			t.Errorf("node %s cordoned without being parked", n.Name)
		}
	}

	h.rename("day-2", "day-2")
	h.checkDay(h.converge(pool.Name, "day", 60))
}

// TestRemovedVMIsReleased (7): a parked VM removed from the spec gets its node back:
// uncordoned, without gpupool's labels and taints, and out of the status.
func TestRemovedVMIsReleased(t *testing.T) {
	h := newHarness(t, "rmv-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	if n := h.node("day-4"); !n.Spec.Unschedulable || n.Labels[LabelParked] != "true" {
		t.Fatalf("day-4's node is not parked: %v", n.Labels)
	}

	cur := h.get(pool.Name)
	cur.Spec.Layouts[0].Workers = cur.Spec.Layouts[0].Workers[:3]
	h.must(k8s.Update(h.ctx, cur))
	p := h.passes(pool.Name, 3, 10*time.Second)
	n := h.node("day-4")
	if n.Spec.Unschedulable || len(gpupoolTaints(n)) != 0 {
		t.Errorf("day-4's node still cordoned %v or tainted %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") {
			t.Errorf("day-4's node keeps label %s", k)
		}
	}
	if w := worker(p, h.prefix+"day-4"); w != nil {
		t.Errorf("day-4 is still in the status: %+v", w)
	}
	containsAll(t, "events", h.events(), "NodeReleased")
}

// TestSuspendedStateIsNotDiscardedSilently (9): a suspended VM whose profile must change
// is held until the spec allows discarding its state, and a Warning says when it is.
func TestSuspendedStateIsNotDiscardedSilently(t *testing.T) {
	h := newHarness(t, "dsc-")
	pool := h.dayNight()
	pool.Spec.Layouts = append(pool.Spec.Layouts, gpupoolv1.Layout{Name: "half",
		Workers: []gpupoolv1.Worker{{VM: h.prefix + "night-1", Profile: "grid_p100-4q"}, {VM: h.prefix + "day-1", Profile: "grid_p100-4q"}}})
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 60) // night-1 is suspended with 16q now

	cur := h.get(pool.Name)
	cur.Spec.Override = &gpupoolv1.Override{Layout: "half"}
	h.must(k8s.Update(h.ctx, cur))
	p := h.passes(pool.Name, 20, 10*time.Second)
	if st := h.vm("night-1"); st.PowerState != "suspended" || st.Profile != "grid_p100-16q" {
		t.Fatalf("night-1 %+v: its suspended state was discarded without the spec allowing it", st)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, plan.ReasonSuspendedStateAtRisk, h.prefix+"night-1", "discardSuspendedState")

	cur = h.get(pool.Name)
	cur.Spec.DiscardSuspendedState = true
	h.must(k8s.Update(h.ctx, cur))
	h.converge(pool.Name, "half", 60)
	if st := h.vm("night-1"); st.PowerState != "poweredOn" || st.Profile != "grid_p100-4q" {
		t.Errorf("night-1 %+v, want running with grid_p100-4q", st)
	}
	containsAll(t, "events", h.events(), "SuspendedStateDiscarded")
}
