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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=vspheremachines;vspherevms,verbs=get;patch

// Requeue intervals. A reconcile never waits: it starts work, records it and comes back.
const (
	requeueTask       = 2 * time.Second
	requeueDrain      = 10 * time.Second
	requeueNodeReady  = 5 * time.Second
	requeueStep       = time.Second
	requeueBlocked    = time.Minute
	requeueVCenter    = 30 * time.Second
	requeueLoginError = 10 * time.Minute
	resyncPeriod      = 5 * time.Minute
	maxBackoff        = 5 * time.Minute
	baseBackoff       = 5 * time.Second
	reconcileTimeout  = 2 * time.Minute
)

// GPUPoolProfileReconciler makes a GPUPoolProfile true: the wanted layout's VMs run with
// their vGPU profiles and their nodes are Ready and labelled, the other VMs are parked.
type GPUPoolProfileReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the pool itself uncached, so a reconcile never acts on a status
	// older than its own last write (which would start a vSphere task twice).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock is injected so tests can step time across window boundaries.
	Clock   clock.PassiveClock
	VSphere vsphere.Connector
	// Credentials says which namespaces credentials Secrets may be read from; the zero
	// value allows none.
	Credentials secretpolicy.Policy
	// secretsWatched: the credentials namespace's Secrets wake their pools
	// (watchCredentials could make the watch).
	secretsWatched bool
	// MaxConcurrentReconciles is how many pools are reconciled at once (default 4), so
	// that one pool's long pass never holds another back. One pool is never reconciled
	// twice at the same time.
	MaxConcurrentReconciles int

	// nodePods watches the pods of the pools' nodes (the manager's cache holds only
	// unbound pods); nil (the tests that call Reconcile directly) lists them through
	// Client.
	nodePods *nodePods
	// podsIndexed: Client reads pods from the manager's cache, which indexes them
	// (indexPods); false for a client straight to the API server (pendingPods).
	podsIndexed bool

	// terminating measures how long pods have been terminating, on Clock (see
	// drain.TerminatingClock): a drain waits for them a bounded time.
	terminating drain.TerminatingClock

	// tasks wakes a pool when one of its vSphere tasks ends; nil (the tests that call
	// Reconcile directly) leaves the waits to the requeue.
	tasks *taskWatch
	// kueueWatch starts the watches of Kueue's objects once Kueue is installed; demand
	// asks it whether Kueue is served. nil (the tests that call Reconcile directly)
	// watches nothing.
	kueueWatch *kueueWatch
	// kueue is the Kueue controller SetupWithManager registers beside this one; the
	// deletion pass releases the pool's checks through it (kueueBridge).
	kueue *KueueReconciler

	// maxNodeWrites and maxEvictions override maxNodeWritesPerPass and
	// maxEvictionsPerPass when not 0 (tests, to cross the caps with few nodes).
	maxNodeWrites, maxEvictions int
	// stalls counts the capped passes in a row that made no write, per pool
	// (afterCapped).
	stalls stallCount
}

// Reconcile implements reconcile.Reconciler: observe, decide, act; then one function
// computes the conditions and the phase from what the pass found, and one patch writes
// the status.
func (r *GPUPoolProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	pool := &gpupoolv1.GPUPoolProfile{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.tasks.watch(req.Name, nil, nil)
			r.stalls.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, pool)
	}
	if controllerutil.AddFinalizer(pool, FinalizerName) {
		if err := r.Client.Update(ctx, pool); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	s := &scope{pool: pool, persisted: pool.DeepCopy(), now: r.Clock.Now(),
		budget: newPassBudget(cmp.Or(r.maxNodeWrites, maxNodeWritesPerPass), cmp.Or(r.maxEvictions, maxEvictionsPerPass))}
	before := pool.DeepCopy()
	defer func() {
		r.flushVMEvents(s) // what observe did not tell (a paused pool's tasks): on the pool
		summarize(s)
		r.announce(before, pool)
		r.updateWorkerMetrics(pool)
		if retErr == nil {
			pool.Status.ObservedGeneration = pool.Generation
		}
		if equality.Semantic.DeepEqual(s.persisted.Status, pool.Status) {
			return
		}
		// Note: a failed patch loses only what can be re-observed: task ids are found
		// again through the intent persisted before each task (see startTask).
		if err := r.Client.Status().Patch(ctx, pool, client.MergeFrom(s.persisted)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching status: %w", err))
		}
	}()

	// A vCenter that accepts connections but hangs must not hold the worker: the body
	// gets a deadline, the status patch above does not.
	bodyCtx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	// Kueue's quota and checks are the Kueue controller's (KueueReconciler): it follows
	// the status this pass writes, and the pass never waits for Kueue's API.
	res, err := r.reconcile(bodyCtx, s)
	r.tasks.watch(pool.Name, s.vc, inFlight(pool))
	if err == nil {
		// A pass that left writes for the next one is followed at once, or backs off
		// when none of its writes went through.
		res.RequeueAfter = r.stalls.next(pool.Name, res.RequeueAfter, s.budget)
	}
	return res, err
}

// reportedInfeasible tells whether the pool already reports its layout infeasible: then
// a shortfall is not new (it is the one being reverted around), and waiting for tasks
// would only make the conditions flap.
func reportedInfeasible(p *gpupoolv1.GPUPoolProfile) bool {
	c := findCondition(p, gpupoolv1.ConditionStalled)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonInfeasible
}

func layoutNamed(spec *gpupoolv1.GPUPoolProfileSpec, name string) *gpupoolv1.Layout {
	for i := range spec.Layouts {
		if spec.Layouts[i].Name == name {
			return &spec.Layouts[i]
		}
	}
	return nil
}

// untilBoundary is how long until the wanted layout changes, capped by the resync period.
// soonest merges requeue delays: the lowest that is not zero (zero: no requeue asked),
// as Cluster API's LowestNonZeroResult does.
func soonest(ds ...time.Duration) time.Duration {
	var out time.Duration
	for _, d := range ds {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}

func (r *GPUPoolProfileReconciler) untilBoundary(s *scope) time.Duration {
	next := resyncPeriod
	if s.decision.Next != nil {
		next = min(s.decision.Next.At.Sub(s.now), next)
	}
	if !s.demandRecheck.IsZero() {
		next = min(s.demandRecheck.Sub(s.now), next)
	}
	return max(next, time.Second)
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
// changes on their nodes a drain waits for (nodePods, podUpdateMatters), when demand changes (the demand watch) and when one of their vSphere tasks ends
// (taskWatch). Beside it, it registers the demand watch and the Kueue controller
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
		var pools gpupoolv1.GPUPoolProfileList
		if err := r.Client.List(ctx, &pools); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(pools.Items))
		for _, p := range pools.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return reqs
	})
	r.tasks = newTaskWatch(ctx)
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("a client for the nodes' pod watches: %w", err)
	}
	r.nodePods = newNodePods(ctx, cs)
	// Pods change demand through the demand watch, which wakes a pool only when its
	// decision changes (demandwatch.go).
	dw := newDemandWatch(r)
	demandCtrl, err := dw.setup(mgr)
	if err != nil {
		return fmt.Errorf("setting up the demand watch: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, allPools, builder.WithPredicates(nodeChanged())).
		WatchesRawSource(source.Channel(r.nodePods.wake, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(r.tasks.events, &handler.EnqueueRequestForObject{})).
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
	r.kueue = &KueueReconciler{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock}
	if err := r.kueue.SetupWithManager(mgr, demandCtrl); err != nil {
		return fmt.Errorf("setting up the Kueue controller: %w", err)
	}
	r.kueueWatch = r.kueue.watch
	return nil
}
