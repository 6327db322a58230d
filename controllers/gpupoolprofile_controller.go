package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=vspheremachines,verbs=get;patch

// Requeue intervals. A reconcile never waits: it starts work, records it and comes back.
const (
	requeueTask       = 2 * time.Second
	requeueDrain      = 10 * time.Second
	requeueNodeReady  = 5 * time.Second
	requeueStep       = time.Second
	requeueBlocked    = time.Minute
	resyncPeriod      = 5 * time.Minute
	guestShutdownWait = 2 * time.Minute
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
}

// scope is what one reconcile works on.
type scope struct {
	pool  *gpupoolv1.GPUPoolProfile
	now   time.Time
	vc    vsphere.Client
	inv   *inventory.Inventory
	nodes map[string]*corev1.Node // by the VM's inventory name, as plan steps name it
	// specID maps a VM's inventory name to the name or path the spec gives it, which is
	// how worker status entries are keyed.
	specID   map[string]string
	layout   *gpupoolv1.Layout // the wanted layout
	decision plan.Decision
}

// Reconcile implements reconcile.Reconciler.
func (r *GPUPoolProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	pool := &gpupoolv1.GPUPoolProfile{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, pool)
	}
	if controllerutil.AddFinalizer(pool, FinalizerName) {
		if err := r.Client.Update(ctx, pool); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	before := pool.DeepCopy()
	defer func() {
		if retErr == nil {
			pool.Status.ObservedGeneration = pool.Generation
		}
		if equality.Semantic.DeepEqual(before.Status, pool.Status) {
			return
		}
		if err := r.Client.Status().Patch(ctx, pool, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching status: %w", err))
		}
	}()

	// A vCenter that accepts connections but hangs must not hold the worker: the body
	// gets a deadline, the status patch above does not.
	bodyCtx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	s := &scope{pool: pool, now: r.Clock.Now()}
	return r.reconcile(bodyCtx, s)
}

