package controllers

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// inLayout tells whether a VM (by inventory name) is a worker of the layout being made.
func (s *scope) inLayout(name string) bool {
	if s.layout == nil {
		return false
	}
	id := s.w.SpecID[name]
	for _, w := range s.layout.Workers {
		if w.VM == id {
			return true
		}
	}
	return false
}

// readyForWork tells whether the node of a VM (by inventory name) was found ready for
// work this pass (nodeStates observed it and nodes.ReadinessGaps found nothing missing).
func readyForWork(w *world.World, name string) bool {
	gaps, seen := w.Gaps[name]
	return seen && len(gaps) == 0
}

// stateFacts are what the state label of each pool node whose VM is a worker's (by VM
// name) is decided from: its worker's recorded step and what the pass holds.
func stateFacts(s *scope) map[string]nodes.StateFacts {
	held := map[string]bool{}
	for _, h := range s.facts.held {
		held[h.VM] = true
	}
	out := map[string]nodes.StateFacts{}
	for name := range s.w.Nodes {
		ws := execute.FindWorker(s.pool, s.w.SpecID[name])
		vm, ok := s.w.VM(name)
		if ws == nil || !ok {
			continue
		}
		out[name] = nodes.StateFacts{
			InLayout:  s.inLayout(name),
			PoweredOn: vm.PowerState == inventory.PoweredOn,
			Step:      ws.Step,
			Failed:    held[name] || held[ws.VM] || (ws.Attempts > 0 && ws.NextRetryTime != nil) || waitExpired(s.pool, s.now, ws),
			Aborted:   s.aborted,
			NodeReady: readyForWork(&s.w, name),
		}
	}
	return out
}

// stateAfter is the state label of a node from its facts, done: the pass did the
// worker's last step (execute.Outcome.Done), and the label is that of a worker with no
// step left, as the next pass finds it.
func stateAfter(f nodes.StateFacts, done bool) string {
	if done {
		f.Step = gpupoolv1.StepNone
	}
	return nodes.StateValue(f)
}

// stepMarks puts the state labels and their owner, the pool, on the nodes the
// executor's steps patch (execute.Input.Marks), from the facts as the pass found them
// before its steps (stateFacts), and the draining-soon warnings the pass wants (warn,
// drainWarningsOf): publishMarks finds them in place afterwards
// unless a step's outcome changed them (a failed start, a hold, an abort), or leave them
// to the suspends' node writes past the pass (marksPending). So a drain's
// cordon carries the node's warning and its park takes it off, instead of two patches
// of their own. A drain under way (its start at or before now, the pass's time) keeps
// the earlier start the node carries as it is patched: the pass decided warn before it
// waited for the last pass's batch (publishMarks), and may have read the node before
// that batch's warning landed on it.
func stepMarks(facts map[string]nodes.StateFacts, warn map[string]time.Time, pool string, now time.Time) func(vm string, done bool, n *corev1.Node) {
	return func(vm string, done bool, n *corev1.Node) {
		var m nodeMarks
		if f, ok := facts[vm]; ok {
			m.state = stateAfter(f, done)
		}
		at, ok := warn[vm]
		if carried, has := nodes.DrainAt(n); ok && has && !at.After(now) && carried.Before(at) {
			at = carried
		}
		if warningDiffers(n, at, ok) {
			m.warn = warnChange{set: true, on: ok, at: at}
		}
		m.apply(n, pool)
	}
}

// warningDiffers tells whether the node's draining-soon warning is not the one wanted:
// a warning announcing at (warn), or none.
func warningDiffers(n *corev1.Node, at time.Time, warn bool) bool {
	return warn != nodes.HasWarning(n, at) || (!warn && nodes.HasAnyWarning(n))
}

// marksPending are the VMs (by inventory name) whose node's parked marks a suspend's
// start writes past a pass, this one's (s.marksLater) or an earlier one's still to be
// made (execute.Starts.PendingMarks): that write carries the node's state label and
// warning, so the pass leaves them to it rather than write the node before it (which
// would make it wait for the batch and conflict). Should it fail, the pass that clears
// its intent writes them.
func (r *GPUPoolProfileReconciler) marksPending(s *scope) map[string]bool {
	pending := r.starts.PendingMarks(s.pool.Name)
	if len(pending) == 0 {
		return s.marksLater
	}
	out := maps.Clone(s.marksLater)
	if out == nil {
		out = map[string]bool{}
	}
	for name := range s.w.Nodes {
		if pending[s.w.ID(name)] {
			out[name] = true
		}
	}
	return out
}

