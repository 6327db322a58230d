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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/gpupool/gpupool/internal/plan"
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
	// MaxConcurrentReconciles is how many pools are reconciled at once (default 4), so
	// that one pool's long pass never holds another back. One pool is never reconciled
	// twice at the same time.
	MaxConcurrentReconciles int

	// terminating measures how long pods have been terminating, on Clock (see
	// drain.TerminatingClock): a drain waits for them a bounded time.
	terminating drain.TerminatingClock

	// tasks wakes a pool when one of its vSphere tasks ends; nil (the tests that call
	// Reconcile directly) leaves the waits to the requeue.
	tasks *taskWatch
	// kueueWatch starts the watch of Kueue's Workloads once Kueue is installed; nil (the
	// tests that call Reconcile directly) watches nothing.
	kueueWatch *kueueWatch

	// maxNodeWrites and maxEvictions override maxNodeWritesPerPass and
	// maxEvictionsPerPass when not 0 (tests, to cross the caps with few nodes).
	maxNodeWrites, maxEvictions int
}

// Reconcile implements reconcile.Reconciler: observe, decide, act; then one function
// computes the conditions and the phase from what the pass found, and one patch writes
// the status.
func (r *GPUPoolProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	pool := &gpupoolv1.GPUPoolProfile{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.tasks.watch(req.Name, nil, nil)
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
	res, err := r.reconcile(bodyCtx, s)
	if err == nil && s.facts.invalidSpec == "" {
		res.RequeueAfter = soonest(res.RequeueAfter, r.syncKueue(bodyCtx, s))
	}
	r.tasks.watch(pool.Name, s.vc, inFlight(pool))
	if s.budget.wasCapped() && err == nil {
		// The pass left writes for the next one: it follows at once.
		res.RequeueAfter = requeueCapped
	}
	return res, err
}

func (r *GPUPoolProfileReconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	pool := s.pool
	st := &pool.Status

	// Which layout is wanted now, and when that changes next (with spec.demand, as
	// demand moves it within its limits).
	d, err := r.desire(ctx, s)
	if err != nil {
		s.facts.invalidSpec = err.Error()
		// No switch is planned while the schedule cannot be read: no warning stands.
		r.withdrawWarnings(ctx, s, func(time.Time) bool { return false })
		return ctrl.Result{}, nil // only a spec change helps
	}
	s.decision = d
	st.DesiredLayout, st.DesiredReason = d.Layout, d.Reason
	st.NextTransition = nil
	if d.Next != nil {
		st.NextTransition = &gpupoolv1.NextTransition{Layout: d.Next.Layout, At: metav1.NewTime(d.Next.At)}
	}
	s.layout = layoutNamed(&pool.Spec, d.Layout)
	boundary := r.untilBoundary(s)

	// Paused: observe nothing, touch nothing but the draining-soon warnings, which
	// announce drains that will not happen while paused.
	if pool.Spec.Paused {
		s.facts.paused = true
		r.withdrawWarnings(ctx, s, func(time.Time) bool { return false })
		return ctrl.Result{RequeueAfter: r.followPausedTasks(ctx, s)}, nil
	}

	// Observe vSphere and the nodes; record the tasks that finished. Without vSphere the
	// warnings stay only while their switch is still due.
	if retry, ok := r.observe(ctx, s); !ok {
		due, horizon := switchDue(s), warnAhead(&pool.Spec)
		r.withdrawWarnings(ctx, s, func(at time.Time) bool { return warningDue(s.now, d.Next, horizon, due, at) })
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	taskWait := r.checkTasks(ctx, s)
	r.releaseRemoved(ctx, s)

	// An aborted transition waits for a new spec or another wanted layout.
	if t := st.Transition; t != nil && t.AbortedTime != nil {
		if t.To == d.Layout && t.Generation == pool.Generation {
			return r.keepAborted(ctx, s, boundary), nil
		}
		st.Transition = nil
	}

	// Decide: the plan to the wanted layout, or back to the previous one.
	p, err := r.decide(ctx, s, taskWait > 0)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.facts.settling {
		return ctrl.Result{RequeueAfter: min(taskWait, boundary)}, nil
	}
	r.recordWorkers(s, p)
	r.publishPlan(ctx, s, p)
	res := ctrl.Result{RequeueAfter: boundary}
	res.RequeueAfter = soonest(res.RequeueAfter, taskWait)
	if p.Done() || len(p.Problems) > 0 {
		res.RequeueAfter = soonest(res.RequeueAfter, r.warnSchedulers(ctx, s, p))
		r.publishStates(ctx, s)
	}
	if p.Done() {
		s.facts.done = true
		if taskWait == 0 && s.facts.fallback == "" {
			r.completeTransition(s)
		}
		if s.facts.fallback != "" {
			res.RequeueAfter = min(res.RequeueAfter, requeueBlocked)
		}
		return res, nil
	}
	if len(p.Problems) > 0 {
		// Nothing can be done safely; the problems are reported as Stalled.
		return ctrl.Result{RequeueAfter: min(requeueBlocked, boundary)}, nil
	}

	// Act: the due steps, one per worker. A failing step is reported and never stops
	// the others.
	if s.facts.fallback == "" {
		r.startTransition(s, p)
	}
	r.act(ctx, s, p, &res)
	// After the steps: their writes (a cordon first of all) come first in the pass's
	// budget (passBudget); a warning of a node this pass cordoned is moot anyway.
	res.RequeueAfter = soonest(res.RequeueAfter, r.warnSchedulers(ctx, s, p))
	r.publishStates(ctx, s)
	if len(s.facts.held) > 0 {
		res.RequeueAfter = min(res.RequeueAfter, requeueBlocked)
	}
	return res, nil
}

// act runs the due steps. Drains run their evictions concurrently, after every node the
// plan will drain has been cordoned; the other steps run one by one, but the vSphere
// tasks they start are started together at the end (startQueued).
func (r *GPUPoolProfileReconciler) act(ctx context.Context, s *scope, p *plan.Plan, res *ctrl.Result) {
	note := func(step plan.Step, after time.Duration, err error) {
		if errors.Is(err, errCapped) {
			return // goes on in the next pass, which follows at once
		}
		if err != nil {
			ws := s.worker(step.VM)
			ws.Message = fmt.Sprintf("%s failed: %v", step.Action, err)
			s.facts.stepErrors = append(s.facts.stepErrors, fmt.Sprintf("%s of VM %s: %v", step.Action, step.VM, err))
			after = requeueDrain
		}
		res.RequeueAfter = soonest(res.RequeueAfter, after)
	}
	aborted := func() bool { t := s.pool.Status.Transition; return t != nil && t.AbortedTime != nil }
	var drains, others []plan.Step
	for _, step := range p.Due(int(max(s.pool.Spec.MaxParallel, 1))) {
		ws := s.worker(step.VM)
		switch {
		case step.Action != plan.Drain:
			others = append(others, step)
		case ws.NextRetryTime != nil && s.now.Before(ws.NextRetryTime.Time):
			note(step, ws.NextRetryTime.Sub(s.now), nil)
		default:
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(s.now)
			}
			drains = append(drains, step)
		}
	}
	// Nothing is evicted until every node to drain is cordoned (cordonAhead), even when
	// that takes more than one pass.
	if len(drains) > 0 && r.cordonAhead(ctx, s, p) {
		for i, o := range r.evictAll(ctx, s, drains) {
			step := drains[i]
			after, err := r.settleDrain(ctx, s, s.worker(step.VM), s.nodes[step.VM], o)
			note(step, after, err)
			if aborted() {
				return
			}
		}
	}
	others = r.patchNodesTogether(ctx, s, others, note)
	r.parkAhead(ctx, s, others)
	for _, step := range others {
		queued := len(s.queued)
		after, err := r.execute(ctx, s, step)
		for i := queued; i < len(s.queued); i++ {
			s.queued[i].step = step
		}
		note(step, after, err)
		if aborted() {
			// Nothing queued was stored or started: the steps are planned again.
			for _, q := range s.queued {
				if ws := findWorker(s.pool, q.worker); ws != nil {
					ws.Task = nil
				}
			}
			s.queued = nil
			return
		}
	}
	r.startQueued(ctx, s, note)
}

// patchNodesTogether runs the due steps that only patch their node (Relabel, Uncordon)
// concurrently (bounded): at the end of a transition every node of the new layout is
// relabelled and uncordoned at about the same time. They read the scope and change
// nothing in it, so their outcomes are noted one by one afterwards. It returns the other
// steps.
func (r *GPUPoolProfileReconciler) patchNodesTogether(ctx context.Context, s *scope, steps []plan.Step, note func(plan.Step, time.Duration, error)) []plan.Step {
	var nodeSteps, rest []plan.Step
	for _, step := range steps {
		ws := s.worker(step.VM)
		_, found := s.vm(step.VM)
		plain := found && ws.Task == nil && (ws.NextRetryTime == nil || !s.now.Before(ws.NextRetryTime.Time))
		if (step.Action == plan.Relabel || step.Action == plan.Uncordon) && plain {
			if !s.budget.nodeWrite() {
				continue // in the next pass
			}
			// As execute does for the steps it runs.
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(s.now)
			}
			nodeSteps = append(nodeSteps, step)
		} else {
			rest = append(rest, step)
		}
	}
	type outcome struct {
		after time.Duration
		err   error
	}
	out := make([]outcome, len(nodeSteps))
	forEach(len(nodeSteps), maxConcurrentDrains, func(i int) {
		step := nodeSteps[i]
		node := s.nodes[step.VM]
		if step.Action == plan.Relabel {
			out[i].after, out[i].err = r.relabel(ctx, s, step.VM, node)
			return
		}
		out[i].after, out[i].err = r.uncordonStep(ctx, s, node)
	})
	for i, step := range nodeSteps {
		note(step, out[i].after, out[i].err)
	}
	return rest
}

