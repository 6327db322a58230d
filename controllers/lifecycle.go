package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
)

// releaseRemoved gives back the nodes of VMs that were removed from the spec
// (execute.ReleaseRemoved).
func (r *GPUPoolProfileReconciler) releaseRemoved(ctx context.Context, s *scope) {
	get := func(ctx context.Context, name string) (*corev1.Node, error) {
		var n corev1.Node
		return &n, r.Client.Get(ctx, client.ObjectKey{Name: name}, &n)
	}
	errs := r.executor(s).ReleaseRemoved(ctx, s.pool, get)
	s.facts.stepErrors = append(s.facts.stepErrors, errs...)
}

// releaseNode removes what gpupool put on a node and on its Cluster API objects.
func (r *GPUPoolProfileReconciler) releaseNode(ctx context.Context, n *corev1.Node) error {
	return execute.ReleaseNode(ctx, nodeWriter{r}, n)
}

// reconcileDelete is a pass over a pool being deleted. A node can only be given back
// according to what its VM is, and a task in flight changes that: a VM being powered on
// will run, its node must be uncordoned and unmarked; a VM being parked will not. So the
// pass first settles the pool's tasks in flight (records those that ended), and waits,
// requeued and woken by the task watch, while any has not ended, each at most
// deletionTaskWait; the wait shows in status (Ready=False, reason Deleting) and in an
// event. Then the pool's Kueue admission checks are released (releaseDeletedKueue), and
// finalize releases the nodes by their VMs' observed power states and removes the
// finalizer.
func (r *GPUPoolProfileReconciler) reconcileDelete(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, FinalizerName) {
		r.tasks.watch(pool.Name, nil, nil)
		return ctrl.Result{}, nil
	}
	r.evictions.Cancel(pool.Name)
	r.starts.Cancel(pool.Name)
	r.ready.forget(pool.Name)
	// No state label lands after the marks come off; finalize reads the nodes the last
	// batch wrote from the API server, as the cache may not show the batch yet.
	_, landed := r.states.wait(pool.Name)
	s := &scope{pool: pool, persisted: pool.DeepCopy(), now: r.Clock.Now()}
	vcc, _, connected := r.connectVCenter(ctx, s)
	after := time.Duration(0)
	if connected {
		s.vc = vcc
		after = r.checkTasks(ctx, s, false)
		r.flushVMEvents(s) // on the pool: a pool being deleted matches no nodes
	}
	waiting, late := tasksToWaitFor(pool, s.now)
	if len(waiting) > 0 {
		why := "vCenter reports them running"
		if !connected {
			why = "vCenter cannot be reached: " + cmp.Or(s.facts.vcenter, s.facts.credentials, "see the events")
		}
		msg := cut(fmt.Sprintf("the pool is being deleted; waiting for %d vSphere task(s) it started to end before its nodes are released (%s; %s), at most %s each",
			len(waiting), firstFew(waiting, ", "), why, deletionTaskWait))
		if c := findCondition(pool, gpupoolv1.ConditionReady); c == nil || c.Reason != ReasonDeleting || c.Message != msg {
			r.emit(pool, corev1.EventTypeNormal, "DeletionWaitsForTasks", "%s", msg)
		}
		s.facts.deleting = msg
		summarize(s)
		err := r.Client.Status().Patch(ctx, pool, poolStatusPatch(s.persisted, false))
		r.wrote(pool, err)
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("patching status: %w", err)
		}
		r.tasks.watch(pool.Name, s.vc, inFlight(pool))
		return ctrl.Result{RequeueAfter: min(cmp.Or(after, requeueTask), deletionTaskWait)}, nil
	}
	if len(late) > 0 {
		r.emit(pool, corev1.EventTypeWarning, "DeletionTasksUnsettled", "the pool is being deleted; %d vSphere task(s) did not end within %s and are no longer waited for: %s; their nodes are released by the VMs' power states as last observed",
			len(late), deletionTaskWait, firstFew(late, ", "))
	}
	var inv *inventory.Inventory
	if connected {
		// Read after the last task ended: a VM whose suspend just ended reads as parked,
		// one whose power-on just ended as running. A failed read leaves inv nil: the
		// power states are unknown, and nodes are released by their parked label.
		inv, _, _ = r.readInventory(ctx, s)
	}
	r.tasks.watch(pool.Name, nil, nil)
	// The Workloads the pool's check holds are released before the finalizer goes:
	// afterwards nothing answers them.
	if again := r.releaseDeletedKueue(ctx, pool, s.now); again > 0 {
		err := r.Client.Status().Patch(ctx, pool, poolStatusPatch(s.persisted, false))
		r.wrote(pool, err)
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("patching status: %w", err)
		}
		return ctrl.Result{RequeueAfter: again}, nil
	}
	return r.finalize(ctx, pool, inv, landed)
}