// publishMarks sets each pool node's state label from its worker's recorded step, with
// the pool as the owner of its marks (AnnotationMarkedBy), and its draining-soon warning
// as drainWarnings decides it for current, the plan the pass acts on (nil: none); done
// are the VMs whose last step the pass did (execute.Outcome.Done). It returns when the
// next warning starts (0: none pending).
//
// A node is patched only when a value changes, once for both: a node a step of the pass
// patched carries them already (stepMarks), one whose parked marks a suspend's start
// writes past the pass is left to that write (marksPending), and one the pool's last
// batch wrote after this pass read it carries what the batch wrote (landed). The patches
// run past the pass (stateBatches) when the manager runs them, inside it otherwise: they
// are derived from the workers' steps and the plans, and nothing the pass hands out
// waits for them. Nodes the pool marked and no longer matches to a worker lose the marks
// (unmarkStale).
func (r *GPUPoolProfileReconciler) publishMarks(ctx context.Context, s *scope, current *plan.Plan, done map[string]bool) time.Duration {
	r.waitStates(s) // what the last batch wrote, and what it could not
	later := r.marksPending(s)
	states := statesToWrite(stateFacts(s), s.w.Nodes, s.pool.Name, done, s.landed)
	warnings := warningsToWrite(drainWarningsOf(s, current), s.w.Nodes, s.landed)
	var changed []*corev1.Node
	var wants []nodeMarks
	for name, n := range s.w.Nodes {
		m := nodeMarks{state: states[name], warn: warnings[name]}
		if m.state == "" && !m.warn.set {
			continue
		}
		if r.ready.madeDuring(s.pool.Name, n.Name, n.ResourceVersion, s.readySeq) {
			continue // the ready follower wrote it after this pass read the node
		}
		if later[name] {
			continue // the write of its parked marks, past the pass, carries its label and warning
		}
		if !s.budget.NodeWrite() {
			continue // published in the next pass
		}
		changed, wants = append(changed, n), append(wants, m)
	}
	pool := s.pool.Name // not s: a batch outlives the pass
	patch := r.patchNode
	if r.states != nil {
		patch = r.patchNodeNow // the batch's own writes: patchNode would wait for them
	}
	patchMarks := func(ctx context.Context, n *corev1.Node, m nodeMarks) error {
		return patch(ctx, n, func(n *corev1.Node) { m.apply(n, pool) })
	}
	if r.states != nil {
		copies := make([]*corev1.Node, len(changed))
		for i, n := range changed {
			copies[i] = nodes.WriteCopy(n)
			// Counted as made unless the last batch got nothing through (its refusal
			// gives the write back, and a capped pass backs off: afterCapped); its
			// failures are reported by this pass (waitStates).
			s.budget.NodeWritten(s.statesRefused)
		}
		r.states.start(pool, copies, wants, patchMarks)
	} else {
		// A transition changes the state of every node it touches at once: patch them
		// concurrently (bounded), not one after the other.
		errs := make([]error, len(changed))
		execute.ForEach(len(changed), execute.MaxConcurrentWrites, func(i int) { errs[i] = patchMarks(ctx, changed[i], wants[i]) })
		for _, err := range errs {
			s.budget.NodeWritten(err)
			if err != nil {
				s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
			}
		}
	}
	r.unmarkStale(ctx, s)
	return nextWarning(s)
}

// statesToWrite decides which of the nodes (by VM name) the facts cover need their
// state label, or its owner record (pool), written, and to what: those that do not carry
// them. A node the pool's last batch wrote after the pass read it (landed: the read is at
// the version the batch started from) carries what the batch wrote, not what the read
// shows.
func statesToWrite(facts map[string]nodes.StateFacts, byVM map[string]*corev1.Node, pool string, done map[string]bool, landed map[string]landedState) map[string]string {
	out := map[string]string{}
	for name, f := range facts {
		n, want := byVM[name], stateAfter(f, done[name])
		has, owner := n.Labels[LabelState], n.Annotations[AnnotationMarkedBy]
		if l, ok := landed[n.Name]; ok && l.readAt == n.ResourceVersion && l.marks.state != "" {
			has, owner = l.marks.state, pool
		}
		if has != want || owner != pool {
			out[name] = want
		}
	}
	return out
}

