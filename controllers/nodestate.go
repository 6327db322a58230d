package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
)

// stateFacts are what a node's state label is decided from.
type stateFacts struct {
	// InLayout: the VM is a worker of the layout being made.
	InLayout bool
	// PoweredOn: the VM is powered on.
	PoweredOn bool
	// Step is the worker's step.
	Step gpupoolv1.Step
	// Failed: a retry is pending, the readiness wait is overdue, or the VM is held.
	Failed bool
	// Aborted: the switch was aborted and waits for a new spec or another layout; the
	// recorded step is stale, nothing moves, the state is what was observed.
	Aborted bool
	// NodeReady: the node is ready for work (readinessGaps found nothing); read only
	// when Aborted.
	NodeReady bool
}

// nodeStateValue is the single mapping from a worker's facts to its node's state label.
func nodeStateValue(f stateFacts) string {
	switch {
	case f.Failed:
		return StateFailed
	case f.Aborted:
		// Nothing is being drained, reconfigured or waited for: a running VM whose node
		// serves is ready, one whose node does not is failed, the rest are parked.
		switch {
		case f.PoweredOn && f.NodeReady:
			return StateReady
		case f.PoweredOn:
			return StateFailed
		}
		return StateParked
	case f.Step == gpupoolv1.StepDrainRequired:
		return StateDraining
	case f.Step == gpupoolv1.StepParkRequired || (f.Step == gpupoolv1.StepPowerOffRequired && !f.InLayout):
		return StateParked
	case f.Step == gpupoolv1.StepPowerOffRequired || f.Step == gpupoolv1.StepReconfigureRequired || f.Step == gpupoolv1.StepPowerOnRequired:
		return StateReconfiguring
	case f.Step == gpupoolv1.StepWaitNodeReady || f.Step == gpupoolv1.StepRelabelRequired || f.Step == gpupoolv1.StepUncordonRequired:
		return StatePending
	case f.PoweredOn:
		return StateReady
	default:
		return StateParked
	}
}

// inLayout tells whether a VM (by inventory name) is a worker of the layout being made.
func (s *scope) inLayout(name string) bool {
	if s.layout == nil {
		return false
	}
	id := s.specID[name]
	for _, w := range s.layout.Workers {
		if w.VM == id {
			return true
		}
	}
	return false
}

// readyForWork tells whether the node of a VM (by inventory name) was found ready for
// work this pass (nodeStates observed it and readinessGaps found nothing missing).
func (s *scope) readyForWork(name string) bool {
	gaps, seen := s.gaps[name]
	return seen && len(gaps) == 0
}

// publishStates sets each pool node's state label from its worker's recorded step, and
// records the pool as the owner of its marks (AnnotationMarkedBy). A node is patched
// only when its value changes. Nodes the pool marked and no longer matches to a worker
// lose the marks (unmarkStale).
func (r *GPUPoolProfileReconciler) publishStates(ctx context.Context, s *scope) {
	held := map[string]bool{}
	for _, h := range s.facts.held {
		held[h.VM] = true
	}
	var nodes []*corev1.Node
	var wants []string
	for name, n := range s.nodes {
		ws := findWorker(s.pool, s.specID[name])
		vm, ok := s.vm(name)
		if ws == nil || !ok {
			continue
		}
		want := nodeStateValue(stateFacts{
			InLayout:  s.inLayout(name),
			PoweredOn: vm.PowerState == inventory.PoweredOn,
			Step:      ws.Step,
			Failed:    held[name] || held[ws.VM] || (ws.Attempts > 0 && ws.NextRetryTime != nil) || waitExpired(s, ws),
			Aborted:   s.aborted,
			NodeReady: s.readyForWork(name),
		})
		if n.Labels[LabelState] == want && n.Annotations[AnnotationMarkedBy] == s.pool.Name {
			continue
		}
		if !s.budget.nodeWrite() {
			continue // published in the next pass
		}
		nodes, wants = append(nodes, n), append(wants, want)
	}
	// A transition changes the state of every node it touches at once: patch them
	// concurrently (bounded), not one after the other.
	errs := make([]error, len(nodes))
	forEach(len(nodes), maxConcurrentDrains, func(i int) {
		errs[i] = r.patchNode(ctx, nodes[i], func(n *corev1.Node) {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[LabelState] = wants[i]
			markedBy(n, s.pool.Name)
		})
	})
	for _, err := range errs {
		if err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
	r.unmarkStale(ctx, s)
}

// defaultWarnAhead is the scheduler warning horizon (TaintDrainingSoon) when neither
// schedule.warnAhead nor a positive schedule.leadTime is set.
const defaultWarnAhead = 15 * time.Minute

// warnAhead is how long before a scheduled switch starts its nodes are warned.
func warnAhead(spec *gpupoolv1.GPUPoolProfileSpec) time.Duration {
	sc := spec.Schedule
	switch {
	case sc != nil && sc.WarnAhead != nil:
		return sc.WarnAhead.Duration
	case sc != nil && sc.LeadTime != nil && sc.LeadTime.Duration > 0:
		return sc.LeadTime.Duration
	}
	return defaultWarnAhead
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

// warnSchedulers taints and annotates the nodes drainWarnings names, and takes the
// warning off the others. It returns when the next warning starts (0: none pending).
func (r *GPUPoolProfileReconciler) warnSchedulers(ctx context.Context, s *scope, current *plan.Plan) time.Duration {
	announced := map[string]time.Time{}
	for name, n := range s.nodes {
		if at, err := time.Parse(time.RFC3339, n.Annotations[AnnotationDrainAt]); err == nil {
			announced[name] = at
		}
	}
	horizon := warnAhead(&s.pool.Spec)
	want := drainWarnings(s.now, s.decision.Next, horizon, drainsOf(s.nextPlan), drainsOf(current), announced)
	for name, n := range s.nodes {
		at, warn := want[name]
		if warn == hasWarning(n, at) && (warn || !hasAnyWarning(n)) {
			continue
		}
		if !s.budget.nodeWrite() {
			continue // warned in the next pass
		}
		if err := r.patchNode(ctx, n, func(n *corev1.Node) {
			setWarning(n, at, warn)
			if warn {
				markedBy(n, s.pool.Name)
			}
		}); err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
	if nb := s.decision.Next; nb != nil && horizon > 0 && s.now.Before(nb.At.Add(-horizon)) {
		return nb.At.Add(-horizon).Sub(s.now)
	}
	return 0
}

func hasWarning(n *corev1.Node, at time.Time) bool {
	return n.Annotations[AnnotationDrainAt] == at.UTC().Format(time.RFC3339) && hasDrainingSoonTaint(n)
}

func hasAnyWarning(n *corev1.Node) bool {
	_, ok := n.Annotations[AnnotationDrainAt]
	return ok || hasDrainingSoonTaint(n)
}

func hasDrainingSoonTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintDrainingSoon {
			return true
		}
	}
	return false
}

// setWarning puts the draining-soon taint and the drain-at annotation on the node, or
// takes them off.
func setWarning(n *corev1.Node, at time.Time, warn bool) {
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key != TaintDrainingSoon {
			taints = append(taints, t)
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	delete(n.Annotations, AnnotationDrainAt)
	if warn {
		taints = append(taints, corev1.Taint{Key: TaintDrainingSoon, Value: "true", Effect: corev1.TaintEffectPreferNoSchedule})
		n.Annotations[AnnotationDrainAt] = at.UTC().Format(time.RFC3339)
	}
	n.Spec.Taints = taints
}