func (r *GPUPoolProfileReconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	pool := s.pool
	st := &pool.Status
	if st.Phase == "" {
		st.Phase = gpupoolv1.PhasePending
	}

	// 1. Which layout is wanted now, and when that changes next.
	d, err := plan.Desired(&pool.Spec, s.now)
	if err != nil {
		condTrue(pool, gpupoolv1.ConditionStalled, ReasonInvalidSpec, err.Error())
		st.Phase = gpupoolv1.PhaseBlocked
		return ctrl.Result{}, nil // only a spec change helps
	}
	s.decision = d
	st.DesiredLayout, st.DesiredReason = d.Layout, d.Reason
	st.NextTransition = nil
	if d.Next != nil {
		st.NextTransition = &gpupoolv1.NextTransition{Layout: d.Next.Layout, At: metav1.NewTime(d.Next.At)}
	}
	for i := range pool.Spec.Layouts {
		if pool.Spec.Layouts[i].Name == d.Layout {
			s.layout = &pool.Spec.Layouts[i]
		}
	}
	boundary := r.untilBoundary(s)

	// 2. Paused: observe nothing, touch nothing.
	if pool.Spec.Paused {
		condTrue(pool, gpupoolv1.ConditionPaused, ReasonPaused, "spec.paused is true: no node is drained and no VM is changed")
		condFalse(pool, gpupoolv1.ConditionProgressing, ReasonPaused, "paused")
		st.Phase = gpupoolv1.PhasePaused
		return ctrl.Result{}, nil
	}
	condFalse(pool, gpupoolv1.ConditionPaused, ReasonNotPaused, "not paused")

	// 3. Observe vSphere and the nodes.
	if res, ok := r.observe(ctx, s); !ok {
		return res, nil
	}

	// 4. An aborted transition waits for a new spec or another wanted layout.
	if t := st.Transition; t != nil && t.AbortedTime != nil {
		if t.To == d.Layout && t.Generation == pool.Generation {
			st.Phase = gpupoolv1.PhaseBlocked
			condFalse(pool, gpupoolv1.ConditionProgressing, ReasonDrainAborted, t.Message)
			return ctrl.Result{RequeueAfter: boundary}, nil
		}
		st.Transition = nil
	}

	// 5. Record the vSphere tasks that finished, then plan from what is observed now.
	taskWait := r.checkTasks(ctx, s)
	p, err := plan.Build(plan.Input{Spec: &pool.Spec, Layout: d.Layout, Inventory: s.inv, Nodes: r.nodeStates(ctx, s)})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("planning: %w", err)
	}
	r.recordWorkers(s, p)
	if len(p.Problems) > 0 {
		msg := problemsMessage(p.Problems)
		if c := findCondition(pool, gpupoolv1.ConditionStalled); c == nil || c.Message != msg || c.Status != metav1.ConditionTrue {
			r.emit(pool, corev1.EventTypeWarning, ReasonInfeasible, "%s", msg)
		}
		condTrue(pool, gpupoolv1.ConditionStalled, ReasonInfeasible, msg)
		condFalse(pool, gpupoolv1.ConditionProgressing, ReasonInfeasible, "layout "+d.Layout+" cannot be reached; nothing was changed")
		st.Phase = gpupoolv1.PhaseBlocked
		return ctrl.Result{RequeueAfter: min(requeueBlocked, boundary)}, nil
	}
	condFalse(pool, gpupoolv1.ConditionStalled, ReasonAsExpected, "the wanted layout fits the GPUs")

	if p.Done() && taskWait == 0 {
		r.completeTransition(s)
		return ctrl.Result{RequeueAfter: boundary}, nil
	}

	// 6. Act: one due step per worker.
	r.startTransition(s, p)
	res := ctrl.Result{RequeueAfter: boundary}
	if taskWait > 0 {
		res.RequeueAfter = min(res.RequeueAfter, taskWait)
	}
	for _, step := range p.Due(int(max(pool.Spec.MaxParallel, 1))) {
		after, err := r.execute(ctx, s, step)
		if err != nil {
			return ctrl.Result{}, err
		}
		if after > 0 && after < res.RequeueAfter {
			res.RequeueAfter = after
		}
		if st.Transition != nil && st.Transition.AbortedTime != nil {
			break
		}
	}
	r.updateWorkerMetrics(pool)
	return res, nil
}

// untilBoundary is how long until the wanted layout changes, capped by the resync period.
func (r *GPUPoolProfileReconciler) untilBoundary(s *scope) time.Duration {
	if s.decision.Next == nil {
		return resyncPeriod
	}
	return max(min(s.decision.Next.At.Sub(s.now), resyncPeriod), time.Second)
}

// observe reads the credentials, the vSphere inventory and the nodes. It reports false
// with a result when the pool cannot go on now; conditions then say why.
func (r *GPUPoolProfileReconciler) observe(ctx context.Context, s *scope) (ctrl.Result, bool) {
	pool := s.pool
	vcc, inv, res, ok := r.connectVCenter(ctx, s)
	if !ok {
		return res, false
	}
	if c := findCondition(pool, gpupoolv1.ConditionDegraded); c != nil && c.Reason == ReasonVCenterUnavailable {
		condFalse(pool, gpupoolv1.ConditionDegraded, ReasonAsExpected, "vCenter reachable")
	}
	s.vc, s.inv = vcc, inv
	if res, ok := r.checkClaims(ctx, s); !ok {
		return res, false
	}

	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		condTrue(pool, gpupoolv1.ConditionDegraded, ReasonNodeNotReady, "listing nodes: "+err.Error())
		return ctrl.Result{RequeueAfter: requeueDrain}, false
	}
	s.nodes = matchNodes(poolVMs(&pool.Spec), inv, nodes.Items)
	s.specID = map[string]string{}
	for _, id := range poolVMs(&pool.Spec) {
		if vm, ok := inv.FindVM(id); ok {
			s.specID[vm.Name] = id
		}
	}
	return ctrl.Result{}, true
}

