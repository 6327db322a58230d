package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// usagePod is a running pod of a (notional) ReplicaSet asking for one nvidia.com/gpu on a node, started at start
// (its status as a kubelet would write it).
func (h *harness) usagePod(ns, name, node string, start time.Time) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "infer", UID: "d9d2b2f6-3c1e-4c54-9d59-5d4c1c7e0002", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "infer",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	h.must(k8s.Create(h.ctx, p))
	// kwok runs the pod and stamps its start on the wall clock; the test's clock is
	// another, so the start is written over once kwok is done with the pod.
	for range 600 { // a guard against a hang: kwok runs a pod in milliseconds
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(p), p))
		if p.Status.Phase == corev1.PodRunning && p.Status.StartTime != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Status.StartTime = &metav1.Time{Time: start}
	h.must(k8s.Status().Update(h.ctx, p))
	return p
}

// usageOf reads the pool's GPUPoolUsage of the day t is in (Berlin).
func (h *harness) usageOf(pool string, t time.Time) *gpupoolv1.GPUPoolUsage {
	h.t.Helper()
	var u gpupoolv1.GPUPoolUsage
	day := t.In(scheduleZone(&h.get(pool).Spec)).Format(time.DateOnly)
	h.must(k8s.Get(h.ctx, client.ObjectKey{Name: accounting.UsageName(pool, day)}, &u))
	return &u
}

// usageRows sums a usage's rows: offered, allocated and switching per layout, and
// allocated per tenant, in GPU-seconds.
func usageRows(u *gpupoolv1.GPUPoolUsage) (layouts map[string][3]int64, tenants map[string]int64) {
	layouts, tenants = map[string][3]int64{}, map[string]int64{}
	for _, r := range u.Rows {
		if r.Tenant != "" {
			tenants[r.Tenant] += r.AllocatedGPUSeconds
			continue
		}
		s := layouts[r.Layout]
		s[0] += r.OfferedGPUSeconds
		s[1] += r.AllocatedGPUSeconds
		s[2] += r.SwitchingGPUSeconds
		layouts[r.Layout] = s
	}
	return layouts, tenants
}

