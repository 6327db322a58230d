package execute

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// ReasonDrainHoldOverridden is the Warning event on the pool when drain.maxHold has
// passed on a node and the pods that held its drain are evicted.
const ReasonDrainHoldOverridden = "DrainHoldOverridden"

// cordonNode cordons the node of vm for the pool and marks it with the pool label (which
// lets deletion find every node gpupool touched) and the pass's marks; with parked, the
// same patch also carries the parked marks (parkedWithCordon). It is a no-op for a node
// already so.
func (r *run) cordonNode(ctx context.Context, vm string, node *corev1.Node, parked bool) error {
	if node.Spec.Unschedulable && node.Labels[gpupoolv1.LabelPool] == r.Pool.Name {
		return nil
	}
	if !r.Budget.Cordon() {
		return ErrCapped
	}
	err := r.Nodes.Patch(ctx, node, r.withMarks(vm, false, func(n *corev1.Node) {
		nodes.Cordon(n)
		nodes.SetManagedLabel(n, gpupoolv1.LabelPool, r.Pool.Name)
		if parked {
			nodes.ApplyMeta(n, nodes.ParkedMeta(r.Pool.Name))
		}
	}))
	r.Budget.CordonWritten(err)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("cordoned node %s to drain it", node.Name)
	if parked {
		msg = fmt.Sprintf("cordoned node %s and marked it parked: nothing on it to drain, its VM is suspended next", node.Name)
	}
	r.Events.Node(node, corev1.EventTypeNormal, "Cordoned", msg)
	return nil
}

// cordonAhead cordons, before anything is evicted, every node the plan will drain, on
// every host: an evicted pod is then rescheduled onto a node that stays, and evicted
// once, rather than onto a node whose drain comes later. It reports whether every one
// is cordoned; when the pass's budget ran out first (Budget.Cordon), the rest are
// cordoned in the next pass and nothing is evicted before. due are the pass's due
// drains (parkedWithCordon).
func (r *run) cordonAhead(ctx context.Context, due []plan.Step) bool {
	var toCordon []string // VMs
	for _, hp := range r.Plan.Hosts {
		for _, st := range hp.Steps {
			if n := r.World.Nodes[st.VM]; st.Action == plan.Drain && n != nil && (!n.Spec.Unschedulable || n.Labels[gpupoolv1.LabelPool] != r.Pool.Name) {
				toCordon = append(toCordon, st.VM)
			}
		}
	}
	parked := r.parkedWithCordon(due)
	errs := make([]error, len(toCordon))
	ForEach(len(toCordon), MaxConcurrentWrites, func(i int) {
		errs[i] = r.cordonNode(ctx, toCordon[i], r.World.Nodes[toCordon[i]], parked[toCordon[i]])
	})
	all := true
	for _, err := range errs {
		switch {
		case errors.Is(err, ErrCapped):
			all = false
		case err != nil:
			r.out.StepErrors = append(r.out.StepErrors, err.Error())
		}
	}
	return all
}

// parkedWithCordon are the VMs whose node's cordon also carries the parked marks: their
// drain is due in this pass (their host's turn has come), the plan suspends them after
// it, and their node's watched pods show nothing a drain would evict (Drains; not when
// it cannot tell). Such a node is drained by its cordon, and its VM is suspended as soon
// as its host's drains end: marking it parked then, as the suspend's own node write
// (markLater), was a second write of the node on the park's critical path (issue 37:
// night -> day at 64 hosts wrote ~190 empty night nodes' marks 16 at a time in the
// switch's burst of writes, and each suspend waited for its node's).
//
// The marks take the node's layout labels off while its VM still runs, so only where
// they can be given back: a suspend that does not come after all (the switch aborted,
// cancelled, edited) leaves the node to the plan's relabel or, after an abort, to
// controllers' uncordonRunning, which gives it its worker's marks of the active layout.
// Hence only between layouts that are not layouts by count (whose workers depend on the
// count a pass decides) and for VMs that are workers of the active layout. A power-off
// (parking: PowerOff, a profile change) is left out: it waits for a pass and for the
// guest, and a reconfigured VM comes back.
func (r *run) parkedWithCordon(due []plan.Step) map[string]bool {
	if r.Drains == nil || len(due) == 0 || r.Layout == nil || r.Layout.Convert != nil {
		return nil
	}
	active := r.Pool.Spec.LayoutNamed(r.Pool.Status.ActiveLayout)
	if active == nil || active.Convert != nil {
		return nil
	}
	suspends := map[string]bool{}
	for _, hp := range r.Plan.Hosts {
		for _, st := range hp.Steps {
			if st.Action == plan.Suspend {
				suspends[st.VM] = true
			}
		}
	}
	out := map[string]bool{}
	for _, st := range due {
		n := r.World.Nodes[st.VM]
		if n == nil || !suspends[st.VM] {
			continue
		}
		if _, ok := r.World.MetaFor(r.Pool.Name, active, st.VM); !ok {
			continue
		}
		if drained, known := r.Drains.Drained(n.Name); drained && known {
			out[st.VM] = true
		}
	}
	return out
}

// drainOutcome is what the eviction phase of one drain found.
type drainOutcome struct {
	res drain.Result
	err error
}

