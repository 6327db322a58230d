package testworld

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The bounds of a fake-clock step after a pass: at least MinStep, so that a pass that
// asks to come back at once still moves time (a task's progress, a drain's timeout),
// and at most MaxStep, so that a long requeue (the next window boundary) does not jump
// over what the test wants to see in between.
const (
	MinStep = time.Second
	MaxStep = 10 * time.Second
)

// Step is how far the fake clock moves after a pass that returned res: the requeue
// delay, bounded by MinStep and MaxStep.
func Step(res ctrl.Result) time.Duration {
	return StepAtMost(res, MaxStep)
}

// StepAtMost is Step with another upper bound, for a test that looks closer.
func StepAtMost(res ctrl.Result, most time.Duration) time.Duration {
	return min(max(res.RequeueAfter, MinStep), most)
}

// Loop drives one pool's reconciler on a fake clock. The suites fill it with their own
// pass (fault injection, step recording, errors they tolerate) and, where the workers
// have nodes, the wait for the simulated kubelets; the loop itself is the same for all.
type Loop struct {
	T     testing.TB
	Clock *clocktesting.FakeClock
	// Reconcile runs one pass over the pool. Failing the test on an error is its own
	// business: some suites count the errors they inject.
	Reconcile func() ctrl.Result
	// Settle, when set, waits after each pass until the simulated world has caught up
	// with it (nodes following their VMs' power).
	Settle func()
	// Get reads the pool as the API server has it now.
	Get func() *gpupoolv1.GPUPoolProfile
}

// Converge runs passes until the pool has reached layout (see Reached), settling the
// world and stepping the clock by Step after each. It fails the test at once when the
// pool is Blocked, and after passes passes that did not reach it, with the pool's phase,
// layouts, workers and conditions in the message.
func (l Loop) Converge(layout string, passes int) *gpupoolv1.GPUPoolProfile {
	l.T.Helper()
	for range passes {
		res := l.Reconcile()
		if l.Settle != nil {
			l.Settle()
		}
		p := l.Get()
		if Reached(p, layout) {
			return p
		}
		if p.Status.Phase == gpupoolv1.PhaseBlocked {
			l.T.Fatalf("pool blocked on the way to %s: %s", cmpLayout(layout), Conditions(p))
		}
		l.Clock.Step(Step(res))
	}
	p := l.Get()
	l.T.Fatalf("pool did not converge to %s after %d passes: phase %s, wanted %q, active %q, workers %+v, %s", cmpLayout(layout), passes,
		p.Status.Phase, p.Status.DesiredLayout, p.Status.ActiveLayout, p.Status.Workers, Conditions(p))
	return nil
}

// Reached tells whether the pool is done with layout (any wanted layout when empty):
// Steady with it wanted and active, or, when spec.paused is set, Paused with it
// wanted (a paused pool does not act, so what is active stays as it was).
func Reached(p *gpupoolv1.GPUPoolProfile, layout string) bool {
	st := p.Status
	if layout == "" {
		layout = st.DesiredLayout
	}
	switch st.Phase {
	case gpupoolv1.PhaseSteady:
		return st.DesiredLayout == layout && st.ActiveLayout == layout
	case gpupoolv1.PhasePaused:
		return p.Spec.Paused && st.DesiredLayout == layout
	}
	return false
}

func cmpLayout(layout string) string {
	if layout == "" {
		return "the wanted layout"
	}
	return layout
}

// Conditions is the pool's conditions on one line, for a failure message.
func Conditions(p *gpupoolv1.GPUPoolProfile) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}
