package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=vspheremachines;vspherevms,verbs=get;patch

// Reconcile implements reconcile.Reconciler: observe, decide, act; then one function
// computes the conditions and the phase from what the pass found, and one patch writes
// the status.
func (r *GPUPoolProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	r.pace.began(req.Name)
	pool, err := r.readPool(ctx, req.NamespacedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.pace.forget(req.Name)
			r.fresh.forget(req.Name)
			r.unwritten.forget(req.Name)
			statusWrites.DeletePartialMatch(prometheus.Labels{"pool": req.Name})
			r.tasks.watch(req.Name, nil, nil)
			r.evictions.Cancel(req.Name)
			r.starts.Cancel(req.Name)
			r.starts.Forget(req.Name)
			r.states.wait(req.Name)
			r.stalls.forget(req.Name)
			r.conversions.forget(req.Name)
			r.selections.forget(req.Name)
			r.usage.forget(req.Name)
			r.ready.forget(req.Name)
			forgetUsageMetrics(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// A pool being deleted is accounted no further: its days go with it.
		r.usage.forget(pool.Name)
		r.unwritten.forget(pool.Name) // the deletion's passes write what they change
		return r.reconcileDelete(ctx, pool)
	}
	if controllerutil.AddFinalizer(pool, FinalizerName) {
		err := r.Client.Update(ctx, pool)
		r.wrote(pool, err)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	// A pass plans on an enumerated copy of the spec (layouts by count: convert.go;
	// by selector: select.go).
	r.expandSpec(pool)

	// A pass starts from what the last one decided, written or not (statusdefer.go).
	stored, unwrittenSince := r.resume(ctx, pool)
	s := &scope{pool: pool, persisted: pool.DeepCopy(), now: r.Clock.Now(), unwrittenSince: unwrittenSince,
		budget: execute.NewBudget(cmp.Or(r.maxNodeWrites, maxNodeWritesPerPass), cmp.Or(r.maxEvictions, maxEvictionsPerPass)).
			WithCordons(cmp.Or(r.maxCordons, maxCordonsPerPass)), readySeq: r.ready.begin(pool.Name),
		times: &passTimes{begun: time.Now()}}
	s.stored = cmp.Or(stored, s.persisted)
	before := statusRead(pool)
	defer func() { logPass(ctx, s, res, retErr) }() // last: after the status write
	defer func() {
		// act armed what the pass's plan waits for before its node writes; here, once
		// its state labels are handed out (a follower's write waits for the batch's to
		// the same node: patchNode), the ones already ready fire, and a pass that
		// stopped before act leaves nothing armed.
		r.ready.set(pool.Name, s.readySeq, s.arms)
		r.flushVMEvents(s) // what observe did not tell (a paused pool's tasks): on the pool
		summarize(s)
		r.announce(before, pool)
		r.updateWorkerMetrics(pool)
		if retErr == nil {
			pool.Status.ObservedGeneration = pool.Generation
		}
		if equality.Semantic.DeepEqual(s.stored.Status, pool.Status) && s.starts.Len() == 0 {
			r.starts.Commit(pool.Name) // nothing the pass took from the starts is left to store
			return
		}
		if wait, ok := r.leaveUnwritten(s, retErr != nil); ok {
			// The answers the pass took from the starts stay with them until a write
			// stores them (no Commit).
			res.RequeueAfter = execute.Soonest(res.RequeueAfter, wait)
			return
		}
		start := time.Now()
		if err := r.writeStatus(ctx, s); err != nil {
			retErr = errors.Join(retErr, err)
		}
		s.times.record("status", start)
	}()

	// A vCenter that accepts connections but hangs must not hold the worker: the body
	// gets a deadline, the status patch above does not.
	bodyCtx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	// Kueue's quota and checks are the Kueue controller's (KueueReconciler): it follows
	// the status this pass writes, and the pass never waits for Kueue's API.
	res, err = r.reconcile(bodyCtx, s)
	r.tasks.watch(pool.Name, s.vc, inFlight(pool))
	if err == nil {
		// A pass that left writes for the next one is followed at once, or backs off
		// when none of its writes went through.
		res.RequeueAfter = r.stalls.next(pool.Name, res.RequeueAfter, s.budget)
	}
	return res, err
}

// writeStatus is the pass's status write, and then hands out the task starts whose
// intents it stores (s.starts). With starts it is optimistically locked, as any write of
// an intent: a pool another writer changed since the pass read it may hold a step this
// pass did not see, and a start is asked only once its intent is stored over the status
// the pass decided on. A write that fails hands nothing out: the next pass reads the
// pool from the API server (wrote) and plans from what it observes; the answers of
// earlier starts the pass took are kept for it (execute.Starts.Commit).
//
// Note: a failed patch otherwise loses only what can be re-observed: task ids are found
// again through the intents stored before each task (internal/execute: Run, Follower).
func (r *GPUPoolProfileReconciler) writeStatus(ctx context.Context, s *scope) error {
	err := r.Client.Status().Patch(ctx, s.pool, poolStatusPatch(s.stored, s.starts.Len() > 0))
	r.wrote(s.pool, err)
	switch {
	case err == nil:
		statusWrites.WithLabelValues(s.pool.Name, "written").Inc()
		r.starts.Commit(s.pool.Name) // the task ids the pass took from the starts are stored
		s.starts.Hand()
		return nil
	case s.starts.Len() > 0:
		log.FromContext(ctx).Info("The status write failed: the pass's vSphere task starts are not asked", "starts", s.starts.Len(), "error", err.Error())
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("patching status: %w", err)
}

// statusRead is what announce compares a pass's outcome with: the pool's status as the
// pass read it, but for the workers, which announce does not read; at 64 hosts they are
// nearly all of the status, and the pass holds them twice already (s.persisted).
func statusRead(pool *gpupoolv1.GPUPoolProfile) *gpupoolv1.GPUPoolProfile {
	st := pool.Status
	st.Workers = nil
	return &gpupoolv1.GPUPoolProfile{Status: *st.DeepCopy()}
}

// announce records a Warning event when the pool becomes Stalled, or Stalled for
// another reason: events are how a person watching the cluster learns that they must act.
func (r *GPUPoolProfileReconciler) announce(before, after *gpupoolv1.GPUPoolProfile) {
	r.announceDemand(before, after)
	r.announceNextInfeasible(before, after)
	now := findCondition(after, gpupoolv1.ConditionStalled)
	if now == nil || now.Status != metav1.ConditionTrue {
		return
	}
	if was := findCondition(before, gpupoolv1.ConditionStalled); was != nil && was.Status == now.Status && was.Message == now.Message {
		return
	}
	r.emit(after, corev1.EventTypeWarning, now.Reason, "%s", now.Message)
}

func (r *GPUPoolProfileReconciler) updateWorkerMetrics(p *gpupoolv1.GPUPoolProfile) {
	workersByStep.DeletePartialMatch(prometheus.Labels{"pool": p.Name})
	for _, w := range p.Status.Workers {
		workersByStep.WithLabelValues(p.Name, string(w.Step)).Inc()
	}
}

// SetupWithManager registers the controller. Pools are reconciled on spec changes, on
// node changes that matter (readiness, advertised GPUs, cordon, labels), on pod
// changes on their nodes a drain waits for (nodePods, podUpdateMatters), when demand changes (the demand watch), when one of their vSphere tasks ends
// (taskWatch), when a node's eviction round ends with what no pod event tells (execute.Evictions)
// and when the vSphere task starts a pass handed out are all answered (execute.Starts). Beside it, it registers the demand watch and the Kueue controller
// (KueueReconciler); Kueue's events wake those, never the pool pass.
func (r *GPUPoolProfileReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexPods(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r.podsIndexed = true
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	allPools := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return poolsWhere(ctx, r.Client, nil)
	})
	r.tasks = newTaskWatch(ctx)
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("a client for the nodes' pod watches: %w", err)
	}
	r.nodePods = newNodePods(ctx, cs)
	evictionsDone := make(chan event.GenericEvent, 1024)
	r.evictions = execute.NewEvictions(ctx, func(pool string) { wakePool(evictionsDone, pool) })
	startsDone := make(chan event.GenericEvent, 1024)
	r.starts = execute.NewStarts(ctx, func(pool string) { wakePool(startsDone, pool) })
	r.starts.Limit = r.MaxConcurrentStarts
	r.states = newStateBatches(ctx)
	r.ready = newReadyFollow(ctx, r)
	if err := r.ready.watch(ctx, mgr.GetCache()); err != nil {
		return err
	}
	// Pods change demand through the demand watch, which wakes a pool only when its
	// decision changes (demandwatch.go).
	dw := newDemandWatch(r)
	demandCtrl, err := dw.setup(mgr)
	if err != nil {
		return fmt.Errorf("setting up the demand watch: %w", err)
	}
	// What the pool's own switch does (its nodes, pods and tasks) wakes it paced; its
	// spec, requests, demand and credentials at once (passpace.go).
	r.pace = newPassPace(r.MinPassInterval)
	pool := r.pace.paced(&handler.EnqueueRequestForObject{})
	b := ctrl.NewControllerManagedBy(mgr).
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, r.pace.paced(allPools), builder.WithPredicates(nodeChanged())).
		// A request's spec never changes: its creation and deletion wake its pool, its
		// status (the pool's own writes) does not.
		Watches(&gpupoolv1.GPUPoolRequest{}, r.requestPools(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.nodePods.wake, pool)).
		WatchesRawSource(source.Channel(r.tasks.events, pool)).
		WatchesRawSource(source.Channel(evictionsDone, pool)).
		WatchesRawSource(source.Channel(startsDone, pool)).
		WatchesRawSource(source.Channel(dw.wake, &handler.EnqueueRequestForObject{}))
	b, err = r.watchCredentials(mgr, b)
	if err != nil {
		return err
	}
	if err := b.Named("gpupoolprofile").
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 4)}).
		Complete(r); err != nil {
		return err
	}
	// Kueue (spec.kueue) is a controller of its own, registered here so that the
	// manager's setup stays one call; it shares the watch of Kueue's API with demand.
	// Its writes (ClusterQueues' quota, Workloads' checks, the pool's status.kueue) go
	// under a field manager of their own (docs/gitops.md).
	kueue := &KueueReconciler{Client: client.WithFieldOwner(r.Client, FieldOwnerKueue), APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock}
	r.kueue = kueue
	if err := kueue.SetupWithManager(mgr, demandCtrl); err != nil {
		return fmt.Errorf("setting up the Kueue controller: %w", err)
	}
	r.kueueWatch = kueue.watch
	// The accounting of pools at rest, which no pass advances (usage.go); a runnable
	// that needs the lead, as the passes do.
	if err := mgr.Add(manager.RunnableFunc(r.usageFlusher)); err != nil {
		return fmt.Errorf("adding the accounting's flusher: %w", err)
	}
	return nil
}
