package nodes

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// StateFacts are what a node's state label (LabelState) is decided from.
type StateFacts struct {
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
	// NodeReady: the node is ready for work (ReadinessGaps found nothing); read only
	// when Aborted.
	NodeReady bool
}

// StateValue is the single mapping from a worker's facts to its node's state label, so
// that schedulers and people read one vocabulary (the State* values of api/v1alpha1).
func StateValue(f StateFacts) string {
	switch {
	case f.Failed:
		return gpupoolv1.StateFailed
	case f.Aborted:
		// Nothing is being drained, reconfigured or waited for: a running VM whose node
		// serves is ready, one whose node does not is failed, the rest are parked.
		switch {
		case f.PoweredOn && f.NodeReady:
			return gpupoolv1.StateReady
		case f.PoweredOn:
			return gpupoolv1.StateFailed
		}
		return gpupoolv1.StateParked
	case f.Step == gpupoolv1.StepDrainRequired:
		return gpupoolv1.StateDraining
	case f.Step == gpupoolv1.StepParkRequired || (f.Step == gpupoolv1.StepPowerOffRequired && !f.InLayout):
		return gpupoolv1.StateParked
	case f.Step == gpupoolv1.StepPowerOffRequired || f.Step == gpupoolv1.StepReconfigureRequired || f.Step == gpupoolv1.StepPowerOnRequired:
		return gpupoolv1.StateReconfiguring
	case f.Step == gpupoolv1.StepWaitNodeReady || f.Step == gpupoolv1.StepRelabelRequired || f.Step == gpupoolv1.StepUncordonRequired:
		return gpupoolv1.StatePending
	case f.PoweredOn:
		return gpupoolv1.StateReady
	default:
		return gpupoolv1.StateParked
	}
}

// HasWarning tells whether the node carries the draining-soon warning announcing a drain
// at `at`: the taint and the drain-at annotation both, so that a half-written warning is
// written again.
func HasWarning(n *corev1.Node, at time.Time) bool {
	return n.Annotations[gpupoolv1.AnnotationDrainAt] == at.UTC().Format(time.RFC3339) && HasDrainingSoonTaint(n)
}

// HasAnyWarning tells whether the node carries any part of a draining-soon warning.
func HasAnyWarning(n *corev1.Node) bool {
	_, ok := n.Annotations[gpupoolv1.AnnotationDrainAt]
	return ok || HasDrainingSoonTaint(n)
}

// HasDrainingSoonTaint tells whether the node carries TaintDrainingSoon, with any value
// or effect.
func HasDrainingSoonTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == gpupoolv1.TaintDrainingSoon {
			return true
		}
	}
	return false
}

// DrainAt is the drain start the node's warning announces (AnnotationDrainAt); false
// when it announces none that can be read.
func DrainAt(n *corev1.Node) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, n.Annotations[gpupoolv1.AnnotationDrainAt])
	return at, err == nil
}

// SetWarning puts the draining-soon taint (PreferNoSchedule: schedulers avoid the node,
// nothing is refused) and the drain-at annotation on the node, or takes them off. Other
// taints are kept.
func SetWarning(n *corev1.Node, at time.Time, warn bool) {
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key != gpupoolv1.TaintDrainingSoon {
			taints = append(taints, t)
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	delete(n.Annotations, gpupoolv1.AnnotationDrainAt)
	if warn {
		taints = append(taints, corev1.Taint{Key: gpupoolv1.TaintDrainingSoon, Value: "true", Effect: corev1.TaintEffectPreferNoSchedule})
		n.Annotations[gpupoolv1.AnnotationDrainAt] = at.UTC().Format(time.RFC3339)
	}
	n.Spec.Taints = taints
}