// poolVMs lists every VM that any layout names, in spec order without repeats.
func poolVMs(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range spec.Layouts {
		for _, w := range l.Workers {
			if !seen[w.VM] {
				seen[w.VM] = true
				out = append(out, w.VM)
			}
		}
	}
	return out
}

// matchNodes finds each VM's node: by spec.providerID (vsphere://<BIOS UUID>), else by
// name. The result is keyed by the VM's inventory name.
func matchNodes(vms []string, inv *inventory.Inventory, nodes []corev1.Node) map[string]*corev1.Node {
	byProvider := map[string]*corev1.Node{}
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		n := &nodes[i]
		if id := strings.ToLower(n.Spec.ProviderID); strings.HasPrefix(id, "vsphere://") {
			byProvider[strings.TrimPrefix(id, "vsphere://")] = n
		}
		byName[n.Name] = n
	}
	out := map[string]*corev1.Node{}
	for _, id := range vms {
		vm, ok := inv.FindVM(id)
		if !ok {
			continue
		}
		if n, ok := byProvider[strings.ToLower(vm.UUID)]; ok && vm.UUID != "" {
			out[vm.Name] = n
		} else if n, ok := byName[vm.Name]; ok {
			out[vm.Name] = n
		}
	}
	return out
}

// wantedMeta is what the node of a VM (by inventory name) of the wanted layout should
// carry.
func (s *scope) wantedMeta(name string) (nodeMeta, bool) {
	if s.layout == nil {
		return nodeMeta{}, false
	}
	for _, w := range s.layout.Workers {
		v, ok := s.inv.FindVM(w.VM)
		if !ok || v.Name != name {
			continue
		}
		mib, _ := inventory.ProfileFrameBufferMiB(w.Profile)
		if h, ok := s.inv.FindHost(v.Host); ok {
			if p, ok := h.Profile(w.Profile); ok && p.FrameBufferMiB > 0 {
				mib = p.FrameBufferMiB
			}
		}
		return activeMeta(s.pool.Name, s.layout, w.Profile, mib), true
	}
	return nodeMeta{}, false
}

// worker returns the status entry of the VM a plan step names.
func (s *scope) worker(name string) *gpupoolv1.WorkerStatus {
	if id, ok := s.specID[name]; ok {
		return workerStatus(s.pool, id)
	}
	return workerStatus(s.pool, name)
}

// nodeStates tells the planner what it needs of each node: re-observed on every pass.
func (r *GPUPoolProfileReconciler) nodeStates(ctx context.Context, s *scope) map[string]plan.NodeState {
	out := map[string]plan.NodeState{}
	for vm, n := range s.nodes {
		ns := plan.NodeState{Name: n.Name, Exists: true, Ready: nodeReady(n), Cordoned: cordonedByUs(n)}
		if m, ok := s.wantedMeta(vm); ok {
			ns.Labelled = hasMeta(n, m)
		}
		if n.Spec.Unschedulable {
			pods, err := r.podsOnNode(ctx, n.Name)
			ns.Drained = err == nil && !anyToEvict(pods)
		}
		out[vm] = ns
	}
	return out
}

func anyToEvict(pods []corev1.Pod) bool {
	for i := range pods {
		if !skipForDrain(&pods[i]) {
			return true
		}
	}
	return false
}

