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
	"github.com/gpupool/gpupool/internal/execute"
)

// tenantPod puts a pod of a tenant (its own namespace, created here) on the VM's node,
// as the tenant's kubectl apply would with a nodeName: owned by a notional ReplicaSet
// unless bare, and changed by edit.
func (h *harness) tenantPod(tenant, name, vm string, bare bool, edit func(*corev1.Pod)) *corev1.Pod {
	h.t.Helper()
	ns := h.prefix + tenant
	if err := k8s.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		h.t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: h.prefix + vm, Containers: []corev1.Container{{Name: "c", Image: "serve"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	if !bare {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: "d9d2b2f6-3c1e-4c54-9d59-5d4c1c7e0002", Controller: &yes}}
	}
	if edit != nil {
		edit(p)
	}
	h.must(k8s.Create(h.ctx, p))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, p, client.GracePeriodSeconds(0)) })
	return p
}

// podStays fails the test when the pod was evicted or deleted.
func (h *harness) podStays(p *corev1.Pod, when string) {
	h.t.Helper()
	var got corev1.Pod
	if err := k8s.Get(h.ctx, client.ObjectKeyFromObject(p), &got); err != nil || got.DeletionTimestamp != nil {
		h.t.Fatalf("%s: pod %s/%s evicted or gone (%v)", when, p.Namespace, p.Name, err)
	}
}

// holdCase is one way a pool bounds (or does not) a tenant's hold on a drain.
type holdCase struct {
	name    string
	prefix  string
	maxHold time.Duration // 0: unset
}

func holdCases(prefix string) []holdCase {
	return []holdCase{
		{"without maxHold the hold lasts until drain.timeout, then Abort", prefix + "0-", 0},
		{"with maxHold the held pod is evicted at maxHold and the switch goes on", prefix + "1-", 2 * time.Minute},
	}
}

// heldUntilTimeout runs passes until the transition aborts, and checks that it aborted
// at drain.timeout, not before, with the tenant's pods still there and named.
func (h *harness) heldUntilTimeout(pool string, start time.Time, timeout time.Duration, held ...*corev1.Pod) {
	h.t.Helper()
	p := h.until(pool, 60, "the drain timed out and the transition aborted", func(p *gpupoolv1.GPUPoolProfile) bool {
		return p.Status.Transition != nil && p.Status.Transition.AbortedTime != nil
	})
	if at := p.Status.Transition.AbortedTime.Sub(start); at < timeout {
		h.t.Errorf("aborted %s after the drain started, want at drain.timeout (%s)", at, timeout)
	}
	c := findCondition(p, gpupoolv1.ConditionDegraded)
	if c == nil || c.Reason != ReasonDrainAborted {
		h.t.Fatalf("Degraded %+v, want DrainAborted", c)
	}
	for _, pod := range held {
		h.podStays(pod, "after the abort")
		if !strings.Contains(c.Message, pod.Namespace+"/"+pod.Name) {
			h.t.Errorf("Degraded message %q does not name the holding pod %s/%s", c.Message, pod.Namespace, pod.Name)
		}
	}
	if n := h.node("day-1"); n.Spec.Unschedulable {
		h.t.Errorf("node %s left cordoned after the abort", n.Name)
	}
	if containsEvent(h.events(), ReasonDrainHoldOverridden) {
		h.t.Errorf("a %s event without maxHold", ReasonDrainHoldOverridden)
	}
}

// overridden checks that the held pods are gone, that the transition was not aborted,
// and that one DrainHoldOverridden event per node counts the pods per namespace without
// naming them.
func (h *harness) overridden(p *gpupoolv1.GPUPoolProfile, wantCounts string, held ...*corev1.Pod) {
	h.t.Helper()
	for _, pod := range held {
		var got corev1.Pod
		if err := k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &got); !apierrors.IsNotFound(err) && got.DeletionTimestamp == nil {
			h.t.Errorf("held pod %s/%s still there past maxHold (%v)", pod.Namespace, pod.Name, err)
		}
	}
	for _, rec := range p.Status.History {
		if rec.Result == gpupoolv1.TransitionAborted {
			h.t.Errorf("history %+v: a transition was aborted despite maxHold", p.Status.History)
		}
	}
	var notes []string
	for _, e := range h.events() {
		if strings.Contains(e, ReasonDrainHoldOverridden) {
			notes = append(notes, e)
		}
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], corev1.EventTypeWarning) || !strings.Contains(notes[0], "node "+h.prefix+"day-1 held past spec.drain.maxHold (2m0s)") ||
		!strings.Contains(notes[0], wantCounts) {
		h.t.Fatalf("%s events %q, want one Warning naming node day-1 and counting %s", ReasonDrainHoldOverridden, notes, wantCounts)
	}
	for _, pod := range held {
		if strings.Contains(notes[0], pod.Name) {
			h.t.Errorf("event %q names the tenant's pod %s: only counts per namespace", notes[0], pod.Name)
		}
	}
}

