package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
)

// podNodeNameField is the field the drain package lists a node's pods by (a field
// selector the API server serves; not indexed in the manager's cache, which holds no
// bound pod).
const podNodeNameField = drain.PodNodeNameField

// ReasonDrainHoldOverridden is the Warning event on the pool when drain.maxHold has
// passed on a node and the pods that held its drain are evicted.
const ReasonDrainHoldOverridden = execute.ReasonDrainHoldOverridden

// drainer is the drain of this reconciler's cluster, with the terminating-pod clock the
// reconciler keeps from one pass to the next.
func (r *GPUPoolProfileReconciler) drainer() *drain.Helper {
	c := drain.FromClient(r.Client)
	if r.nodePods != nil {
		// The manager's cache holds no bound pod: a node's pods come from its watch.
		c = nodePodsCluster{Cluster: c, np: r.nodePods, reader: r.APIReader}
	}
	return &drain.Helper{Cluster: c, Terminating: &r.terminating}
}

// podsOnNode lists the pods bound to a node.
func (r *GPUPoolProfileReconciler) podsOnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	return r.drainer().Cluster.PodsOnNode(ctx, node)
}

// anyToEvict tells whether a drain would still evict or wait for a pod.
func (r *GPUPoolProfileReconciler) anyToEvict(pods []corev1.Pod, nodeReady bool, now time.Time) bool {
	return r.drainer().AnyToEvict(pods, nodeReady, now)
}

// uncordonRunning uncordons the nodes gpupool cordoned whose VMs run and have no task in
// flight: what an aborted transition gives back. A node marked parked with its cordon
// (nothing on it to drain: execute's parkedWithCordon) whose VM still runs gets back
// the marks of its worker in the active layout in the same patch, so that it serves that
// layout again rather than stay tainted parked. It is repeated on every pass of an
// aborted transition, so a node patch that failed once is retried.
func (r *GPUPoolProfileReconciler) uncordonRunning(ctx context.Context, s *scope) {
	active := s.pool.Spec.LayoutNamed(s.pool.Status.ActiveLayout)
	for vm, n := range s.w.Nodes {
		v, ok := s.w.VM(vm)
		if !ok || v.PowerState != inventory.PoweredOn {
			continue
		}
		ws := execute.FindWorker(s.pool, s.w.ID(vm)) // nil: no step, no task
		m, restore := s.w.MetaFor(s.pool.Name, active, vm)
		// A guest asked to shut down (a power-off's node is marked parked before) keeps
		// its marks: its VM is going down.
		restore = restore && (ws == nil || ws.GuestShutdownTime == nil) && nodes.HasMeta(n, nodes.ParkedMeta(s.pool.Name))
		if !nodes.CordonedByUs(n) && !restore {
			continue
		}
		if (ws != nil && ws.Task != nil) || !s.budget.NodeWrite() {
			continue
		}
		err := r.patchNode(ctx, n, func(n *corev1.Node) {
			if restore {
				nodes.ApplyMeta(n, m)
			}
			nodes.Uncordon(n)
		})
		s.budget.NodeWritten(err)
		if err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
}
