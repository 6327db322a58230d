package controllers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The Kueue bridge per pool (issue 35): the check answers only the Workloads of the
// ClusterQueues labelled for the pool, holds a leaving flavor's work from warnAhead on,
// and is released when the pool stops answering it. Against Kueue's own controller, as
// kueue_envtest_test.go.

// kueuePoolSpec maps the harness's day and night flavors: day keeps 2 GPUs while night
// serves, night keeps 1 while day serves.
func (h *harness) kueuePoolSpec() *gpupoolv1.KueueSpec {
	return &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: h.prefix + "day", Layout: "day", Quota: gpuList("4"), WaitingQuota: gpuList("2")},
		{Name: h.prefix + "night", Layout: "night", Quota: gpuList("2"), WaitingQuota: gpuList("1")},
	}}
}

// tenantQueue is another tenant's namespace with a LocalQueue of a ClusterQueue that uses
// gpupool's check and the same flavor names, but is labelled for another pool.
func (h *harness) tenantQueue(w kueueWorld) (namespace, queue string) {
	h.t.Helper()
	namespace, queue = h.prefix+"tenant-b", h.prefix+"tenant-b-lq"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	h.must(k8s.Create(h.ctx, ns))
	h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	cq := h.prefix + "tenant-b-cq"
	for _, y := range []string{
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: %s, labels: {%s: %ssomeone-else}},
  spec: {namespaceSelector: {}, admissionChecksStrategy: {admissionChecks: [{name: %s}]},
    resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]},
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]}]}]}}`, cq, gpupoolv1.LabelKueuePool, h.prefix, w.check, w.day, w.night),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: LocalQueue, metadata: {name: %s, namespace: %s}, spec: {clusterQueue: %s}}`, queue, namespace, cq),
	} {
		o := kueueObject(y)
		h.must(k8s.Create(h.ctx, o))
		h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	return namespace, queue
}

