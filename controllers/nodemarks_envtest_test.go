package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// noMarks fails the test when a node still carries a pool's state label, draining-soon
// warning or owner record.
func (h *harness) noMarks(when, vm string) {
	h.t.Helper()
	if n := h.node(vm); nodes.HasMarks(n) {
		h.t.Errorf("%s: node %s keeps gpupool's marks: state %q, drain-at %q, marked-by %q, taints %v", when, n.Name,
			n.Labels[LabelState], n.Annotations[AnnotationDrainAt], n.Annotations[AnnotationMarkedBy], n.Spec.Taints)
	}
}

// TestMarksLeaveWithThePool: the state label and the draining-soon warning go on every
// node the pool matches, relabelled or not, and come off again when the node is no
// longer a worker's node, when the pool is paused or its schedule unreadable
// (warnings), when vCenter cannot be read and the switch is cancelled (while it is
// still due they stay), and when the pool is
// deleted: from a node that was never relabelled (its readiness label is missing), from
// a node parked before any relabel, and from running ones. A VM held (its
// node is gone) does not stop the warnings of the others.
func TestMarksLeaveWithThePool(t *testing.T) {
	h := newHarness(t, "mark-")
	pool := h.dayNight()
	pool.Spec.Readiness.NodeLabels = map[string]string{"lab.example/licensed": "true"}
	pool.Spec.NodeReadyTimeout = &metav1.Duration{Duration: time.Hour}
	for _, vm := range []string{"day-2", "day-3", "day-4", "night-1"} {
		h.patchNodeObj(vm, func(n *corev1.Node) { n.Labels["lab.example/licensed"] = "true" })
	}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.until(pool.Name, 60, "day-2..4 ready, day-1 pending", func(p *gpupoolv1.GPUPoolProfile) bool {
		return h.node("day-1").Labels[LabelState] == StatePending && h.node("day-4").Labels[LabelState] == StateReady
	})
	if n := h.node("night-1"); n.Labels[LabelState] != StateParked || n.Labels[LabelPool] != "" {
		t.Fatalf("night-1, off from the start: want state parked before any relabel, got labels %v", n.Labels)
	}
	if n := h.node("day-1"); n.Labels[LabelPool] != "" || n.Annotations[AnnotationMarkedBy] != pool.Name {
		t.Fatalf("day-1 waits for its readiness label: want it marked by %s and not relabelled, got labels %v annotations %v", pool.Name, n.Labels, n.Annotations)
	}

	// day-4 is given another node, which does not exist: its old node is no longer the
	// worker's node and loses the marks; day-4 is held (no node).
	p := h.get(pool.Name)
	for i := range p.Spec.Layouts[0].Workers {
		if w := &p.Spec.Layouts[0].Workers[i]; w.VM == h.prefix+"day-4" {
			w.Node = h.prefix + "elsewhere"
		}
	}
	h.must(k8s.Update(h.ctx, p))
	h.reconcile(pool.Name)
	h.noMarks("day-4 has another node", "day-4")

	// Within warnAhead of the night switch the nodes it drains are warned, although
	// day-4 is held and day-1 still waits (the current plan is not done).
	h.clock.SetTime(monday1950.Add(-5 * time.Minute))
	h.reconcile(pool.Name)
	for _, vm := range []string{"day-2", "day-3"} {
		if n := h.node(vm); !nodes.HasWarning(n, monday1950) {
			t.Errorf("node %s not warned 5m before the switch while a VM is held: taints %v drain-at %q", n.Name, n.Spec.Taints, n.Annotations[AnnotationDrainAt])
		}
	}
	h.noMarks("a held VM's old node", "day-4")

	// Paused: no drain will happen, the warnings go (and come back when unpaused).
	p = h.get(pool.Name)
	p.Spec.Paused = true
	h.must(k8s.Update(h.ctx, p))
	h.reconcile(pool.Name)
	for _, vm := range []string{"day-1", "day-2", "day-3"} {
		if n := h.node(vm); nodes.HasAnyWarning(n) {
			t.Errorf("paused: node %s still warned: taints %v drain-at %q", n.Name, n.Spec.Taints, n.Annotations[AnnotationDrainAt])
		}
	}
	p = h.get(pool.Name)
	p.Spec.Paused = false
	h.must(k8s.Update(h.ctx, p))
	h.reconcile(pool.Name)
	if n := h.node("day-2"); !nodes.HasWarning(n, monday1950) {
		t.Errorf("unpaused: day-2 not warned again: drain-at %q", n.Annotations[AnnotationDrainAt])
	}

	warned := func(when string, want bool) {
		t.Helper()
		for _, vm := range []string{"day-2", "day-3"} {
			if n := h.node(vm); nodes.HasWarning(n, monday1950) != want || (!want && nodes.HasAnyWarning(n)) {
				t.Errorf("%s: node %s drain-at %q taints %v, want warned=%v", when, n.Name, n.Annotations[AnnotationDrainAt], n.Spec.Taints, want)
			}
		}
	}
	update := func(change func(*gpupoolv1.GPUPoolProfile)) {
		t.Helper()
		p := h.get(pool.Name)
		change(p)
		h.must(k8s.Update(h.ctx, p))
		h.reconcile(pool.Name)
	}
	// The schedule cannot be read: no switch is planned, the warnings go.
	update(func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.TimeZone = "Mars/Olympus_Mons" })
	warned("invalid time zone", false)
	update(func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.TimeZone = "Europe/Berlin" })
	warned("time zone fixed", true)
	// vCenter cannot be read (its Secret is gone): the warning of the switch still due
	// stays; once an override cancels that switch, it goes, without vCenter.
	update(func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CredentialsSecretRef.Name = "missing" })
	if c := findCondition(h.get(pool.Name), gpupoolv1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("want the pool Stalled without its credentials, got %+v", c)
	}
	warned("credentials missing, switch due", true)
	update(func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Override = &gpupoolv1.Override{Layout: "day", Until: &metav1.Time{Time: monday1950.Add(3 * time.Hour)}}
	})
	warned("credentials missing, switch cancelled", false)
	update(func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Override = nil
		p.Spec.VCenter.CredentialsSecretRef.Name = "vcenter"
	})
	warned("credentials back, override gone", true)

	// The pool is deleted: every node loses the marks, also day-1 (never relabelled) and
	// night-1 (parked before any relabel). Parked nodes with their parked marks:
	// TestClusterAPIMachineIsProtectedWhileParked.
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	h.reconcile(pool.Name)
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: pool.Name}, &gpupoolv1.GPUPoolProfile{}); err == nil {
		t.Fatal("pool still exists after its finalizer ran")
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4", "night-1"} {
		h.noMarks("pool deleted", vm)
	}
	if n := h.node("day-2"); n.Labels[LabelPool] != "" {
		t.Errorf("running day-2 keeps %s after the pool was deleted", LabelPool)
	}
}
