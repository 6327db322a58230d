package controllers

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// statusNodes are the nodes the pool's status names as its workers' nodes.
func statusNodes(pool *gpupoolv1.GPUPoolProfile) map[string]bool {
	out := map[string]bool{}
	for _, w := range pool.Status.Workers {
		if w.Node != "" {
			out[w.Node] = true
		}
	}
	return out
}

// markedNodes lists the nodes whose marks are the pool's (nodes.MarksOwnedBy), from the
// cache, not copied: read only, but through patchNode (which makes a node its own).
func (r *GPUPoolProfileReconciler) markedNodes(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, workerNodes map[string]bool) ([]*corev1.Node, error) {
	var list corev1.NodeList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return nodes.MarkedBy(list.Items, pool.Name, workerNodes), nil
}

// unmarkStale takes the pool's marks off the nodes it no longer matches to a worker: a
// node whose VM left the spec, or that is no longer the VM's node. A node whose VM
// cannot be told (s.w.Unsure) keeps them: it may still be a worker's, and its VM is
// held until a person says. It reads the nodes observe listed this pass.
func (r *GPUPoolProfileReconciler) unmarkStale(ctx context.Context, s *scope) {
	current := maps.Clone(s.w.Unsure)
	if current == nil {
		current = map[string]bool{}
	}
	for _, n := range s.w.Nodes {
		current[n.Name] = true
	}
	for _, n := range nodes.MarkedBy(s.w.AllNodes, s.pool.Name, statusNodes(s.pool)) {
		if current[n.Name] || !nodes.HasMarks(n) {
			continue
		}
		if err := r.patchNode(ctx, n, nodes.StripMarks); err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
}

// warningDue tells whether a draining-soon warning announcing a drain at `at` still
// stands when gpupool cannot see vSphere: a switch is under way or due now (its drains
// go on once vCenter answers), or it announces the next scheduled switch and that
// switch's warning window is open. Otherwise no drain will happen at that time.
func warningDue(now time.Time, next *plan.Boundary, horizon time.Duration, switchDue bool, at time.Time) bool {
	if switchDue {
		return true
	}
	return next != nil && horizon > 0 && at.Equal(next.At) && !now.Before(next.At.Add(-horizon)) && now.Before(next.At)
}

// withdrawWarnings takes the draining-soon warning off the pool's nodes whose drain
// will not happen (keep says which stand), with node patches only: it runs on passes
// that do not reach vSphere (paused, invalid spec, vCenter unreachable), after the last
// pass's batch (waitStates), whose warnings may not be in the cache yet (s.landed).
func (r *GPUPoolProfileReconciler) withdrawWarnings(ctx context.Context, s *scope, keep func(at time.Time) bool) {
	marked, err := r.markedNodes(ctx, s.pool, statusNodes(s.pool))
	if err != nil {
		s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		return
	}
	for _, n := range marked {
		warned, at, ok := carriedWarning(n, s.landed)
		if !warned || (ok && keep(at)) {
			continue
		}
		if err := r.patchNode(ctx, n, func(n *corev1.Node) { nodes.SetWarning(n, time.Time{}, false) }); err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
}

// carriedWarning tells whether node n carries any part of a draining-soon warning, and
// the drain start it announces (ok: one that can be read): as read, or as the pool's
// last batch wrote it when it wrote the node after that read (landed).
func carriedWarning(n *corev1.Node, landed map[string]landedState) (warned bool, at time.Time, ok bool) {
	w := warningOf(n, landed)
	at, ok = nodes.DrainAt(w)
	return nodes.HasAnyWarning(w), at, ok
}

// switchDue tells whether a switch is under way or due now.
func switchDue(s *scope) bool {
	st := &s.pool.Status
	if t := st.Transition; t != nil {
		return t.AbortedTime == nil || !sameTarget(t.To, t.Count, s.decision) || t.Generation != s.pool.Generation
	}
	return s.decision.Layout != "" && !sameTarget(st.ActiveLayout, st.ActiveCount, s.decision)
}
