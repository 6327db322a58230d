package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
)

// KueueControllerName names the Kueue controller in controller-runtime's metrics
// (controller_runtime_reconcile_time_seconds{controller="gpupool-kueue"}) and logs.
const KueueControllerName = "gpupool-kueue"

// KueueReconciler applies a pool's spec.kueue (docs/kueue.md) from the pool's persisted
// status and the clock: the flavors' quota in the opted-in ClusterQueues, gpupool's
// AdmissionChecks marked active, the checks of the Workloads it holds, and their release
// once spec.kueue is removed. It is a controller of its own, keyed by pool, so that the
// pool pass never waits for Kueue's API: it writes Kueue's objects and, of the pool,
// status.kueue only (a merge patch of that field alone, which the pool pass never
// writes but on deletion, when this controller stands aside).
//
// Note: the release on deletion is not this controller's. The pool's finalizer calls the
// same code (releaseDeletedKueue) before it goes: one finalizer keeps one order (tasks
// settled, checks released, nodes given back), and a manager that runs without this
// controller cannot strand a pool behind a second finalizer. For a pool being deleted
// this controller writes nothing; a check it set Pending concurrently with the release
// carries the Workload's resourceVersion, so one of the two patches is refused, and a
// refused release lists the Workloads again (releaseChecks).
type KueueReconciler struct {
	// Client lists Kueue's objects from the API server (unstructured reads are not
	// cached) and writes them and the pool's status.kueue.
	Client client.Client
	// APIReader reads the pool uncached, so that a pass never computes status.kueue
	// against a status older than its own last write.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock is the clock the quota's timing is read on (flavorQuota).
	Clock clock.PassiveClock

	// watch starts the watches of Kueue's objects once Kueue's API is served; nil (the
	// tests that call Reconcile directly) counts Kueue as served and watches nothing.
	watch *kueueWatch
}

// Reconcile brings the Kueue objects of one pool to what its spec.kueue and persisted
// status say now, and patches status.kueue if it changed. It looks again when a quota
// changes by the clock, when Kueue could not be read or written, and at least every
// resyncPeriod while spec.kueue is set (the hold messages say "in 4h").
func (k *KueueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cached := &gpupoolv1.GPUPoolProfile{}
	if err := k.Client.Get(ctx, req.NamespacedName, cached); err == nil && cached.Spec.Kueue == nil && cached.Status.Kueue == nil {
		// Most pools never set spec.kueue: no read of the API server for them.
		forgetKueueMetrics(req.Name)
		return ctrl.Result{}, nil
	}
	pool := &gpupoolv1.GPUPoolProfile{}
	if err := k.APIReader.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			forgetKueueMetrics(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the pool's finalizer releases the checks (see the note above)
	}
	if specUnreadable(pool) {
		// The pool pass cannot read the schedule, so its status says nothing of what
		// comes: Kueue is left as last set until a pass can (kueueInputs wakes us then).
		return ctrl.Result{}, nil
	}
	now := k.Clock.Now()
	before := pool.DeepCopy()
	again := k.syncKueue(ctx, pool, now)
	if !equality.Semantic.DeepEqual(before.Status.Kueue, pool.Status.Kueue) {
		// A merge patch of the difference: status.kueue and nothing else of the pool.
		if err := k.Client.Status().Patch(ctx, pool, poolStatusPatch(before, false)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("patching status.kueue: %w", err)
		}
	}
	if pool.Spec.Kueue != nil && !poolPaused(pool) {
		again = execute.Soonest(again, resyncPeriod)
	}
	return ctrl.Result{RequeueAfter: again}, nil
}

// emit records an event on the pool; the reason doubles as the event's action.
func (k *KueueReconciler) emit(pool *gpupoolv1.GPUPoolProfile, typ, reason, format string, args ...any) {
	k.Recorder.Eventf(pool, nil, typ, reason, reason, "%s", cutNote(fmt.Sprintf(format, args...)))
}

// kueueBridge is the Kueue controller's code for the pool reconciler's deletion pass:
// the controller SetupWithManager registered, or, for the tests that call Reconcile
// directly, one on the pool reconciler's client.
func (r *GPUPoolProfileReconciler) kueueBridge() kueueReleaser {
	if r.kueue != nil {
		return r.kueue
	}
	return &KueueReconciler{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock, watch: r.kueueWatch}
}

