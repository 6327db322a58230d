package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// observe reads the vSphere inventory, the nodes and the pods on the cordoned ones, and
// resolves once which VM and which node each worker of the spec is: the World (s.w),
// which nothing changes afterwards. It is the pass's read of the world before it acts
// (decidePhase reads it once more to confirm a shortfall); s.wanted must be set. A pass checks its tasks first (tasksPhase); a caller
// that only looks (the preview) may leave s.vc nil, and observe then logs in itself. It
// reports false, with when to look again, when the pool cannot go on now; the facts say
// why.
func (r *GPUPoolProfileReconciler) observe(ctx context.Context, s *scope) (time.Duration, bool) {
	pool := s.pool
	if s.vc == nil {
		vcc, retry, ok := r.connectVCenter(ctx, s)
		if !ok {
			return retry, false
		}
		s.vc = vcc
	}
	start := time.Now()
	inv, retry, ok := r.readPoolInventory(ctx, s)
	s.times.record("observe:vcenter", start)
	if !ok {
		return retry, false
	}
	start = time.Now()
	defer s.times.record("observe:cluster", start)
	w := world.Resolve(&pool.Spec, inv)
	w.TasksInFlight, w.TasksEnded = s.tasks.inFlight, s.tasks.ended
	if retry, ok := r.checkClaims(ctx, s, w); !ok {
		return retry, false
	}
	// Not copied: w.Nodes and w.AllNodes share their maps and slices with the cache, read
	// only; the one place a pass writes a node (patchNodeNow) makes it its own first. A
	// copy of every node each pass was 12.5 MB of the manager's live heap at 64 hosts
	// (docs/performance.md, "The runs of 2026-12-06 morning").
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		s.facts.vcenter = "listing nodes: " + err.Error()
		return requeueDrain, false
	}
	w.Match(&pool.Spec, nodes.Items)
	if plan.HasConversions(&pool.Spec) {
		w = r.resolveConversions(ctx, s, inv, w, nodes.Items)
	}
	r.observeNodes(ctx, s, w)
	s.w = *w
	s.facts.observed = true
	return 0, true
}

// readPoolInventory reads the pool's VMs and hosts from vCenter: the VMs its selections
// find first, then the inventory.
func (r *GPUPoolProfileReconciler) readPoolInventory(ctx context.Context, s *scope) (*inventory.Inventory, time.Duration, bool) {
	if plan.HasSelections(&s.pool.Spec) {
		// The selected VMs are pool VMs: found before the inventory read.
		if retry, ok := r.resolveSelections(ctx, s); !ok {
			return nil, retry, false
		}
	}
	return r.readInventory(ctx, s)
}

// observeNodes records what the planner needs of each pool node that only the cluster
// can tell: what it lacks to be ready for work for the wanted layout (w.Gaps), and, for
// a cordoned node, whether anything on it is still to evict (w.Drained). It is the one
// place a pass lists pods before it acts.
func (r *GPUPoolProfileReconciler) observeNodes(ctx context.Context, s *scope, w *world.World) {
	w.Gaps = make(map[string][]string, len(w.Nodes))
	w.Drained = map[string]bool{}
	published := r.publishedDevices(ctx, s.pool)
	var cordoned []string
	for vm, n := range w.Nodes {
		// Note: the plan's Ready is readiness for work (Ready and advertising the GPUs,
		// labels and conditions the spec names), so that the plan keeps the worker in
		// WaitNodeReady, within nodeReadyTimeout, until the node can take GPU pods.
		w.Gaps[vm] = nodes.ReadinessGaps(n, s.pool.Spec.Readiness, gpusWanted(w, s.pool, s.wanted, vm, n), published[n.Name])
		// Only a running VM's node is drained, and only its pods are watched (Running):
		// the plan asks nothing of a parked VM's node's pods.
		if w.Runs(vm) && n.Spec.Unschedulable {
			cordoned = append(cordoned, vm)
		}
	}
	pods, errs := r.podsOnNodes(ctx, w, cordoned)
	for i, vm := range cordoned {
		w.Drained[vm] = errs[i] == nil && !r.anyToEvict(pods[i], nodes.Ready(w.Nodes[vm]), s.now)
	}
}

// podReadsAtOnce bounds the pod lists observe sends the API server at once.
const podReadsAtOnce = 16

// podsOnNodes reads the pods of the nodes of vms (observe's cordoned nodes, a layout by
// count's running nodes), podReadsAtOnce at a time. Most come from the nodes' watches at
// once; a node whose watch has not listed yet (a VM powered on since the last pass: its
// node is watched from this pass on) is listed from the API server. One after the
// other, the hundreds of nodes a night -> day switch powers on in a pass took observe up
// to a minute at 64 hosts (docs/performance.md, "The runs of 2026-12-05 morning").
func (r *GPUPoolProfileReconciler) podsOnNodes(ctx context.Context, w *world.World, vms []string) ([][]corev1.Pod, []error) {
	pods, errs := make([][]corev1.Pod, len(vms)), make([]error, len(vms))
	execute.ForEach(len(vms), podReadsAtOnce, func(i int) {
		pods[i], errs[i] = r.podsOnNode(ctx, w.Nodes[vms[i]].Name)
	})
	return pods, errs
}

// nodeStates tells the planner what it needs of each node, from what observe found (w)
// and the workers' status (a wait for a node that ran out), with Labelled for layout l.
// It reads nothing: a pass derives it again after its own node writes.
func nodeStates(w *world.World, pool *gpupoolv1.GPUPoolProfile, now time.Time, l *gpupoolv1.Layout) map[string]plan.NodeState {
	out := make(map[string]plan.NodeState, len(w.Nodes))
	for vm, n := range w.Nodes {
		ns := plan.NodeState{Name: n.Name, Exists: true, Ready: readyForWork(w, vm), Cordoned: nodes.CordonedByUs(n)}
		if n.Spec.Unschedulable {
			ns.Drained = w.Drained[vm]
		}
		out[vm] = ns
	}
	for name, id := range w.SpecID {
		if ws := execute.FindWorker(pool, id); ws != nil && waitExpired(pool, now, ws) {
			ns := out[name]
			ns.WaitExpired = true
			out[name] = ns
		}
	}
	return labelledFor(w, pool.Name, l, out)
}

// labelledFor returns the node states with Labelled set for layout l; the rest of a
// node's state does not depend on the layout.
func labelledFor(w *world.World, pool string, l *gpupoolv1.Layout, states map[string]plan.NodeState) map[string]plan.NodeState {
	out := make(map[string]plan.NodeState, len(states))
	for vm, ns := range states {
		ns.Labelled = false
		if m, ok := w.MetaFor(pool, l, vm); ok && w.Nodes[vm] != nil {
			ns.Labelled = nodes.HasMeta(w.Nodes[vm], m)
		}
		out[vm] = ns
	}
	return out
}
