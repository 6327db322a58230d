package controllers

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// demandWatch re-decides a demand pool's layout when a pod that may change its demand
// changes, from the caches only, and wakes the pool's pass (which reads vCenter) only
// when the decision would change: the layout wanted, the switch announced, or a demand
// timer started or stopped. A pod event that changes nothing costs a read of the caches,
// at most one per pool per demandCoalesce, and no vCenter call. status.demand's counts
// are refreshed by the passes (at least every resyncPeriod).
//
// It is a controller of its own, keyed by pool: it also looks again after the pool's
// writes that demand reads (demandInputChanged), status included, so that a decision
// made from an older status is never the last word.
type demandWatch struct {
	r *GPUPoolProfileReconciler
	// wake hands a pool to the pool controller's queue.
	wake chan event.GenericEvent
}

func newDemandWatch(r *GPUPoolProfileReconciler) *demandWatch {
	return &demandWatch{r: r, wake: make(chan event.GenericEvent, 256)}
}

// setup registers the demand watch with the manager. The controller it returns is
// where the Kueue controller adds the watch of Workloads once Kueue is served.
func (dw *demandWatch) setup(mgr ctrl.Manager) (controller.Controller, error) {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("gpupool-demand").
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(demandInputChanged())).
		Watches(&corev1.Pod{}, dw.podHandler(), builder.WithPredicates(demandPodChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2})
	if np := dw.r.nodePods; np != nil {
		// The pods of the pools' nodes (nodepods.go): one that ends or goes may
		// start a layout's idle timer.
		b = b.WatchesRawSource(source.Channel(np.demand, coalesced()))
	}
	return b.Build(dw)
}

// coalesced enqueues a pool demandCoalesce after an event, once however many come.
func coalesced() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Name: e.Object.GetName()}}, demandCoalesce)
		},
	}
}

// podHandler maps a pod event to the demand pools it may concern (the pod asks for the
// pool's GPU resource and is in a namespace the pool's demand selects), after
// demandCoalesce: the queue keeps one entry per pool, so a burst is one recheck.
func (dw *demandWatch) podHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		for _, req := range dw.r.demandPools(ctx, p) {
			q.AddAfter(req, demandCoalesce)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}

// demandPools are the pools with spec.demand whose demand the pod may change.
func (r *GPUPoolProfileReconciler) demandPools(ctx context.Context, p *corev1.Pod) []reconcile.Request {
	return poolsWhere(ctx, r.Client, func(pool *gpupoolv1.GPUPoolProfile) bool {
		return pool.Spec.Demand != nil && !poolPaused(pool) && r.wakes(ctx, pool, p)
	})
}

// wakes says whether an event of the pod may change the pool's demand: the pod asks for
// the pool's GPU resource (or has resource claims, with readiness.dra), its namespace is selected (its labels read from the cache, by
// name: one namespace, not all of them, per event) and the pod selector matches.
func (r *GPUPoolProfileReconciler) wakes(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, p *corev1.Pod) bool {
	d := pool.Spec.Demand
	if d == nil || d.NamespaceSelector == nil || !demand.AsksGPUs(pool, p) {
		return false
	}
	var ns metav1.PartialObjectMetadata
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if !demand.EmptySelector(d.NamespaceSelector) {
		if err := r.Client.Get(ctx, client.ObjectKey{Name: p.Namespace}, &ns); err != nil {
			return false
		}
	}
	who, err := demand.ScopeOf(pool, []metav1.PartialObjectMetadata{ns})
	return err == nil && who.Wakes(p)
}

// Reconcile decides the pool's demand from the caches and wakes the pool when the
// decision differs from its status.
func (dw *demandWatch) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool gpupoolv1.GPUPoolProfile
	if err := dw.r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pool.Spec.Demand == nil || pool.Spec.Paused || !pool.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	dw.r.expandSpec(&pool) // layouts by count as the pass last resolved them
	now := dw.r.Clock.Now()
	// As the pass decides: with the pool's requests applied (a request in force is the
	// decision, whatever the demand).
	_, reqs, err := dw.r.resolveRequests(ctx, &pool, now)
	if err != nil || reqs.Paused() {
		return reconcile.Result{}, nil //nolint:nilerr // the pass reads the requests itself and reports
	}
	v, err := dw.r.viewDemand(ctx, effective(&pool, reqs), now, &kueueView{})
	switch {
	case err != nil || v.Unobserved != nil:
		// The pass reports it; it looks again at requeueBlocked itself.
		log.FromContext(ctx).V(1).Info("demand not decided", "err", err, "unobserved", v.Unobserved)
		demandRechecks.WithLabelValues(pool.Name, "unobserved").Inc()
		return reconcile.Result{}, nil
	case demandChanged(&pool, v):
		demandRechecks.WithLabelValues(pool.Name, "woken").Inc()
		select {
		case dw.wake <- event.GenericEvent{Object: &pool}:
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	default:
		demandRechecks.WithLabelValues(pool.Name, "unchanged").Inc()
	}
	var res reconcile.Result
	if at := v.Decision.Recheck; !at.IsZero() {
		// A timer runs out (for, idleFor, a window): the decision may change then
		// without any event.
		res.RequeueAfter = max(at.Sub(now), time.Second)
	}
	return res, nil
}

// demandChanged says whether the decision of the view differs from the one the pool's
// status records: the layout and reason wanted, the switch announced, or which demand
// timers run. Counts alone (one more pending pod above the threshold) are no change.
func demandChanged(pool *gpupoolv1.GPUPoolProfile, v demand.View) bool {
	if pool.Status.DesiredLayout != v.Decision.Layout || pool.Status.DesiredReason != v.Decision.Reason {
		return true
	}
	return demandKey(pool.Status.Demand) != demandKey(v.Status)
}

// demandKey is what of status.demand a pass acts on: the announced switch, the budget's
// last reset, and which layouts' pending and idle timers run (not since when: they are only ever started from
// the status they are compared with).
func demandKey(ds *gpupoolv1.DemandStatus) string {
	if ds == nil {
		return ""
	}
	var k []string
	if b := ds.Budget; b != nil && b.ResetToken != "" {
		k = append(k, "reset="+b.ResetToken)
	}
	if sw := ds.Switch; sw != nil {
		k = append(k, "switch="+sw.Layout+"@"+sw.At.UTC().Format(time.RFC3339))
	}
	for _, l := range ds.Layouts {
		if l.PendingSince != nil {
			k = append(k, "pending="+l.Layout)
		}
		if l.IdleSince != nil {
			k = append(k, "idle="+l.Layout)
		}
	}
	slices.Sort(k)
	return strings.Join(k, ";")
}

// demandInputChanged lets through the pool events that may change demand's decision or
// the status it is compared with: a spec change (generation), an annotation (the budget
// reset), and the status fields demand reads or writes. The pass's other status writes
// (progress, conditions, plan) wake nothing here.
func demandInputChanged() predicate.Predicate {
	return poolUpdated(func(o, n *gpupoolv1.GPUPoolProfile) bool {
		os, ns := &o.Status, &n.Status
		return o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) ||
			os.ActiveLayout != ns.ActiveLayout || os.DesiredLayout != ns.DesiredLayout || os.DesiredReason != ns.DesiredReason ||
			!equality.Semantic.DeepEqual(os.Demand, ns.Demand) || !equality.Semantic.DeepEqual(os.Transition, ns.Transition) ||
			len(os.History) != len(ns.History) || !equality.Semantic.DeepEqual(os.History, ns.History)
	})
}
