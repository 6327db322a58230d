package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// switchAt is a time of the harness's Monday (Europe/Berlin).
func (h *harness) switchAt(hour, minute int) metav1.Time {
	return metav1.NewTime(time.Date(monday0700.Year(), monday0700.Month(), monday0700.Day(), hour, minute, 0, 0, monday0700.Location()))
}

// setPoolStatus writes the pool's status as a pool pass would have persisted it.
func (h *harness) setPoolStatus(name string, change func(*gpupoolv1.GPUPoolProfileStatus)) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	p := h.get(name)
	before := p.DeepCopy()
	change(&p.Status)
	h.must(k8s.Status().Patch(h.ctx, p, client.MergeFrom(before)))
	return h.get(name)
}

// TestKueueControllerAloneFollowsThePoolsStatus: the Kueue controller, with no pool pass
// ever run, sets the quota and the checks from the pool's persisted status (written here
// by the test) and the clock, looks again when a quota changes by the clock, and writes
// of the pool status.kueue only.
func TestKueueControllerAloneFollowsThePoolsStatus(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqc-")
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	w := h.kueueWorld(pool.Name)

	// Night serves; the switch to day starts at 07:50, warnAhead (leadTime, 10m) before.
	written := h.setPoolStatus(pool.Name, func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.ActiveLayout, st.DesiredLayout, st.DesiredReason = "night", "night", gpupoolv1.DesiredBySchedule
		st.NextTransition = &gpupoolv1.NextTransition{Layout: "day", At: h.switchAt(7, 50)}
	})
	res := h.reconcileKueue(pool.Name)
	if got, want := h.quotas(w), "opted-in day=2 night=2, other day=9 night=9"; got != want {
		t.Fatalf("quota with night ready: %s, want %s", got, want)
	}
	if res.RequeueAfter != resyncPeriod {
		t.Errorf("looks again in %s, want %s (the resync; night's quota changes at 07:40)", res.RequeueAfter, resyncPeriod)
	}
	ac := kueueObject(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: AdmissionCheck}`)
	h.must(k8s.Get(h.ctx, client.ObjectKey{Name: w.check}, ac))
	if !conditionTrue(ac, "Active") {
		t.Fatalf("AdmissionCheck %s not marked Active: %v", w.check, ac.Object["status"])
	}
	got := h.get(pool.Name)
	if got.Status.Kueue == nil {
		t.Fatal("status.kueue not set by the Kueue controller")
	}
	// Of the pool, the Kueue controller writes status.kueue and nothing else.
	onlyKueue := got.Status.DeepCopy()
	onlyKueue.Kueue = nil
	if !equality.Semantic.DeepEqual(*onlyKueue, written.Status) {
		t.Fatalf("the Kueue controller changed the pool's status beyond status.kueue:\n%+v\nwant\n%+v", *onlyKueue, written.Status)
	}

	// A day Workload by night is held until day's switch.
	wl := h.workloadIn(w, h.prefix+"apps", w.queue, "train", "inference", 1)
	h.reconcileKueue(pool.Name)
	if st, msg := h.checkOf(w, wl); st != checkPending || msg != "waiting for layout day: the switch to it starts at 07:50 "+weekZone()+" (in 50m)" {
		t.Fatalf("day Workload by night: check %s %q, want Pending until day's switch", st, msg)
	}
	if p := h.get(pool.Name); p.Status.Kueue == nil || p.Status.Kueue.HeldWorkloads != 1 {
		t.Fatalf("status.kueue %+v, want 1 held Workload", p.Status.Kueue)
	}

	// Close to warnAhead, the pass looks again when night's quota changes; then the
	// clock alone, with no status change, drops night to its waiting quota.
	h.clock.SetTime(monday0700.Add(37 * time.Minute))
	if res := h.reconcileKueue(pool.Name); res.RequeueAfter != 3*time.Minute {
		t.Errorf("at 07:37 looks again in %s, want 3m (night drops to its waiting quota at 07:40)", res.RequeueAfter)
	}
	h.clock.SetTime(monday0700.Add(40 * time.Minute))
	h.reconcileKueue(pool.Name)
	if got, want := h.quotas(w), "opted-in day=2 night=1, other day=9 night=9"; got != want {
		t.Fatalf("quota at warnAhead before day: %s, want %s", got, want)
	}

	// Day's switch is in flight, then done: the status alone moves the quota and checks.
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.setPoolStatus(pool.Name, func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.DesiredLayout = "day"
		st.NextTransition = &gpupoolv1.NextTransition{Layout: "night", At: h.switchAt(19, 50)}
		st.Transition = &gpupoolv1.TransitionStatus{ID: "t1", From: "night", To: "day", StartTime: h.switchAt(7, 50), Reason: gpupoolv1.DesiredBySchedule}
	})
	h.reconcileKueue(pool.Name)
	if st, msg := h.checkOf(w, wl); st != checkPending || msg != "waiting for layout day: switch in progress" {
		t.Fatalf("during the switch to day: check %s %q", st, msg)
	}
	h.setPoolStatus(pool.Name, func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.ActiveLayout, st.Transition = "day", nil
	})
	h.reconcileKueue(pool.Name)
	if got, want := h.quotas(w), "opted-in day=4 night=1, other day=9 night=9"; got != want {
		t.Fatalf("quota with day ready: %s, want %s", got, want)
	}
	if st, msg := h.checkOf(w, wl); st != checkReady || msg != "layout day is ready for work" {
		t.Fatalf("check with day ready: %s %q, want Ready", st, msg)
	}
	h.untilKueue(wl, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	if p := h.get(pool.Name); p.Status.Kueue == nil || p.Status.Kueue.HeldWorkloads != 0 {
		t.Fatalf("status.kueue %+v, want set, holding none", p.Status.Kueue)
	}
}

// TestPoolPassDoesNotReadKueue: a pool with spec.kueue (and no spec.demand, which reads
// the Workloads as demand) converges without one request for a Kueue object: Kueue is
// the Kueue controller's, and a pool pass never waits for it.
func TestPoolPassDoesNotReadKueue(t *testing.T) {
	h := newHarness(t, "kqn-")
	var requests atomic.Int32
	isKueue := func(o runtime.Object) bool {
		gvk := o.GetObjectKind().GroupVersionKind()
		return gvk.Group == KueueGroupVersion.Group
	}
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if isKueue(list) {
					requests.Add(1)
				}
				return c.List(ctx, list, opts...)
			},
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if isKueue(obj) {
					requests.Add(1)
				}
				return c.Get(ctx, key, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if isKueue(obj) {
					requests.Add(1)
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if isKueue(obj) {
					requests.Add(1)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	h.converge(pool.Name, "night", 40)
	h.reconcile(pool.Name)
	if n := requests.Load(); n != 0 {
		t.Fatalf("the pool passes made %d requests for Kueue objects, want none", n)
	}
	if p := h.get(pool.Name); p.Status.Kueue != nil {
		t.Fatalf("the pool pass wrote status.kueue %+v; it is the Kueue controller's", p.Status.Kueue)
	}
}

// TestKueueInputs: the Kueue controller is woken by the pool's spec and by the status
// fields it decides from, not by the pool pass's other writes nor by its own.
func TestKueueInputs(t *testing.T) {
	at := func(h int) metav1.Time { return metav1.NewTime(time.Date(2031, 3, 17, h, 0, 0, 0, time.UTC)) }
	base := func() *gpupoolv1.GPUPoolProfile {
		p := kueuePool()
		p.Generation = 3
		p.Status = gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", DesiredLayout: "night", DesiredReason: gpupoolv1.DesiredBySchedule,
			NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7)}}
		return p
	}
	for _, tc := range []struct {
		name   string
		change func(*gpupoolv1.GPUPoolProfile)
		wakes  bool
	}{
		{"spec (generation)", func(p *gpupoolv1.GPUPoolProfile) { p.Generation++ }, true},
		{"deletion", func(p *gpupoolv1.GPUPoolProfile) { p.DeletionTimestamp = ptrTime(at(8).Time) }, true},
		{"active layout", func(p *gpupoolv1.GPUPoolProfile) { p.Status.ActiveLayout = "day" }, true},
		{"transition starts", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Transition = &gpupoolv1.TransitionStatus{ID: "t", To: "day", StartTime: at(7)}
		}, true},
		{"transition aborted", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Transition = &gpupoolv1.TransitionStatus{ID: "t", To: "day", StartTime: at(7), AbortedTime: ptrTime(at(8).Time)}
		}, true},
		{"next transition moves", func(p *gpupoolv1.GPUPoolProfile) { p.Status.NextTransition.At = at(9) }, true},
		{"demand announces a switch", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Demand = &gpupoolv1.DemandStatus{Switch: &gpupoolv1.DemandSwitch{Layout: "day", At: at(9)}}
		}, true},
		{"desired reason", func(p *gpupoolv1.GPUPoolProfile) { p.Status.DesiredReason = gpupoolv1.DesiredByDemand }, true},
		{"workers", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Workers = []gpupoolv1.WorkerStatus{{VM: "gpu-1", Step: "Drain"}}
		}, false},
		{"conditions", func(p *gpupoolv1.GPUPoolProfile) {
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: gpupoolv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Steady"})
		}, false},
		{"demand's counts", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Demand = &gpupoolv1.DemandStatus{Layouts: []gpupoolv1.LayoutDemand{{Layout: "day", PendingGPUs: 3}}}
		}, false},
		{"its own status.kueue", func(p *gpupoolv1.GPUPoolProfile) { p.Status.Kueue = &gpupoolv1.KueueStatus{HeldWorkloads: 2} }, false},
		{"the schedule cannot be read", func(p *gpupoolv1.GPUPoolProfile) {
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: gpupoolv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: ReasonInvalidSpec})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, changed := base(), base()
			tc.change(changed)
			if got := kueueInputChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: changed}); got != tc.wakes {
				t.Errorf("wakes the Kueue controller: %v, want %v", got, tc.wakes)
			}
		})
	}
}

// TestKueueControllerInTheManager: registered in a manager (as SetupWithManager does,
// with the operator's generated RBAC), the Kueue controller is woken by Kueue's objects
// (an opted-in ClusterQueue and gpupool's AdmissionCheck created) and by the pool's
// status, with no pool pass, and its passes are counted under its own name in
// controller-runtime's metrics.
func TestKueueControllerInTheManager(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqm-")
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	h.setPoolStatus(pool.Name, func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.ActiveLayout, st.DesiredLayout, st.DesiredReason = "night", "night", gpupoolv1.DesiredBySchedule
		st.NextTransition = &gpupoolv1.NextTransition{Layout: "day", At: h.switchAt(7, 50)}
	})

	mgr, err := ctrl.NewManager(operatorConfig, ctrl.Options{Scheme: testScheme, Cache: CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	h.must(err)
	k := &KueueReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: h.recorder, Clock: h.clock}
	h.must(k.SetupWithManager(mgr, nil))
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// until polls, with a deadline: the manager runs on its own.
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 60s", what)
			}
		}
	}
	// Its first pass (the pool's create event) finds no ClusterQueue yet.
	until("status.kueue set by the first pass", func() bool { return h.get(pool.Name).Status.Kueue != nil })

	// An opted-in ClusterQueue (and the check) is created: its event wakes the controller.
	w := h.kueueWorld(pool.Name)
	until("the opted-in ClusterQueue's quota set", func() bool {
		return h.quotas(w) == "opted-in day=2 night=2, other day=9 night=9"
	})

	// The pool's status says day is ready: the status change wakes it.
	h.setPoolStatus(pool.Name, func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.ActiveLayout, st.DesiredLayout = "day", "day"
		st.NextTransition = &gpupoolv1.NextTransition{Layout: "night", At: h.switchAt(19, 50)}
	})
	until("the quota following the status", func() bool {
		return h.quotas(w) == "opted-in day=4 night=1, other day=9 night=9"
	})
	if n := reconcileTotal(t, KueueControllerName); n == 0 {
		t.Errorf("controller_runtime_reconcile_total{controller=%q} is 0", KueueControllerName)
	}
}

// reconcileTotal sums controller-runtime's reconcile counter of the named controller.
func reconcileTotal(t *testing.T, name string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == name {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestKueueStandsAsideOnAnUnreadableSpec: while the pool's last pass could not read its
// schedule (Stalled, InvalidSpec), the Kueue controller reads and writes nothing of Kueue,
// as the pool pass did not sync Kueue then: Kueue is left as last set.
func TestKueueStandsAsideOnAnUnreadableSpec(t *testing.T) {
	pool := kueuePool()
	pool.Name = "lab"
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: gpupoolv1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: ReasonInvalidSpec, Message: "unknown time zone"})
	var kueueCalls atomic.Int32
	c := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(pool).WithStatusSubresource(pool).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*unstructured.UnstructuredList); ok {
				kueueCalls.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	k := &KueueReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(monday0700)}
	res, err := k.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile: %+v, %v; want no requeue", res, err)
	}
	if n := kueueCalls.Load(); n != 0 {
		t.Errorf("%d lists of Kueue objects for a pool whose schedule cannot be read", n)
	}
	got := &gpupoolv1.GPUPoolProfile{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pool), got); err != nil || got.Status.Kueue != nil {
		t.Errorf("status.kueue %+v (%v), want untouched", got.Status.Kueue, err)
	}
}

// recordingQueue records what is added to it, and when.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []string
}

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.added = append(q.added, fmt.Sprintf("%s after %s", r.Name, d))
}

// TestWorkloadEventsWakeDemand: a Workload event wakes, in the demand watch, the pools
// whose demand counts Workloads (spec.demand and spec.kueue, not paused), after the
// same coalescing as a pod's; the pool pass runs only if their decision changes.
func TestWorkloadEventsWakeDemand(t *testing.T) {
	pool := func(name string, kueue, demand, paused bool) *gpupoolv1.GPUPoolProfile {
		p := kueuePool()
		p.Name = name
		if !kueue {
			p.Spec.Kueue = nil
		}
		if demand {
			p.Spec.Demand = &gpupoolv1.DemandPolicy{}
		}
		p.Spec.Paused = paused
		return p
	}
	c := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(
		pool("both", true, true, false), pool("kueue-only", true, false, false),
		pool("demand-only", false, true, false), pool("paused", true, true, true)).Build()
	k := &KueueReconciler{Client: c}
	wl := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "apps"}}
	q := &recordingQueue{}
	k.workloadDemandPools().Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: wl}, q)
	if got, want := strings.Join(q.added, "; "), "both after "+demandCoalesce.String(); got != want {
		t.Errorf("woken: %q, want %q", got, want)
	}
	if got := k.kueuePools(context.Background(), wl); len(got) != 3 {
		t.Errorf("the Kueue controller woken for %v, want the 3 pools with spec.kueue", got)
	}
}

// TestKueueReleaseRetriesAConflict: a Workload that changed between the release's list
// and its patch (one conflict injected here, as when Kueue or the Kueue controller's last
// pass wrote it in between) is listed again and released: the pool's deletion does not
// take the conflict for a release and leave the Workload Pending behind its finalizer.
func TestKueueReleaseRetriesAConflict(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqx-")
	h.kueueFollows = true
	var inject atomic.Bool
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == kueueWorkload.Kind && inject.CompareAndSwap(true, false) {
					return apierrors.NewConflict(schema.GroupResource{Group: KueueGroupVersion.Group, Resource: "workloads"}, u.GetName(), errors.New("the object has been modified"))
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
	pool := h.dayNight()
	pool.Spec.Kueue = h.kueuePoolSpec()
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	h.converge(pool.Name, "night", 40)
	wl := h.workloadIn(w, h.prefix+"apps", w.queue, "held", "inference", 1)
	h.reconcile(pool.Name)
	if st, _ := h.checkOf(w, wl); st != checkPending {
		t.Fatalf("day Workload by night: check %s, want Pending", st)
	}

	inject.Store(true)
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	for i := 0; i < 10 && !h.gone(pool.Name); i++ {
		h.reconcile(pool.Name)
	}
	if !h.gone(pool.Name) {
		t.Fatal("the pool was not finalized within 10 passes")
	}
	if inject.Load() {
		t.Fatal("no conflict was injected")
	}
	want := "GPUPoolProfile " + pool.Name + " was deleted: gpupool no longer holds it for a layout"
	if st, msg := h.checkOf(w, wl); st != checkReady || msg != want {
		t.Fatalf("after the pool was deleted: check %s %q, want Ready %q", st, msg, want)
	}
}