// TestTenantDoNotDisruptBoundedByMaxHold: a tenant's pod annotated
// gpupool.dev/do-not-disrupt on a node a scheduled switch drains. Without
// spec.drain.maxHold it holds the drain until drain.timeout and the switch aborts on
// every host, as before; with maxHold it is evicted (eviction API) once maxHold has
// passed since the node's drain started, and the switch completes.
func TestTenantDoNotDisruptBoundedByMaxHold(t *testing.T) {
	for _, c := range holdCases("mhd") {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			pool := h.dayNight()
			timeout := 5 * time.Minute
			pool.Spec.Drain.Timeout = &metav1.Duration{Duration: timeout}
			if c.maxHold > 0 {
				pool.Spec.Drain.MaxHold = &metav1.Duration{Duration: c.maxHold}
			}
			h.clock.SetTime(monday1000)
			h.create(pool)
			h.converge(pool.Name, "day", 30)
			pod := h.tenantPod("tenant-a", "serve", "day-1", false, func(p *corev1.Pod) {
				p.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"}
			})

			h.clock.SetTime(monday1950)
			start := h.clock.Now()
			p := h.until(pool.Name, 30, "day-1 drain held by the tenant's pod", func(p *gpupoolv1.GPUPoolProfile) bool {
				w := execute.FindWorker(p, h.prefix+"day-1")
				return w != nil && w.Step == gpupoolv1.StepDrainRequired && strings.Contains(w.Message, "waiting for 1 pod(s) to finish")
			})
			if c.maxHold > 0 {
				if cond := findCondition(p, gpupoolv1.ConditionProgressing); cond == nil || !strings.Contains(cond.Message, "held pods evicted at drain.maxHold, ") {
					t.Errorf("Progressing %+v, want it to say when maxHold ends the hold", cond)
				}
			}
			// Within maxHold (or, without it, within drain.timeout) the pod stays.
			hold := timeout
			if c.maxHold > 0 {
				hold = c.maxHold
			}
			for h.clock.Since(start) < hold-15*time.Second {
				h.reconcile(pool.Name)
				h.clock.Step(10 * time.Second)
			}
			h.podStays(pod, "within the hold")
			if c.maxHold == 0 {
				h.heldUntilTimeout(pool.Name, start, timeout, pod)
				return
			}
			p = h.converge(pool.Name, "night", 60)
			h.checkNight(p)
			h.overridden(p, h.prefix+"tenant-a: 1", pod)
		})
	}
}

// TestTenantBarePodsCannotVetoADemandSwitch: a tenant's pod without a controller and
// another with an emptyDir volume (in their own namespaces) on a day node, which the
// demand guard does not count, while another tenant's training pod brings night in.
// Without maxHold they hold the demand switch's drain until drain.timeout and it
// aborts on every host; with maxHold they are evicted and the demand switch completes.
func TestTenantBarePodsCannotVetoADemandSwitch(t *testing.T) {
	for _, c := range holdCases("mhb") {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			pool := h.demandPool()
			timeout := 5 * time.Minute
			pool.Spec.Drain.Timeout = &metav1.Duration{Duration: timeout}
			if c.maxHold > 0 {
				pool.Spec.Drain.MaxHold = &metav1.Duration{Duration: c.maxHold}
			}
			h.dayPastDwell(pool)
			bare := h.tenantPod("tenant-a", "scratch", "day-1", true, nil)
			cache := h.tenantPod("tenant-b", "cache", "day-1", false, func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			})

			h.gpuPod("train-1", "", true, nil)
			h.reconcile(pool.Name)
			h.clock.Step(2 * time.Minute) // the demand's `for`
			p := h.until(pool.Name, 30, "the demand switch's drain of day-1 blocked by the tenants' pods", func(p *gpupoolv1.GPUPoolProfile) bool {
				w := execute.FindWorker(p, h.prefix+"day-1")
				return w != nil && w.Step == gpupoolv1.StepDrainRequired && strings.Contains(w.Message, "has no controller")
			})
			if tr := p.Status.Transition; tr == nil || tr.Reason != gpupoolv1.DesiredByDemand || tr.To != "night" {
				t.Fatalf("transition %+v, want the demand switch to night", tr)
			}
			start := execute.FindWorker(p, h.prefix+"day-1").StepStartTime.Time
			if c.maxHold == 0 {
				h.heldUntilTimeout(pool.Name, start, timeout, bare, cache)
				return
			}
			p = h.converge(pool.Name, "night", 60)
			if p.Status.History[0].Reason != gpupoolv1.DesiredByDemand || p.Status.History[0].Result == gpupoolv1.TransitionAborted {
				t.Errorf("history %+v, want the demand switch completed", p.Status.History[0])
			}
			h.overridden(p, h.prefix+"tenant-a: 1, "+h.prefix+"tenant-b: 1", bare, cache)
		})
	}
}