// recordWorkers refreshes every worker's observed fields and its next step.
func (r *GPUPoolProfileReconciler) recordWorkers(s *scope, p *plan.Plan) {
	// A worker's step is the first that the plan has for it, due now or later.
	next := map[string]plan.Step{}
	for _, h := range p.Hosts {
		for _, st := range slices.Concat(h.Steps, h.Later) {
			if _, seen := next[st.VM]; !seen {
				next[st.VM] = st
			}
		}
	}
	keep := s.pool.Status.Workers[:0:0]
	for _, vm := range poolVMs(&s.pool.Spec) {
		ws := *workerStatus(s.pool, vm)
		name := vm
		if v, ok := s.inv.FindVM(vm); ok {
			name = v.Name
			ws.Host, ws.GPU, ws.Profile, ws.PowerState = v.Host, v.GPU, v.Profile, string(v.PowerState)
		} else {
			ws.Host, ws.GPU, ws.Profile, ws.PowerState = "", "", "", ""
			ws.Message = "VM not found in vCenter"
		}
		ws.Node = ""
		if n, ok := s.nodes[name]; ok {
			ws.Node = n.Name
		}
		st, pending := next[name]
		switch {
		case !pending:
			ws.Step, ws.StepStartTime, ws.Attempts, ws.NextRetryTime = gpupoolv1.StepNone, nil, 0, nil
			if ws.Task == nil {
				ws.Message = ""
			}
		case stepFor(st.Action) != ws.Step:
			ws.Step, ws.StepStartTime, ws.Attempts, ws.NextRetryTime = stepFor(st.Action), nil, 0, nil
			ws.Message = st.Reason
		}
		keep = append(keep, ws)
	}
	s.pool.Status.Workers = keep
}

// stepFor names a planned action as the step a worker is at.
func stepFor(a plan.Action) gpupoolv1.Step {
	switch a {
	case plan.Drain:
		return gpupoolv1.StepDrainRequired
	case plan.Suspend:
		return gpupoolv1.StepParkRequired
	case plan.PowerOff:
		return gpupoolv1.StepPowerOffRequired
	case plan.Reconfigure:
		return gpupoolv1.StepReconfigureRequired
	case plan.PowerOn:
		return gpupoolv1.StepPowerOnRequired
	case plan.WaitNodeReady:
		return gpupoolv1.StepWaitNodeReady
	case plan.Relabel:
		return gpupoolv1.StepRelabelRequired
	case plan.Uncordon:
		return gpupoolv1.StepUncordonRequired
	}
	return gpupoolv1.Step(a)
}

func (r *GPUPoolProfileReconciler) startTransition(s *scope, p *plan.Plan) {
	st := &s.pool.Status
	if t := st.Transition; t != nil && t.To == s.decision.Layout {
		st.Phase = gpupoolv1.PhaseTransitioning
		condTrue(s.pool, gpupoolv1.ConditionProgressing, ReasonTransitioning, fmt.Sprintf("transition %s to %s in progress", t.ID, t.To))
		return
	}
	if st.Transition == nil && st.ActiveLayout == s.decision.Layout {
		// The layout is the one running: a node went NotReady, lost a label or was
		// cordoned by gpupool. Repairing it is not a transition.
		condTrue(s.pool, gpupoolv1.ConditionProgressing, ReasonRepairing, fmt.Sprintf("repairing layout %s: %d step(s) due", st.ActiveLayout, len(p.Due(int(max(s.pool.Spec.MaxParallel, 1))))))
		return
	}
	if t := st.Transition; t != nil {
		transitionsTotal.WithLabelValues(s.pool.Name, "superseded").Inc()
		r.emit(s.pool, corev1.EventTypeNormal, "TransitionSuperseded", "transition %s to %s superseded: %s is wanted now", t.ID, t.To, s.decision.Layout)
	}
	st.Transition = &gpupoolv1.TransitionStatus{
		ID:         fmt.Sprintf("%s-%s", s.decision.Layout, s.now.UTC().Format("20060102-150405")),
		From:       st.ActiveLayout,
		To:         s.decision.Layout,
		StartTime:  metav1.NewTime(s.now),
		Generation: s.pool.Generation,
	}
	st.Phase = gpupoolv1.PhaseTransitioning
	msg := fmt.Sprintf("switching from %q to %q (%s): %s", st.ActiveLayout, s.decision.Layout, s.decision.Reason, s.decision.Message)
	condTrue(s.pool, gpupoolv1.ConditionProgressing, ReasonTransitioning, msg)
	condFalse(s.pool, gpupoolv1.ConditionReady, ReasonTransitioning, msg)
	r.emit(s.pool, corev1.EventTypeNormal, "TransitionStarted", "transition %s: %s; plan:\n%s", st.Transition.ID, msg, p.String())
}

