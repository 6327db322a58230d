package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestTwoNodesWithOneProviderIDHoldTheVM: a stale Node object carries day-4's
// providerID (in upper case) when the pool switches to night. gpupool cannot tell
// which node is day-4's: it holds the VM running, cordons and drains neither node, and
// Stalled says why, naming both nodes and the providerID; the other VMs go on. Once the
// stale Node is deleted, day-4 is drained and parked.
func TestTwoNodesWithOneProviderIDHoldTheVM(t *testing.T) {
	h := newHarness(t, "amb-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.addPod("infer", h.prefix+"day-4", map[string]string{"app": "infer"})
	id := h.node("day-4").Spec.ProviderID
	// Listed after day-4, the stale node is the one the last-wins match took.
	stale := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + "day-4-stale"},
		Spec: corev1.NodeSpec{ProviderID: strings.ToUpper(id)}}
	h.must(k8s.Create(h.ctx, stale))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), stale) })

	h.clock.SetTime(monday1950)
	p := h.passes(pool.Name, 20, 10*time.Second)
	if st := h.vm("day-4"); st.PowerState != "poweredOn" {
		t.Errorf("day-4 is %s: parked although two nodes carry its providerID", st.PowerState)
	}
	for _, name := range []string{h.prefix + "day-4", stale.Name} {
		var n corev1.Node
		h.must(k8s.Get(h.ctx, client.ObjectKey{Name: name}, &n))
		if n.Spec.Unschedulable {
			t.Errorf("node %s cordoned although gpupool cannot tell whose it is", name)
		}
	}
	var pod corev1.Pod
	if err := k8s.Get(h.ctx, client.ObjectKey{Namespace: h.prefix + "apps", Name: "infer"}, &pod); err != nil || pod.DeletionTimestamp != nil {
		t.Errorf("day-4's pod was evicted (%v)", err)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, plan.ReasonAmbiguousNode,
		h.prefix+"day-4 and "+stale.Name, strings.ToLower(id), "delete the stale Node object")
	if w := worker(p, h.prefix+"day-4"); w == nil || w.Node != "" || !strings.Contains(w.Message, "held") {
		t.Errorf("day-4's worker status %+v, want no node and the hold in its message", w)
	}
	for _, vm := range []string{"day-1", "day-2", "day-3"} {
		if st := h.vm(vm); st.PowerState != "suspended" {
			t.Errorf("%s is %s, want the VMs whose node is known parked", vm, st.PowerState)
		}
	}

	h.must(k8s.Delete(h.ctx, stale))
	p = h.converge(pool.Name, "night", 40)
	if st := h.vm("day-4"); st.PowerState != "suspended" {
		t.Errorf("day-4 is %s once the stale node is gone, want parked", st.PowerState)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionFalse, "")
}