// decide plans the way to the wanted layout. When that layout cannot be reached in the
// middle of a transition (another VM took a freed GPU, a host left), it plans the way
// back to the layout the transition started from, so that the pool keeps capacity; the
// problems are still reported.
//
// While vSphere tasks are in flight, a shortfall is not believed: the inventory may have
// caught a VM between two states (a vGPU placed on a VM that still reads as powered off)
// and counted a GPU twice. The pass then waits for the tasks (facts.settling) and decides
// on the next one. Feasibility proper is decided before a transition starts, when no task
// of the pool is in flight.
func (r *GPUPoolProfileReconciler) decide(ctx context.Context, s *scope, tasksInFlight bool) (*plan.Plan, error) {
	d := s.decision
	s.nodeStates = r.nodeStates(ctx, s)
	p, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: d.Layout, Inventory: s.inv, Nodes: s.nodeStates, InFlight: plannedInFlight(s.pool)})
	if err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	if len(p.Problems) > 0 && tasksInFlight && !reportedInfeasible(s.persisted) {
		s.facts.settling = true
		return p, nil
	}
	s.facts.problems = p.Problems
	s.facts.held = append(s.facts.held, p.Held...)
	t := s.pool.Status.Transition
	if len(p.Problems) == 0 || t == nil || t.From == "" || t.From == d.Layout {
		return p, nil
	}
	wanted := s.layout
	s.layout = layoutNamed(&s.pool.Spec, t.From)
	back, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: t.From, Inventory: s.inv, Nodes: labelled(s, s.nodeStates), InFlight: plannedInFlight(s.pool)})
	if err != nil || len(back.Problems) > 0 {
		s.layout = wanted
		return p, nil //nolint:nilerr // the way back is not possible either: report the problems
	}
	s.facts.fallback = t.From
	s.facts.held = append(s.facts.held[:0:0], back.Held...)
	return back, nil
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
// changes a drain waits for (podChanged) and when one of their vSphere tasks ends
// (taskWatch).
func (r *GPUPoolProfileReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeNameField, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
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
	b := ctrl.NewControllerManagedBy(mgr).
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, allPools, builder.WithPredicates(nodeChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfPodNode), builder.WithPredicates(podChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.demandPools), builder.WithPredicates(demandPodChanged())).
		WatchesRawSource(source.Channel(r.tasks.events, &handler.EnqueueRequestForObject{}))
	c, err := b.Named("gpupoolprofile").
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 4)}).
		Build(r)
	if err != nil {
		return err
	}
	// Kueue's Workloads (spec.kueue), once Kueue is installed (now or later): a Workload
	// that reserves quota needs its check set, and counts as demand.
	wl := &unstructured.Unstructured{}
	wl.SetGroupVersionKind(kueueWorkload)
	r.kueueWatch = &kueueWatch{mapper: mgr.GetRESTMapper(), start: func() error {
		return c.Watch(source.Kind[client.Object](mgr.GetCache(), wl, handler.EnqueueRequestsFromMapFunc(r.kueuePools)))
	}}
	_, err = r.kueueWatch.ensure(r.Clock.Now())
	return err
}

// kueuePools maps a Workload event to the pools that set spec.kueue.
func (r *GPUPoolProfileReconciler) kueuePools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools gpupoolv1.GPUPoolProfileList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pools.Items {
		if p.Spec.Kueue != nil {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
	return reqs
}

// poolsOfPodNode maps a deleted or finished pod to the pools with a worker on its node: a drain
// there may go on.
func (r *GPUPoolProfileReconciler) poolsOfPodNode(ctx context.Context, o client.Object) []reconcile.Request {
	node := o.(*corev1.Pod).Spec.NodeName
	if node == "" {
		return nil
	}
	var pools gpupoolv1.GPUPoolProfileList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pools.Items {
		for _, w := range p.Status.Workers {
			if w.Node == node {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
				break
			}
		}
	}
	return reqs
}
