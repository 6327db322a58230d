package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
)

// phase is one part of a pass ("step" is a worker's, plan.Step). Phases read and write the scope in order; what one
// establishes (the decision, the observed world, the plan) is in the scope for the next.
type phase struct {
	name string
	run  func(context.Context, *scope) (outcome, error)
}

// phases are the pass in order, as Cluster API's doReconcile lists its phases. Each may
// end the pass; their requeues merge to the soonest (execute.Soonest).
func (r *GPUPoolProfileReconciler) phases() []phase {
	return []phase{
		{"requests", r.requestsPhase},        // the pool's GPUPoolRequests: in force, ended, deleted
		{"desire", r.desirePhase},            // the wanted layout, and when that changes next
		{"paused", r.pausedPhase},            // a paused pool follows its tasks and stops
		{"connect", r.connectPhase},          // the credentials and the vCenter session
		{"tasks", r.tasksPhase},              // the vSphere tasks that ended
		{"observe", r.observePhase},          // vSphere, the nodes and their pods; removed nodes
		{"keep-aborted", r.keepAbortedPhase}, // an aborted switch waits for a new spec
		{"decide", r.decidePhase},            // the plan, to the wanted layout or back
		{"settled", r.settledPhase},          // done, or blocked by problems: stop
		{"act", r.actPhase},                  // the due steps, then the warnings and states
	}
}

// reconcile runs the pass's phases.
func (r *GPUPoolProfileReconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	return runPhases(ctx, s, r.phases())
}