// waitStates waits for the node marks the pool's last pass handed to a batch
// (stateBatches) and takes what it found: the marks that landed (s.landed, for
// publishMarks) and the patches that failed, this pass's errors to report.
func (r *GPUPoolProfileReconciler) waitStates(s *scope) {
	errs, landed := r.states.wait(s.pool.Name)
	for _, err := range errs {
		s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
	}
	s.landed = landed
	if len(errs) > 0 && len(landed) == 0 {
		s.statesRefused = errs[0]
	}
}

// drainWarnings decides which nodes (by VM name) carry the draining-soon warning, and
// the drain start each announces:
//
//   - the nodes the next switch drains, from next.At-horizon until next.At (the switch
//     starts at next.At, the boundary minus leadTime, and cordons and drains at once);
//   - the nodes the current plan still drains, until they are drained: their drain
//     started (or starts) now, or at the time they already announce.
//
// A switch cancelled (an override, a spec change) no longer names them, and a drained
// node has no Drain step: the warning goes.
func drainWarnings(now time.Time, next *plan.Boundary, horizon time.Duration, nextDrains, currentDrains []string, announced map[string]time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	if next != nil && horizon > 0 && !now.Before(next.At.Add(-horizon)) && now.Before(next.At) {
		for _, vm := range nextDrains {
			out[vm] = next.At
		}
	}
	for _, vm := range currentDrains {
		at, ok := announced[vm]
		if !ok || at.After(now) {
			at = now
		}
		out[vm] = at
	}
	return out
}

// drainsOf lists the VMs a plan drains.
func drainsOf(p *plan.Plan) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, hp := range p.Hosts {
		for _, st := range hp.Steps {
			if st.Action == plan.Drain {
				out = append(out, st.VM)
			}
		}
	}
	return out
}

// drainWarningsOf is drainWarnings for the pass: the drains of current (the plan the
// pass acts on) and of the next switch's plan, with the drain start each node already
// announces (announcedDrains).
func drainWarningsOf(s *scope, current *plan.Plan) map[string]time.Time {
	announced := announcedDrains(s.w.Nodes, s.landed)
	return drainWarnings(s.now, s.decision.Next, plan.WarnAhead(&s.pool.Spec), drainsOf(s.nextPlan), drainsOf(current), announced)
}

// announcedDrains is the drain start each node (by VM name) announces: as read, or as
// the pool's last batch wrote it when it wrote the node after the pass read it (landed):
// a drain that goes on keeps the start it announced first.
func announcedDrains(byVM map[string]*corev1.Node, landed map[string]landedState) map[string]time.Time {
	out := map[string]time.Time{}
	for name, n := range byVM {
		if at, ok := nodes.DrainAt(warningOf(n, landed)); ok {
			out[name] = at
		}
	}
	return out
}

// warningOf is n as far as its draining-soon warning goes (read it with nodes.HasWarning,
// HasAnyWarning, DrainAt): n itself, or, when the pool's last batch wrote n's warning
// after the pass read n (landed), a node that carries what the batch wrote.
func warningOf(n *corev1.Node, landed map[string]landedState) *corev1.Node {
	l, ok := landed[n.Name]
	if !ok || l.readAt != n.ResourceVersion || !l.marks.warn.set {
		return n
	}
	w := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
	nodes.SetWarning(w, l.marks.warn.at, l.marks.warn.on)
	return w
}

// warningsToWrite decides which of the nodes (by VM name) need their draining-soon
// warning written, and to what: want are the warnings the pass wants (drainWarningsOf),
// and a node not in want carries none. A node the pool's last batch wrote after the
// pass read it carries what the batch wrote (landed), as in statesToWrite.
func warningsToWrite(want map[string]time.Time, byVM map[string]*corev1.Node, landed map[string]landedState) map[string]warnChange {
	out := map[string]warnChange{}
	for name, n := range byVM {
		if at, warn := want[name]; warningDiffers(warningOf(n, landed), at, warn) {
			out[name] = warnChange{set: true, on: warn, at: at}
		}
	}
	return out
}

// nextWarning is when the next scheduled switch's warnings start (0: none pending, or
// they have started).
func nextWarning(s *scope) time.Duration {
	horizon := plan.WarnAhead(&s.pool.Spec)
	if nb := s.decision.Next; nb != nil && horizon > 0 && s.now.Before(nb.At.Add(-horizon)) {
		return nb.At.Add(-horizon).Sub(s.now)
	}
	return 0
}