// TestAccountingByHand (issue 39, accounting): two tenants on the day layout, a restart
// of the manager, a switch to night. On the one P100 (16 GB) of the day/night world,
// each day VM's grid_p100-4q is 0.25 GPU: the day layout offers 1.0, each pod asking for
// one GPU on a day node is allocated 0.25. The sums are checked against what is computed
// here by hand, after the restart too (no second counted twice, none lost while the pods
// ran on), and the switch's offline capacity is bounded by the transition in history.
func TestAccountingByHand(t *testing.T) {
	h := newHarness(t, "acc-")
	pool := h.dayNight()
	pool.Spec.Accounting = &gpupoolv1.AccountingSpec{TenantLabel: "lab.example/team"}
	h.clock.SetTime(monday1000)
	h.create(pool)
	p := h.converge(pool.Name, "day", 30)
	if p.Status.Transition != nil || p.Status.ActiveLayout != "day" {
		t.Fatalf("the pool is not at rest on day: %+v", p.Status.Transition)
	}

	blue := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + "blue", Labels: map[string]string{"lab.example/team": "blue"}}}
	h.must(k8s.Create(h.ctx, blue))
	// The apps namespace has no team label: it is its own tenant.
	// The ledger started on an earlier pass; this one, more than DefaultUsageInterval
	// later, writes the day up to t0.
	t0 := h.clock.Now().Add(10 * time.Minute)
	h.clock.SetTime(t0)
	h.reconcile(pool.Name)
	h.reconciler().flushUsage(h.ctx)
	base := h.usageOfOrNil(pool.Name, t0)
	h.usagePod(h.prefix+"apps", "red", h.prefix+"day-1", t0)
	h.usagePod(blue.Name, "blue", h.prefix+"day-2", t0.Add(time.Hour))

	h.clock.SetTime(t0.Add(2 * time.Hour))
	h.reconcile(pool.Name)
	h.reconciler().flushUsage(h.ctx)
	u := h.usageOf(pool.Name, t0)
	var layouts map[string][3]int64
	var tenants map[string]int64
	want := func(when string, offered, red, blue int64) {
		t.Helper()
		layouts, tenants = usageRows(h.usageOf(pool.Name, t0))
		d := layouts["day"]
		if d[0]-base.offered != offered || tenants[h.prefix+"apps"] != red || tenants["blue"] != blue || d[1]-base.allocated != red+blue {
			t.Fatalf("%s: day offered %d (want %d more than %d), allocated %d; tenants %v, want %s %d, blue %d",
				when, d[0], offered, base.offered, d[1]-base.allocated, tenants, h.prefix+"apps", red, blue)
		}
	}
	// Two hours of 1.0 GPU offered; red 0.25 for two hours, blue for one.
	want("after two hours", 7200, 1800, 900)
	if u.Pool != pool.Name || u.TimeZone != "Europe/Berlin" || len(u.OwnerReferences) != 1 || u.OwnerReferences[0].UID != h.get(pool.Name).UID {
		t.Fatalf("usage %s: pool %q zone %q owners %+v", u.Name, u.Pool, u.TimeZone, u.OwnerReferences)
	}

	// A restart: the new manager goes on from the persisted Through, counting the pods
	// from there, not from their start (which would count 10:00-12:00 twice).
	h.restart = true
	h.clock.SetTime(t0.Add(3 * time.Hour))
	h.reconcile(pool.Name)
	h.restart = false
	h.clock.SetTime(t0.Add(4 * time.Hour))
	h.reconcile(pool.Name)
	h.reconciler().flushUsage(h.ctx)
	want("after a restart", 4*3600, 4*900, 3*900)
	// A flush again at the same time writes the same day: nothing counted twice.
	h.reconciler().flushUsage(h.ctx)
	want("flushed twice", 4*3600, 4*900, 3*900)
	if got := testutil.ToFloat64(tenantGPUSeconds.WithLabelValues(pool.Name, "day", "grid_p100-4q", "blue")); got < 2*900 {
		t.Errorf("gpupool_tenant_gpu_seconds_total for blue is %v, want at least the %d since the restart", got, 2*900)
	}

	// Night: the day pods are evicted by the drain; the switch's offline capacity is at
	// most the host's one GPU for the transition's length.
	h.clock.SetTime(monday1950)
	p = h.converge(pool.Name, "night", 60)
	h.clock.Step(time.Hour)
	h.reconcile(pool.Name)
	h.reconciler().flushUsage(h.ctx)
	// An hour at rest that no pass sees: the flusher accounts it with what the last pass
	// saw, and writes it.
	h.clock.Step(time.Hour)
	h.reconciler().flushUsage(h.ctx)
	var tr gpupoolv1.TransitionRecord
	for _, r := range p.Status.History {
		if r.To == "night" && r.Result == gpupoolv1.TransitionCompleted {
			tr = r
			break
		}
	}
	if tr.To != "night" {
		t.Fatalf("no completed switch to night in history: %+v", p.Status.History)
	}
	u = h.usageOf(pool.Name, monday1950)
	layouts, _ = usageRows(u)
	span := tr.EndTime.Sub(tr.StartTime.Time).Seconds()
	if sw := layouts["night"][2]; sw <= 0 || float64(sw) > span+1 {
		t.Errorf("switching to night %d GPU-seconds, want more than 0 and at most the transition's %v s on one GPU", sw, span)
	}
	// The pass and the flush at rest an hour apart each add the night VM's whole GPU.
	if n := layouts["night"][0]; n < 2*3600 || float64(n) > 2*3600+span+1 {
		t.Errorf("night offered %d GPU-seconds, want two hours of one GPU (7200) and at most the switch's end on top", n)
	}
	if u.Totals.OfferedGPUHours == "" || u.Totals.IdleGPUHours == "" {
		t.Errorf("totals %+v", u.Totals)
	}
}

type usageBase struct{ offered, allocated int64 }

// usageOfOrNil is what the day's usage holds for the day layout so far (zero before it
// is written).
func (h *harness) usageOfOrNil(pool string, t time.Time) usageBase {
	var u gpupoolv1.GPUPoolUsage
	day := t.In(scheduleZone(&h.get(pool).Spec)).Format(time.DateOnly)
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: accounting.UsageName(pool, day)}, &u); err != nil {
		return usageBase{}
	}
	l, _ := usageRows(&u)
	return usageBase{l["day"][0], l["day"][1]}
}
