package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// podNodeNameField is the field the drain package lists a node's pods by (a field
// selector the API server serves; not indexed in the manager's cache, which holds no
// bound pod).
const podNodeNameField = drain.PodNodeNameField

// ReasonDrainHoldOverridden is the Warning event on the pool when drain.maxHold has
// passed on a node and the pods that held its drain are evicted.
const ReasonDrainHoldOverridden = "DrainHoldOverridden"

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

// maxConcurrentDrains bounds how many nodes are cordoned and evicted at the same time
// in one pass: enough that a pass over hundreds of nodes takes about as long as its
// slowest eviction, few enough not to flood the API server.
const maxConcurrentDrains = 16

// cordonNode cordons a node for the pool and marks it with the pool label (which lets
// deletion find every node gpupool touched). It is a no-op for a node already so.
func (r *GPUPoolProfileReconciler) cordonNode(ctx context.Context, s *scope, node *corev1.Node) error {
	if node.Spec.Unschedulable && node.Labels[LabelPool] == s.pool.Name {
		return nil
	}
	if !s.budget.nodeWrite() {
		return errCapped
	}
	err := r.patchNode(ctx, node, func(n *corev1.Node) {
		nodes.Cordon(n)
		nodes.SetManagedLabel(n, LabelPool, s.pool.Name)
	})
	s.budget.nodeWritten(err)
	if err != nil {
		return err
	}
	r.nodeEvent(s, node, corev1.EventTypeNormal, "Cordoned", "cordoned node %s to drain it", node.Name)
	return nil
}