// SetupWithManager registers the Kueue controller. It is woken by a pool's spec changes
// and by the status fields it decides from (kueueInputs), and, once Kueue's API is served
// (now or later: kueueWatch), by Workloads, by the ClusterQueues labelled for a pool and
// by AdmissionChecks. demand, when not nil, is the demand watch's controller: a Workload
// event also wakes it for the pools whose demand counts Workloads (spec.demand and
// spec.kueue), which wakes the pool pass only when its decision changes.
func (k *KueueReconciler) SetupWithManager(mgr ctrl.Manager, demand controller.Controller) error {
	if k.Clock == nil {
		k.Clock = clock.RealClock{}
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(KueueControllerName).
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(kueueInputChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Build(k)
	if err != nil {
		return err
	}
	watches := k.kueueWatches(mgr.GetCache(), c, demand)
	started := 0
	k.watch = &kueueWatch{mapper: mgr.GetRESTMapper(), start: func() error {
		// Each watch is added once, also when a later one failed and start is retried.
		for ; started < len(watches); started++ {
			if err := watches[started](); err != nil {
				return err
			}
		}
		return nil
	}}
	_, err = k.watch.ensure(k.Clock.Now())
	return err
}

// kueueWatches are the watches of Kueue's objects, added once Kueue's API is served.
// They watch metadata only: the pass lists what it reads from the API server, so the
// cache does not hold every Workload of the cluster whole.
func (k *KueueReconciler) kueueWatches(c cache.Cache, kc, demand controller.Controller) []func() error {
	meta := func(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{}
		o.SetGroupVersionKind(gvk)
		return o
	}
	ws := []func() error{
		func() error {
			return kc.Watch(source.Kind[client.Object](c, meta(kueueWorkload), handler.EnqueueRequestsFromMapFunc(k.kueuePools)))
		},
		// A ClusterQueue's spec or opt-in label: the pool it names (before and after).
		func() error {
			return kc.Watch(source.Kind[client.Object](c, meta(kueueClusterQueue), handler.EnqueueRequestsFromMapFunc(queuePool),
				predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})))
		},
		// An AdmissionCheck created (to mark active): its controllerName is not in its
		// metadata, so every pool with spec.kueue looks.
		func() error {
			return kc.Watch(source.Kind[client.Object](c, meta(kueueAdmissionCheck), handler.EnqueueRequestsFromMapFunc(k.kueuePools),
				predicate.GenerationChangedPredicate{}))
		},
	}
	if demand != nil {
		ws = append(ws, func() error {
			return demand.Watch(source.Kind[client.Object](c, meta(kueueWorkload), k.workloadDemandPools()))
		})
	}
	return ws
}

// kueuePools maps an event of Kueue's to the pools that set spec.kueue.
func (k *KueueReconciler) kueuePools(ctx context.Context, _ client.Object) []reconcile.Request {
	return poolsWhere(ctx, k.Client, func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Kueue != nil })
}

// queuePool maps a ClusterQueue to the pool its gpupool.dev/pool label opts it in to.
func queuePool(_ context.Context, o client.Object) []reconcile.Request {
	if p := o.GetLabels()[gpupoolv1.LabelKueuePool]; p != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p}}}
	}
	return nil
}

// workloadDemandPools enqueues, in the demand watch, the pools whose demand counts
// Workloads (spec.demand and spec.kueue, not paused), after demandCoalesce as a pod
// event does: a burst of Workload events is one recheck per pool.
func (k *KueueReconciler) workloadDemandPools() handler.TypedEventHandler[client.Object, reconcile.Request] {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range poolsWhere(ctx, k.Client, func(p *gpupoolv1.GPUPoolProfile) bool {
			return p.Spec.Kueue != nil && p.Spec.Demand != nil && !poolPaused(p)
		}) {
			q.AddAfter(req, demandCoalesce)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, _ event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, _ event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		DeleteFunc: func(ctx context.Context, _ event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
	}
}

// specUnreadable says whether the pool's last pass could not read its schedule
// (Stalled, InvalidSpec): its persisted status is no word on which layout comes when.
func specUnreadable(p *gpupoolv1.GPUPoolProfile) bool {
	c := findCondition(p, gpupoolv1.ConditionStalled)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonInvalidSpec
}

// kueueInputChanged lets through the pool events that may change what the Kueue
// controller writes (kueueInputs differ); the pool pass's other status writes (workers,
// conditions, plan, demand's counts) wake nothing here.
func kueueInputChanged() predicate.Predicate {
	return poolUpdated(func(o, n *gpupoolv1.GPUPoolProfile) bool { return kueueInputs(o) != kueueInputs(n) })
}

// kueueInputs is what of the pool the Kueue controller decides from, as a key: the spec
// (its generation: spec.kueue, paused, the schedule's time zone and warnAhead), whether
// it is being deleted, whether its last pass could read the schedule (specUnreadable),
// and the persisted status that says which layout is ready for work and when it is left
// (activeLayout, the transition's target and abort, nextTransition, the demand switch
// announced, and the desired reason the hold message names). Its own status.kueue is
// not an input.
func kueueInputs(p *gpupoolv1.GPUPoolProfile) string {
	st := &p.Status
	at := func(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }
	k := []string{fmt.Sprintf("generation=%d", p.Generation), fmt.Sprintf("deleting=%v", !p.DeletionTimestamp.IsZero()),
		fmt.Sprintf("unreadable=%v", specUnreadable(p)), "active=" + st.ActiveLayout, "reason=" + string(st.DesiredReason)}
	if t := st.Transition; t != nil {
		k = append(k, "to="+t.To)
		if t.AbortedTime != nil {
			k = append(k, "aborted="+at(*t.AbortedTime))
		}
	}
	if nt := st.NextTransition; nt != nil {
		k = append(k, "next="+nt.Layout+"@"+at(nt.At))
	}
	if d := st.Demand; d != nil && d.Switch != nil {
		k = append(k, "switch="+d.Switch.Layout+"@"+at(d.Switch.At))
	}
	return strings.Join(k, ";")
}