// evictAll runs the cordon and eviction phase of the due drains concurrently (bounded):
// it reads the run's input and patches nodes and pods, but changes nothing in the run, so
// that settleDrain can then record the outcomes one by one.
func (r *run) evictAll(ctx context.Context, steps []plan.Step) []drainOutcome {
	out := make([]drainOutcome, len(steps))
	// When each node's drain started (act stamps it before), read here because
	// s.worker may add to the status, which the goroutines below must not.
	started := make([]time.Time, len(steps))
	for i, st := range steps {
		if ws := r.worker(st.VM); ws.StepStartTime != nil {
			started[i] = ws.StepStartTime.Time
		}
	}
	ForEach(len(steps), MaxConcurrentWrites, func(i int) {
		node := r.World.Nodes[steps[i].VM]
		if node == nil {
			return
		}
		if err := r.cordonNode(ctx, steps[i].VM, node, false); err != nil {
			out[i].err = err
			return
		}
		out[i].res, out[i].err = r.Drainer.Drain(ctx, node, r.Pool.Spec.Drain, started[i], r.Now, r.Budget)
		PodEvictions.WithLabelValues(r.Pool.Name).Add(float64(out[i].res.Evicted))
	})
	return out
}

// ForEach calls f for 0..n-1 on at most limit goroutines and waits for all of them: the
// one fan-out of a pass (client-go's workqueue.ParallelizeUntil).
func ForEach(n, limit int, f func(int)) {
	workqueue.ParallelizeUntil(context.Background(), limit, n, f)
}

// settleDrain records what a drain's eviction phase found and decides: done, wait, or
// at drain.timeout ask for the abort of the transition (Outcome.Abort) or delete what is left, as the spec says.
func (r *run) settleDrain(ctx context.Context, ws *gpupoolv1.WorkerStatus, node *corev1.Node, o drainOutcome) (time.Duration, error) {
	if node == nil {
		return RequeueStep, nil
	}
	if o.err != nil {
		return 0, o.err
	}
	d, res := r.Pool.Spec.Drain, o.res
	ws.Message = "draining node " + node.Name + ": " + res.Message()
	if n, byNS := res.OverriddenCount(); n > 0 {
		r.Events.Pool(node, corev1.EventTypeWarning, ReasonDrainHoldOverridden, fmt.Sprintf(
			"drain of node %s held past spec.drain.maxHold (%s): requested eviction of %d held pod(s) (%s)", node.Name, d.MaxHold.Duration, n, byNS))
	}
	if res.Done {
		return RequeueStep, nil // the Drained event comes when the plan moves on (Record)
	}
	timeout := drainTimeout(d)
	elapsed := r.Now.Sub(ws.StepStartTime.Time)
	if elapsed < timeout {
		if len(res.Blocked)+len(res.Holding) > 0 {
			r.out.DrainBlocked = append(r.out.DrainBlocked, fmt.Sprintf("node %s: %s (%s)", node.Name, res.Message(), drainDeadlines(d, ws.StepStartTime.Time, elapsed, timeout)))
		}
		wait := timeout - elapsed
		if d.MaxHold != nil && elapsed < d.MaxHold.Duration {
			wait = d.MaxHold.Duration - elapsed // the held pods are evicted then
		}
		return min(RequeueDrain, wait), nil
	}
	if d.OnTimeout == gpupoolv1.DrainForce {
		n, err := r.Drainer.ForceDelete(ctx, node.Name, d)
		if err != nil {
			return 0, err
		}
		r.out.DrainBlocked = append(r.out.DrainBlocked, fmt.Sprintf("node %s: drain timed out after %s; deleting what is left (%s)", node.Name, timeout, res.Message()))
		if n > 0 {
			r.Events.Node(node, corev1.EventTypeWarning, "DrainForced", fmt.Sprintf("drain of node %s timed out after %s; deleted %d pod(s) (%s)", node.Name, timeout, n, res.Message()))
		}
		return RequeueDrain, nil
	}
	r.out.Abort = fmt.Sprintf("drain of node %s timed out after %s: %s", node.Name, timeout, res.Message())
	return 0, nil
}

// drainTimeout is spec.drain.timeout, 10 minutes when unset (as the CRD defaults it).
func drainTimeout(d gpupoolv1.DrainSpec) time.Duration {
	if d.Timeout != nil {
		return d.Timeout.Duration
	}
	return 10 * time.Minute
}

// drainDeadlines says what ends the wait of a drain started at started that has run for
// elapsed: the timeout and, before it, drain.maxHold, after which the held pods are
// evicted. It names them as instants (deadline), not as time left, so that the
// Progressing condition it goes into stays the same from pass to pass while the drain
// waits: a countdown changed the pool's status, and had it written whole, on every pass.
func drainDeadlines(d gpupoolv1.DrainSpec, started time.Time, elapsed, timeout time.Duration) string {
	if d.MaxHold != nil && elapsed < d.MaxHold.Duration {
		return "held pods evicted at drain.maxHold, " + deadline(started, d.MaxHold.Duration) + "; timeout at " + deadline(started, timeout)
	}
	return "timeout at " + deadline(started, timeout)
}

// deadline is how a worker's message or a condition names the end of a wait that began
// at start and lasts d: RFC 3339 in UTC, to the second. start is taken to the second, as
// the status stores it, so that the pass that began the wait and the passes that read
// it back name the same instant. A message that waits names when the wait ends, never
// how long it has lasted or is left, so that it changes only when the wait does.
func deadline(start time.Time, d time.Duration) string {
	return start.UTC().Truncate(time.Second).Add(d).Format(time.RFC3339)
}