// cordonAhead cordons, before anything is evicted, every node the plan will drain, on
// every host: an evicted pod is then rescheduled onto a node that stays, and evicted
// once, rather than onto a node whose drain comes later. It reports whether every one
// is cordoned; when the pass's budget ran out first, the rest are cordoned in the next
// pass and nothing is evicted before.
func (r *GPUPoolProfileReconciler) cordonAhead(ctx context.Context, s *scope, p *plan.Plan) bool {
	var toCordon []*corev1.Node
	for _, hp := range p.Hosts {
		for _, st := range hp.Steps {
			if n := s.w.Nodes[st.VM]; st.Action == plan.Drain && n != nil && (!n.Spec.Unschedulable || n.Labels[LabelPool] != s.pool.Name) {
				toCordon = append(toCordon, n)
			}
		}
	}
	errs := make([]error, len(toCordon))
	forEach(len(toCordon), maxConcurrentDrains, func(i int) { errs[i] = r.cordonNode(ctx, s, toCordon[i]) })
	all := true
	for _, err := range errs {
		switch {
		case errors.Is(err, errCapped):
			all = false
		case err != nil:
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
	return all
}

// drainOutcome is what the eviction phase of one drain found.
type drainOutcome struct {
	res drain.Result
	err error
}

// evictAll runs the cordon and eviction phase of the due drains concurrently (bounded):
// it reads the scope and patches nodes and pods, but changes nothing in the scope, so
// that settleDrain can then record the outcomes one by one.
func (r *GPUPoolProfileReconciler) evictAll(ctx context.Context, s *scope, steps []plan.Step) []drainOutcome {
	out := make([]drainOutcome, len(steps))
	// When each node's drain started (act stamps it before), read here because
	// s.worker may add to the status, which the goroutines below must not.
	started := make([]time.Time, len(steps))
	for i, st := range steps {
		if ws := s.worker(st.VM); ws.StepStartTime != nil {
			started[i] = ws.StepStartTime.Time
		}
	}
	forEach(len(steps), maxConcurrentDrains, func(i int) {
		node := s.w.Nodes[steps[i].VM]
		if node == nil {
			return
		}
		if err := r.cordonNode(ctx, s, node); err != nil {
			out[i].err = err
			return
		}
		out[i].res, out[i].err = r.drainer().Drain(ctx, node, s.pool.Spec.Drain, started[i], s.now, s.budget)
		podEvictions.WithLabelValues(s.pool.Name).Add(float64(out[i].res.Evicted))
	})
	return out
}

// forEach calls f for 0..n-1 on at most limit goroutines and waits for all of them.
func forEach(n, limit int, f func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// settleDrain records what a drain's eviction phase found and decides: done, wait, or
// at drain.timeout abort the transition or delete what is left, as the spec says.
func (r *GPUPoolProfileReconciler) settleDrain(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, node *corev1.Node, o drainOutcome) (time.Duration, error) {
	if node == nil {
		return requeueStep, nil
	}
	if o.err != nil {
		return 0, o.err
	}
	d, res := s.pool.Spec.Drain, o.res
	ws.Message = "draining node " + node.Name + ": " + res.Message()
	if n, byNS := res.OverriddenCount(); n > 0 {
		r.record(s.pool, node, corev1.EventTypeWarning, ReasonDrainHoldOverridden, distinctAction(ReasonDrainHoldOverridden, node.Name), transitionTag(s)+fmt.Sprintf(
			"drain of node %s held past spec.drain.maxHold (%s): requested eviction of %d held pod(s) (%s)", node.Name, d.MaxHold.Duration, n, byNS))
	}
	if res.Done {
		return requeueStep, nil // the Drained event comes when the plan moves on (recordWorkers)
	}
	timeout := drainTimeout(d)
	elapsed := s.now.Sub(ws.StepStartTime.Time)
	if elapsed < timeout {
		if len(res.Blocked)+len(res.Holding) > 0 {
			s.facts.drainBlocked = append(s.facts.drainBlocked, fmt.Sprintf("node %s: %s (%s)", node.Name, res.Message(), drainDeadlines(d, elapsed, timeout)))
		}
		wait := timeout - elapsed
		if d.MaxHold != nil && elapsed < d.MaxHold.Duration {
			wait = d.MaxHold.Duration - elapsed // the held pods are evicted then
		}
		return min(requeueDrain, wait), nil
	}
	if d.OnTimeout == gpupoolv1.DrainForce {
		n, err := r.drainer().ForceDelete(ctx, node.Name, d)
		if err != nil {
			return 0, err
		}
		s.facts.drainBlocked = append(s.facts.drainBlocked, fmt.Sprintf("node %s: drain timed out after %s; deleting what is left (%s)", node.Name, timeout, res.Message()))
		if n > 0 {
			r.nodeEvent(s, node, corev1.EventTypeWarning, "DrainForced", "drain of node %s timed out after %s; deleted %d pod(s) (%s)", node.Name, timeout, n, res.Message())
		}
		return requeueDrain, nil
	}
	r.abort(ctx, s, fmt.Sprintf("drain of node %s timed out after %s: %s", node.Name, timeout, res.Message()))
	return 0, nil
}

// drainTimeout is spec.drain.timeout, 10 minutes when unset (as the CRD defaults it).
func drainTimeout(d gpupoolv1.DrainSpec) time.Duration {
	if d.Timeout != nil {
		return d.Timeout.Duration
	}
	return 10 * time.Minute
}

// drainDeadlines says what ends the wait of a drain that has run for elapsed: the
// timeout and, before it, drain.maxHold, after which the held pods are evicted.
func drainDeadlines(d gpupoolv1.DrainSpec, elapsed, timeout time.Duration) string {
	in := func(at time.Duration) string { return (at - elapsed).Round(time.Second).String() }
	if d.MaxHold != nil && elapsed < d.MaxHold.Duration {
		return "held pods evicted at drain.maxHold in " + in(d.MaxHold.Duration) + ", timeout in " + in(timeout)
	}
	return "timeout in " + in(timeout)
}

// uncordonRunning uncordons the nodes gpupool cordoned whose VMs run and have no task in
// flight: what an aborted transition gives back. It is repeated on every pass of an
// aborted transition, so a node patch that failed once is retried.
func (r *GPUPoolProfileReconciler) uncordonRunning(ctx context.Context, s *scope) {
	for vm, n := range s.w.Nodes {
		v, ok := s.w.VM(vm)
		if !ok || v.PowerState != inventory.PoweredOn || !nodes.CordonedByUs(n) {
			continue
		}
		if ws := s.worker(vm); ws.Task != nil || !s.budget.nodeWrite() {
			continue
		}
		err := r.patchNode(ctx, n, nodes.Uncordon)
		s.budget.nodeWritten(err)
		if err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
}