// tasksToWaitFor names the workers' tasks in flight that a deletion still waits for
// (started less than deletionTaskWait ago on gpupool's clock) and those it no longer
// does.
func tasksToWaitFor(pool *gpupoolv1.GPUPoolProfile, now time.Time) (waiting, late []string) {
	for _, w := range pool.Status.Workers {
		if w.Task == nil {
			continue
		}
		if now.Sub(w.Task.StartTime.Time) < deletionTaskWait {
			waiting = append(waiting, taskName(w))
		} else {
			late = append(late, taskName(w))
		}
	}
	return waiting, late
}

// taskName names a worker's task in flight in messages: "PowerOn of VM gpu-day-1".
func taskName(w gpupoolv1.WorkerStatus) string {
	return fmt.Sprintf("%s of VM %s", w.Task.Operation, w.VM)
}

// parkedForGood tells whether a deleted pool leaves node n parked: when its VM's power
// state is known (inv), whether the VM is not running; otherwise by the parked label.
func parkedForGood(n *corev1.Node, pool *gpupoolv1.GPUPoolProfile, inv *inventory.Inventory) bool {
	if inv != nil {
		for _, w := range pool.Status.Workers {
			if w.Node != n.Name {
				continue
			}
			if vm, ok := inv.FindVM(w.VM); ok {
				return vm.PowerState != inventory.PoweredOn
			}
		}
	}
	return n.Labels[LabelParked] == "true"
}

// finalize removes what gpupool added to the nodes of running VMs (by the power states
// in inv when vCenter could be read, else by the parked label), then the finalizer.
// VMs are left as they are. Nodes of parked VMs keep the parked label and taint, their
// cordon and their Cluster API protection: lifting skip-remediation from a NotReady node
// would let a MachineHealthCheck delete the parked VM. Every node whose marks are the
// pool's (nodes.MarksOwnedBy: the nodes it marked, labelled, or that its status names
// as workers' nodes, parked or not, relabelled or not) loses the state label and the
// draining-soon warning. The nodes the pool's last state batch wrote (fresh) are read
// from the API server: the cache may not show the marks the batch just put on them.
func (r *GPUPoolProfileReconciler) finalize(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, inv *inventory.Inventory, fresh map[string]landedState) (ctrl.Result, error) {
	var list corev1.NodeList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pool's nodes: %w", err)
	}
	workerNodes := statusNodes(pool)
	for i := range list.Items {
		n := &list.Items[i]
		if _, ok := fresh[n.Name]; ok {
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(n), n); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("reading node %s: %w", n.Name, err)
			}
		}
		var err error
		switch {
		case n.Labels[LabelPool] == pool.Name && !parkedForGood(n, pool, inv):
			err = r.releaseNode(ctx, n)
		case nodes.MarksOwnedBy(n, pool.Name, workerNodes) && nodes.HasMarks(n):
			err = r.patchNode(ctx, n, nodes.StripMarks)
		}
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("cleaning node %s: %w", n.Name, err)
		}
	}
	workersByStep.DeletePartialMatch(prometheus.Labels{"pool": pool.Name})
	r.nodePods.track(pool.Name, nil)
	forgetDemandMetrics(pool.Name)
	demandRechecks.DeletePartialMatch(prometheus.Labels{"pool": pool.Name})
	forgetKueueMetrics(pool.Name)
	r.releaseSession(pool)
	if err := r.deleteRequests(ctx, pool.Name); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(pool, FinalizerName)
	err := r.Client.Update(ctx, pool)
	r.wrote(pool, err)
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// followPausedTasks records the end of the vSphere tasks a paused pool started before the
// pause: a pause starts nothing and touches no node (a suspend's node write under way
// when it came is ended, and its suspend not asked: execute.Starts.Cancel), but its
// status must not claim a task runs that has ended (or hide one that failed). It returns when to look again (0:
// nothing is in flight).
func (r *GPUPoolProfileReconciler) followPausedTasks(ctx context.Context, s *scope) time.Duration {
	if !slices.ContainsFunc(s.pool.Status.Workers, func(w gpupoolv1.WorkerStatus) bool { return w.Task != nil }) {
		return 0
	}
	after := requeueTask
	if vcc, _, ok := r.connectVCenter(ctx, s); ok {
		s.vc = vcc
		after = r.checkTasks(ctx, s, false)
	}
	for _, w := range s.pool.Status.Workers {
		if w.Task != nil {
			s.facts.pausedTasks = append(s.facts.pausedTasks, taskName(w))
		}
	}
	return after
}
