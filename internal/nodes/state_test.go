package nodes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestStateValue covers every step, in and out of the layout, on and off, failed
// or not: the label has exactly one value for each, and failed wins.
func TestStateValue(t *testing.T) {
	steps := []gpupoolv1.Step{gpupoolv1.StepNone, gpupoolv1.StepDrainRequired, gpupoolv1.StepParkRequired, gpupoolv1.StepPowerOffRequired,
		gpupoolv1.StepReconfigureRequired, gpupoolv1.StepPowerOnRequired, gpupoolv1.StepWaitNodeReady, gpupoolv1.StepRelabelRequired, gpupoolv1.StepUncordonRequired}
	want := func(f StateFacts) string {
		switch {
		case f.Failed:
			return gpupoolv1.StateFailed
		case f.Aborted && f.PoweredOn && f.NodeReady:
			return gpupoolv1.StateReady
		case f.Aborted && f.PoweredOn:
			return gpupoolv1.StateFailed
		case f.Aborted:
			return gpupoolv1.StateParked // whatever the stale step says: nothing moves
		case f.Step == gpupoolv1.StepDrainRequired:
			return gpupoolv1.StateDraining
		case f.Step == gpupoolv1.StepParkRequired:
			return gpupoolv1.StateParked
		case f.Step == gpupoolv1.StepPowerOffRequired:
			if f.InLayout {
				return gpupoolv1.StateReconfiguring
			}
			return gpupoolv1.StateParked
		case f.Step == gpupoolv1.StepReconfigureRequired, f.Step == gpupoolv1.StepPowerOnRequired:
			return gpupoolv1.StateReconfiguring
		case f.Step != gpupoolv1.StepNone:
			return gpupoolv1.StatePending
		case f.PoweredOn:
			return gpupoolv1.StateReady
		}
		return gpupoolv1.StateParked
	}
	valid := map[string]bool{gpupoolv1.StatePending: true, gpupoolv1.StateDraining: true, gpupoolv1.StateParked: true, gpupoolv1.StateReconfiguring: true, gpupoolv1.StateReady: true, gpupoolv1.StateFailed: true}
	for _, step := range steps {
		for _, in := range []bool{false, true} {
			for _, on := range []bool{false, true} {
				for _, failed := range []bool{false, true} {
					for _, aborted := range []bool{false, true} {
						for _, ready := range []bool{false, true} {
							f := StateFacts{InLayout: in, PoweredOn: on, Step: step, Failed: failed, Aborted: aborted, NodeReady: ready}
							got := StateValue(f)
							if got != want(f) || !valid[got] {
								t.Errorf("StateValue(%+v) = %q, want %q", f, got, want(f))
							}
						}
					}
				}
			}
		}
	}
}

func TestSetWarningKeepsOtherTaints(t *testing.T) {
	n := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "admin", Effect: corev1.TaintEffectNoSchedule}}}}
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.FixedZone("CET", 3600))
	SetWarning(n, at, true)
	if !HasWarning(n, at) || n.Annotations[gpupoolv1.AnnotationDrainAt] != "2026-11-30T06:50:00Z" || len(n.Spec.Taints) != 2 {
		t.Fatalf("after warning: %+v %v", n.Spec.Taints, n.Annotations)
	}
	SetWarning(n, at, true) // idempotent
	if len(n.Spec.Taints) != 2 {
		t.Fatalf("warning twice: %+v", n.Spec.Taints)
	}
	SetWarning(n, time.Time{}, false)
	if HasAnyWarning(n) || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "admin" {
		t.Fatalf("after removal: %+v %v", n.Spec.Taints, n.Annotations)
	}
}