func (r *GPUPoolProfileReconciler) completeTransition(s *scope) {
	st := &s.pool.Status
	if t := st.Transition; t != nil {
		transitionsTotal.WithLabelValues(s.pool.Name, "completed").Inc()
		transitionDuration.WithLabelValues(s.pool.Name).Observe(s.now.Sub(t.StartTime.Time).Seconds())
		r.emit(s.pool, corev1.EventTypeNormal, "TransitionCompleted", "transition %s: layout %s is active after %s", t.ID, t.To, s.now.Sub(t.StartTime.Time).Round(time.Second))
		st.Transition = nil
	}
	if st.ActiveLayout != s.decision.Layout && st.ActiveLayout == "" {
		r.emit(s.pool, corev1.EventTypeNormal, "LayoutActive", "layout %s is active", s.decision.Layout)
	}
	st.ActiveLayout = s.decision.Layout
	st.Phase = gpupoolv1.PhaseSteady
	for i := range st.Workers {
		st.Workers[i].Task = nil
	}
	msg := fmt.Sprintf("layout %s is active (%s)", s.decision.Layout, s.decision.Message)
	condTrue(s.pool, gpupoolv1.ConditionReady, ReasonLayoutActive, msg)
	condFalse(s.pool, gpupoolv1.ConditionProgressing, ReasonIdle, msg)
	if c := findCondition(s.pool, gpupoolv1.ConditionDegraded); c == nil || c.Status == metav1.ConditionTrue {
		condFalse(s.pool, gpupoolv1.ConditionDegraded, ReasonAsExpected, "no failures")
	}
	r.updateWorkerMetrics(s.pool)
}

func (r *GPUPoolProfileReconciler) updateWorkerMetrics(p *gpupoolv1.GPUPoolProfile) {
	workersByStep.DeletePartialMatch(prometheus.Labels{"pool": p.Name})
	for _, w := range p.Status.Workers {
		workersByStep.WithLabelValues(p.Name, string(w.Step)).Inc()
	}
}

func findCondition(p *gpupoolv1.GPUPoolProfile, typ string) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func problemsMessage(ps []plan.Problem) string {
	msgs := make([]string, 0, len(ps))
	for _, p := range ps {
		msgs = append(msgs, p.Message)
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "; ")
}

// finalize removes what gpupool added to nodes and Cluster API objects, then the
// finalizer. VMs are left as they are.
func (r *GPUPoolProfileReconciler) finalize(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, FinalizerName) {
		return ctrl.Result{}, nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.MatchingLabels{LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pool's nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if err := r.releaseMachine(ctx, n); err != nil {
			return ctrl.Result{}, err
		}
		before := n.DeepCopy()
		removeMeta(n)
		if err := r.Client.Patch(ctx, n, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("cleaning node %s: %w", n.Name, err)
		}
	}
	workersByStep.DeletePartialMatch(prometheus.Labels{"pool": pool.Name})
	r.releaseSession(pool)
	controllerutil.RemoveFinalizer(pool, FinalizerName)
	if err := r.Client.Update(ctx, pool); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller. Pools are reconciled on spec changes, on
// node changes that matter (readiness, cordon, labels) and on pod deletions (drains).
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&gpupoolv1.GPUPoolProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, allPools, builder.WithPredicates(nodeChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfPodNode), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Named("gpupoolprofile").
		Complete(r)
}

// poolsOfPodNode maps a deleted pod to the pools with a worker on its node: a drain
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

// nodeChanged ignores node heartbeats: only readiness, cordon, labels, taints and
// annotations matter to a pool.
func nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return nodeReady(o) != nodeReady(n) || o.Spec.Unschedulable != n.Spec.Unschedulable ||
				!equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
				!equality.Semantic.DeepEqual(o.Annotations, n.Annotations)
		},
	}
}