// runPhases runs phases in order until one ends the pass or fails; the pass comes back
// after the soonest requeue any of them asked for. An error ends the pass with no
// requeue but controller-runtime's backoff, named after its phase.
func runPhases(ctx context.Context, s *scope, phases []phase) (ctrl.Result, error) {
	var after time.Duration
	for _, ph := range phases {
		start := time.Now()
		o, err := ph.run(ctx, s)
		s.times.record(ph.name, start)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("%s: %w", ph.name, err)
		}
		after = execute.Soonest(after, o.after)
		if o.stop {
			break
		}
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// desirePhase decides which layout is wanted now and when that changes next (with
// spec.demand, as demand moves it within its limits: the demand, pending pods and Kueue
// Workloads in the cache, is read here, as what observe judges depends on the layout
// wanted). A schedule that cannot be read
// stops the pass with no requeue: only a spec change helps, and no switch is planned,
// so no draining-soon warning stands.
func (r *GPUPoolProfileReconciler) desirePhase(ctx context.Context, s *scope) (outcome, error) {
	st := &s.pool.Status
	d, err := r.desire(ctx, s)
	if err != nil {
		s.facts.invalidSpec = err.Error()
		r.waitStates(s)
		r.withdrawWarnings(ctx, s, func(time.Time) bool { return false })
		return outcome{stop: true}, nil
	}
	s.decision = d
	st.DesiredLayout, st.DesiredReason = d.Layout, d.Reason
	st.NextTransition = nil
	if d.Next != nil {
		st.NextTransition = &gpupoolv1.NextTransition{Layout: d.Next.Layout, At: metav1.NewTime(d.Next.At)}
	}
	s.wanted = s.pool.Spec.LayoutNamed(d.Layout)
	return outcome{}, nil
}

// pausedPhase: a paused pool observes nothing and touches nothing but the draining-soon
// warnings, which announce drains that will not happen while paused. It still records
// the end of tasks started before the pause.
func (r *GPUPoolProfileReconciler) pausedPhase(ctx context.Context, s *scope) (outcome, error) {
	if !s.pool.Spec.Paused && !s.requests.Paused() {
		return outcome{}, nil
	}
	s.facts.paused = true
	r.accountUnobserved(s.pool)
	r.evictions.Cancel(s.pool.Name) // a paused pool evicts nothing more
	r.starts.Cancel(s.pool.Name)    // and starts no task it has not asked for yet
	r.waitStates(s)
	r.withdrawWarnings(ctx, s, func(time.Time) bool { return false })
	return outcome{after: r.followPausedTasks(ctx, s), stop: true}, nil
}

// connectPhase logs in to vCenter (or reuses the session). Without it the pass stops,
// as observePhase does.
func (r *GPUPoolProfileReconciler) connectPhase(ctx context.Context, s *scope) (outcome, error) {
	vcc, retry, ok := r.connectVCenter(ctx, s)
	if !ok {
		return r.blind(ctx, s, retry), nil
	}
	s.vc = vcc
	return outcome{}, nil
}

// tasksPhase records the vSphere tasks that ended. It runs before observe, so that the inventory every decision of
// the pass uses was read after the pass knew which tasks are in flight: a task that ends
// between the two reads is still in flight for this pass, and a task recorded as ended
// ended before the inventory was read (the snapshot rule, docs/operations.md).
func (r *GPUPoolProfileReconciler) tasksPhase(ctx context.Context, s *scope) (outcome, error) {
	wait := r.checkTasks(ctx, s, false)
	s.tasks.inFlight = wait > 0
	return outcome{after: wait}, nil
}

// observePhase reads vSphere and the nodes. Without them the pass stops, retried when
// the facts say (a refused login much later than an unreachable vCenter), and the
// warnings stay only while their switch is still due. Once observed, the pass comes
// back when the wanted layout changes at the latest.
func (r *GPUPoolProfileReconciler) observePhase(ctx context.Context, s *scope) (outcome, error) {
	retry, ok := r.observe(ctx, s)
	// Note: the last pass's node marks may still be being written (stateBatches):
	// each node write of this pass waits for the batch's write to its node (patchNode),
	// and publishMarks for the whole batch.
	// The tasks that ended are told now, on the nodes observe matched, before this
	// pass's own events (a transition it completes or starts, a VM's next task).
	r.flushVMEvents(s)
	if !ok {
		return r.blind(ctx, s, retry), nil
	}
	// Nodes of VMs the spec no longer names are released once observe found no older
	// pool claiming this pool's VMs (checkClaims): a pool held by a conflict touches no node.
	r.releaseRemoved(ctx, s)
	r.nodePods.track(s.pool.Name, s.w.Running())
	s.times.timed("observe:account", func() { r.account(ctx, s) })
	return outcome{after: r.untilBoundary(s)}, nil
}

// heldWorkers are the workers (by status key) of the VMs the pass holds.
func heldWorkers(s *scope) map[string]bool {
	var out map[string]bool
	for _, h := range s.facts.held {
		if out == nil {
			out = map[string]bool{}
		}
		out[s.w.ID(h.VM)] = true
	}
	return out
}

// blind ends a pass that could not see its world: it comes back after retry, and
// the draining-soon warnings stay only while their switch is still due.
func (r *GPUPoolProfileReconciler) blind(ctx context.Context, s *scope, retry time.Duration) outcome {
	d, due, horizon := s.decision, switchDue(s), plan.WarnAhead(&s.pool.Spec)
	r.accountUnobserved(s.pool)
	r.waitStates(s)
	r.withdrawWarnings(ctx, s, func(at time.Time) bool { return warningDue(s.now, d.Next, horizon, due, at) })
	return outcome{after: retry, stop: true}
}

// keepAbortedPhase: an aborted transition waits for a new spec or another wanted
// layout (keepAborted); either clears it.
func (r *GPUPoolProfileReconciler) keepAbortedPhase(ctx context.Context, s *scope) (outcome, error) {
	st := &s.pool.Status
	t := st.Transition
	if t == nil || t.AbortedTime == nil {
		return outcome{}, nil
	}
	if sameTarget(t.To, t.Count, s.decision) && t.Generation == s.pool.Generation {
		s.layout = s.wanted // nothing is made; the nodes are judged against the wanted layout
		return outcome{after: r.keepAborted(ctx, s), stop: true}, nil
	}
	st.Transition = nil
	return outcome{}, nil
}

// decidePhase builds the plan (decide) and records it in the workers' status and the
// plan preview. A shortfall is believed only when two reads show it with no task of the
// pool in flight or ending: one seen while tasks run or just ended stops the pass until
// the next (settling), and one seen on a quiet read is checked against a second read of
// the world (confirmShortfall) before it is reported or any step goes back.
func (r *GPUPoolProfileReconciler) decidePhase(ctx context.Context, s *scope) (outcome, error) {
	p, making, retry, ok, err := r.decideConfirmed(ctx, s)
	if err != nil {
		return outcome{}, err
	}
	if !ok {
		return r.blind(ctx, s, retry), nil
	}
	if s.facts.settling {
		if s.w.TasksInFlight {
			return outcome{stop: true}, nil // the task wait (tasksPhase) brings the next pass
		}
		return outcome{after: requeueStep, stop: true}, nil // they just ended: look again soon
	}
	s.plan, s.layout = p, making
	if making != nil {
		// Power-ons ahead of parks and suspends after drains planned for another spec
		// or layout are not asked.
		r.starts.CancelAhead(s.pool.Name, s.pool.Generation, making.Name)
	}
	r.starts.CancelAheadOf(s.pool.Name, heldWorkers(s)) // nor those of the VMs held now
	if s.planned != nil {
		// The wanted layout is planned with no problem: the starts on a condition
		// planned for this spec and layout (from s.planned, as act plans them) stand,
		// and their StartTimeout restarts.
		r.starts.Renew(s.pool.Name, s.pool.Generation, s.planned.Layout)
	}
	execute.Record(s.pool, p, &s.w, s.facts.held, passEvents{r, s})
	r.publishPlan(ctx, s, p)
	return outcome{}, nil
}

// decideConfirmed decides (decide) and, when the plan falls short on a quiet read,
// reads the world a second time (confirmShortfall) and decides again: the pass and the
// preview plan the same way. It reports false, with when to look again, when the second
// read failed.
func (r *GPUPoolProfileReconciler) decideConfirmed(ctx context.Context, s *scope) (*plan.Plan, *gpupoolv1.Layout, time.Duration, bool, error) {
	p, making, err := r.decide(s)
	if err != nil || len(p.Problems) == 0 || s.facts.settling {
		return p, making, 0, true, err
	}
	if retry, ok := r.confirmShortfall(ctx, s); !ok {
		return nil, nil, retry, false, nil
	}
	p, making, err = r.decide(s)
	return p, making, 0, true, err
}

// confirmShortfall reads the world a second time (observe) for a shortfall seen on a
// quiet read, forgetting what decide concluded from the first. No task of the pool is
// in flight between the two reads (decide settles otherwise, and the pass has started
// none), so a shortfall both reads show is not a VM caught between two states.
func (r *GPUPoolProfileReconciler) confirmShortfall(ctx context.Context, s *scope) (time.Duration, bool) {
	s.facts.problems, s.facts.held, s.facts.fallback = nil, nil, ""
	shortfallRereads.WithLabelValues(s.pool.Name).Inc()
	return r.observe(ctx, s)
}

// settledPhase ends the pass when nothing is to be done: the layout being made is done
// (the transition completes once no task is in flight), or problems forbid every step
// (reported as Stalled). Either way the warnings and node states are kept current.
func (r *GPUPoolProfileReconciler) settledPhase(ctx context.Context, s *scope) (outcome, error) {
	p := s.plan
	if !p.Done() && len(p.Problems) == 0 {
		return outcome{}, nil
	}
	o := outcome{after: r.publishMarks(ctx, s, p, nil), stop: true}
	switch {
	case !p.Done():
		o.after = execute.Soonest(o.after, requeueBlocked)
	case s.facts.fallback != "":
		s.facts.done = true
		o.after = execute.Soonest(o.after, requeueBlocked)
	default:
		s.facts.done = true
		if !s.w.TasksInFlight {
			r.completeTransition(s)
		}
	}
	return o, nil
}

// actPhase runs the due steps, one per worker; a failing step is reported and never
// stops the others. After the steps, whose writes (a cordon first of all) come first in
// the pass's budget (execute.Budget), the node states and draining-soon warnings, one
// patch a node and past the pass (publishMarks): a node a step of the pass patched
// carries its own already.
func (r *GPUPoolProfileReconciler) actPhase(ctx context.Context, s *scope) (outcome, error) {
	if s.facts.fallback == "" {
		r.startTransition(s, s.plan)
	}
	after, done := r.act(ctx, s, s.plan)
	s.times.timed("act:states", func() { after = execute.Soonest(after, r.publishMarks(ctx, s, s.plan, done)) })
	if len(s.facts.held) > 0 {
		after = execute.Soonest(after, requeueBlocked)
	}
	return outcome{after: after}, nil
}

// decide plans the way to the wanted layout and returns the plan with the layout it
// makes. When the wanted layout cannot be reached in the middle of a transition
// (another VM took a freed GPU, a host left), it plans the way back to the layout the
// transition started from, so that the pool keeps capacity; the problems are still
// reported. It reads nothing: the node states derive from what observe found.
//
// While vSphere tasks are in flight, or when some ended at this pass's check, a shortfall
// is not believed: the inventory may have caught a VM between two states (a vGPU placed
// on a VM that still reads as powered off) and counted a GPU twice. The pass then waits
// for the tasks (facts.settling) and decides on the next one, whatever was reported
// before. So does a layout by count whose GPUs to convert moved on such a read
// (facts.choiceMoved): parking the VMs of another GPU than the one being converted is
// decided on a quiet read only. Feasibility proper is decided on quiet reads
// (decidePhase).
func (r *GPUPoolProfileReconciler) decide(s *scope) (*plan.Plan, *gpupoolv1.Layout, error) {
	d := s.decision
	s.nodeStates = nodeStates(&s.w, s.pool, s.now, s.wanted)
	in := plan.Input{Spec: &s.pool.Spec, Layout: d.Layout, Inventory: s.w.Inventory, Nodes: s.nodeStates, InFlight: plannedInFlight(s.pool), Held: s.w.Holds}
	s.planned = nil
	p, err := plan.Build(in)
	if err != nil {
		return nil, nil, fmt.Errorf("planning: %w", err)
	}
	if pr, ok := conversionProblem(s.conversions, d.Layout); ok {
		// A layout by count that could not be resolved lists its candidates, not a
		// choice: nothing is done for it.
		p.Hosts, p.Problems = nil, append(p.Problems, pr)
	}
	if moved := slices.Contains(s.facts.choiceMoved, d.Layout); moved || (len(p.Problems) > 0 && (s.w.TasksInFlight || s.w.TasksEnded > 0)) {
		s.facts.settling = true
		if reportedInfeasible(s.persisted) {
			// Reported on two quiet reads before these tasks: the report stands (no
			// flapping) while nothing is acted on; a moved choice's problems are not
			// believed either.
			s.facts.reportStands = true
			if !moved {
				s.facts.problems = p.Problems
			}
		}
		return p, s.wanted, nil
	}
	s.facts.problems = p.Problems
	s.facts.held = append(s.facts.held, p.Held...)
	t := s.pool.Status.Transition
	if len(p.Problems) == 0 || t == nil || t.From == "" || t.From == d.Layout {
		if len(p.Problems) == 0 {
			s.planned = &in // the power-ons ahead of parks are planned from it (act)
		}
		return p, s.wanted, nil
	}
	from := s.pool.Spec.LayoutNamed(t.From)
	back, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: t.From, Inventory: s.w.Inventory, Nodes: labelledFor(&s.w, s.pool.Name, from, s.nodeStates), InFlight: plannedInFlight(s.pool), Held: s.w.Holds})
	if err != nil || len(back.Problems) > 0 {
		return p, s.wanted, nil //nolint:nilerr // the way back is not possible either: report the problems
	}
	s.facts.fallback = t.From
	s.facts.held = append(s.facts.held[:0:0], back.Held...)
	return back, from, nil
}

// untilBoundary is how long until the wanted layout changes, capped by the resync period.
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

// reportedInfeasible tells whether the pool already reports its layout infeasible: then
// a shortfall is not new (it is the one being reverted around), and waiting for tasks
// would only make the conditions flap.
func reportedInfeasible(p *gpupoolv1.GPUPoolProfile) bool {
	c := findCondition(p, gpupoolv1.ConditionStalled)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonInfeasible
}
