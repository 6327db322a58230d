package plan

import (
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestStepOrderAndPhases: the one list of phases gives both the planner's phases (the
// two ways to park share one) and the order of steps status readers sort by (Suspend
// before PowerOff); a step that is none sorts first and counts as the last phase.
func TestStepOrderAndPhases(t *testing.T) {
	for _, c := range []struct {
		a            Action
		phase, order int
	}{
		{Drain, 0, 0}, {Suspend, 1, 1}, {PowerOff, 1, 2}, {Reconfigure, 2, 3}, {PowerOn, 3, 4},
		{WaitNodeReady, 4, 5}, {Relabel, 5, 6}, {Uncordon, 6, 7}, {gpupoolv1.StepNone, 6, -1},
	} {
		if got := phaseOf(c.a); got != c.phase {
			t.Errorf("phaseOf(%q) = %d, want %d", c.a, got, c.phase)
		}
		if got := StepOrder(c.a); got != c.order {
			t.Errorf("StepOrder(%q) = %d, want %d", c.a, got, c.order)
		}
	}
}