// workloadIn creates a Workload in the namespace's LocalQueue, as Kueue's job integration
// would for a Job of one pod asking for gpus GPUs on the nodes labelled
// lab.example/workload=<selects>, and waits until Kueue reserved its quota and listed
// gpupool's check.
func (h *harness) workloadIn(w kueueWorld, namespace, queue, name, selects string, gpus int) *unstructured.Unstructured {
	h.t.Helper()
	o := kueueObject(fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: Workload, metadata: {name: %s, namespace: %s},
  spec: {queueName: %s, podSets: [{name: main, count: 1, template: {spec: {restartPolicy: Never,
    nodeSelector: {lab.example/workload: %s},
    containers: [{name: c, image: train, resources: {requests: {nvidia.com/gpu: "%d"}, limits: {nvidia.com/gpu: "%d"}}}]}}}]}}`,
		name, namespace, queue, selects, gpus, gpus))
	h.must(k8s.Create(h.ctx, o))
	h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	h.untilKueue(o, "quota reserved and gpupool's check listed", func(o *unstructured.Unstructured) bool {
		st, _ := gpupoolCheck(o, w.check)
		return conditionTrue(o, "QuotaReserved") && st != ""
	})
	return o
}

// checkOf reads the Workload again and returns gpupool's check on it.
func (h *harness) checkOf(w kueueWorld, wl *unstructured.Unstructured) (state, message string) {
	h.t.Helper()
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(wl), wl))
	return gpupoolCheck(wl, w.check)
}

// TestKueueCheckIsThePoolsQueuesOnly: a pool answers gpupool's check only on the
// Workloads admitted to a ClusterQueue labelled for it. Another tenant's Workload, in a
// ClusterQueue labelled for another pool that lists the same check and flavor names, is
// left as Kueue made it; the pool's own Workload on the same flavor is set Ready. With
// spec.demand and spec.kueue, the pool pass and the Kueue controller's pass list the
// Workloads once each.
func TestKueueCheckIsThePoolsQueuesOnly(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqs-")
	h.kueueFollows = true // the Kueue controller follows each pool pass, as in the manager
	var workloadLists atomic.Int32
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if u, ok := list.(*unstructured.UnstructuredList); ok && u.GetKind() == kueueWorkload.Kind+"List" {
					workloadLists.Add(1)
				}
				return c.List(ctx, list, opts...)
			},
		})
	}
	pool := h.demandPool()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	tenant, tenantQueue := h.tenantQueue(w)
	h.converge(pool.Name, "night", 40)
	h.reconcile(pool.Name)

	mine := h.workloadIn(w, h.prefix+"apps", w.queue, "mine", "training", 1)
	theirs := h.workloadIn(w, tenant, tenantQueue, "theirs", "training", 1)
	_, before := h.checkOf(w, theirs)
	// The pool pass reads the Workloads for demand, the Kueue controller's pass for the
	// checks: once each.
	h.kueueFollows = false
	workloadLists.Store(0)
	h.reconcile(pool.Name)
	if n := workloadLists.Load(); n != 1 {
		t.Errorf("the pool pass listed the Workloads %d times, want once (demand)", n)
	}
	workloadLists.Store(0)
	h.reconcileKueue(pool.Name)
	if n := workloadLists.Load(); n != 1 {
		t.Errorf("the Kueue controller's pass listed the Workloads %d times, want once", n)
	}
	h.kueueFollows = true
	if st, msg := h.checkOf(w, mine); st != checkReady || msg != "layout night is ready for work" {
		t.Fatalf("the pool's own Workload: check %s %q, want Ready", st, msg)
	}
	if st, msg := h.checkOf(w, theirs); st != checkPending || msg != before {
		t.Fatalf("another pool's Workload on a flavor of the same name: check %s %q, want it left Pending %q", st, msg, before)
	}
	if p := h.get(pool.Name); p.Status.Kueue == nil || p.Status.Kueue.HeldWorkloads != 0 {
		t.Fatalf("status.kueue %+v, want set, holding none", p.Status.Kueue)
	}
	h.untilKueue(mine, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	if conditionTrue(theirs, "Admitted") {
		t.Fatal("another pool's Workload was admitted through gpupool's check")
	}
}

// TestKueueLeavingFlavorIsHeld: from warnAhead before the switch away from night (07:40,
// 10m before 07:50), a Workload that reserves night's waiting quota is held Pending,
// not admitted onto the night nodes about to be drained; it counts in status.kueue.
func TestKueueLeavingFlavorIsHeld(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kql-")
	h.kueueFollows = true // the Kueue controller follows each pool pass, as in the manager
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	h.converge(pool.Name, "night", 40)

	h.clock.SetTime(monday0700.Add(41 * time.Minute))
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=2 night=1, other day=9 night=9"; got != want {
		t.Fatalf("quota at warnAhead before day: %s, want %s", got, want)
	}
	wl := h.workloadIn(w, h.prefix+"apps", w.queue, "late", "training", 1)
	h.reconcile(pool.Name)
	if st, msg := h.checkOf(w, wl); st != checkPending || msg != "waiting for layout night: a switch away from it starts at 07:50 "+weekZone()+" (in 9m)" {
		t.Fatalf("night Workload within warnAhead of the switch to day: check %s %q, want Pending until night comes back", st, msg)
	}
	if conditionTrue(wl, "Admitted") {
		t.Fatal("admitted onto nodes about to be drained")
	}
	if p := h.get(pool.Name); p.Status.Kueue == nil || p.Status.Kueue.HeldWorkloads != 1 {
		t.Fatalf("status.kueue %+v, want 1 held Workload", p.Status.Kueue)
	}
	h.kueueGauges(pool.Name, w, "quota day=2 night=1, held 1")
}

// TestKueueChecksReleased: the Workloads a pool's check holds are released (Ready, so
// that Kueue admits them on its quota alone) when spec.kueue is removed, and when the
// pool is deleted; the quota it wrote is left as last set.
func TestKueueChecksReleased(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqr-")
	h.kueueFollows = true // the Kueue controller follows each pool pass, as in the manager
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	h.converge(pool.Name, "night", 40)
	h.reconcile(pool.Name)

	// A day Workload by night is held.
	first := h.workloadIn(w, h.prefix+"apps", w.queue, "first", "inference", 1)
	h.reconcile(pool.Name)
	if st, _ := h.checkOf(w, first); st != checkPending {
		t.Fatalf("day Workload by night: check %s, want Pending", st)
	}

	// spec.kueue removed: released, and the pool forgets it held any.
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Kueue = nil })
	h.reconcile(pool.Name)
	want := "spec.kueue was removed from GPUPoolProfile " + pool.Name + ": gpupool no longer holds it for a layout"
	if st, msg := h.checkOf(w, first); st != checkReady || msg != want {
		t.Fatalf("after spec.kueue was removed: check %s %q, want Ready %q", st, msg, want)
	}
	h.untilKueue(first, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	if p := h.get(pool.Name); p.Status.Kueue != nil {
		t.Fatalf("status.kueue %+v after the release, want none", p.Status.Kueue)
	}
	if got, want := h.quotas(w), "opted-in day=2 night=2, other day=9 night=9"; got != want {
		t.Fatalf("quota after spec.kueue was removed: %s, want %s (as last set)", got, want)
	}
	containsAll(t, "events", h.events(), "KueueReleased")

	// spec.kueue again, a second day Workload held, then the pool deleted: released too.
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Kueue = h.kueuePoolSpec() })
	h.reconcile(pool.Name)
	second := h.workloadIn(w, h.prefix+"apps", w.queue, "second", "inference", 1)
	h.reconcile(pool.Name)
	if st, _ := h.checkOf(w, second); st != checkPending {
		t.Fatalf("second day Workload by night: check %s, want Pending", st)
	}
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	for i := 0; i < 10 && !h.gone(pool.Name); i++ {
		h.reconcile(pool.Name)
	}
	if !h.gone(pool.Name) {
		t.Fatal("the pool was not finalized within 10 passes")
	}
	want = "GPUPoolProfile " + pool.Name + " was deleted: gpupool no longer holds it for a layout"
	if st, msg := h.checkOf(w, second); st != checkReady || msg != want {
		t.Fatalf("after the pool was deleted: check %s %q, want Ready %q", st, msg, want)
	}
	h.untilKueue(second, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
}
