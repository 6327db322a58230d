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

// fatalT records Fatalf and stops the loop by panicking, which the test recovers.
type fatalT struct {
	testing.TB
	msg string
}

type fatal struct{}

func (t *fatalT) Helper() {}
func (t *fatalT) Fatalf(format string, args ...any) {
	t.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

// converge runs Loop.Converge over a scripted pool: pass i leaves the status of
// statuses[min(i, len-1)] and asks to come back after requeue.
func converge(t *testing.T, layout string, passes int, requeue time.Duration, statuses ...gpupoolv1.GPUPoolProfileStatus) (p *gpupoolv1.GPUPoolProfile, msg string, clock *clocktesting.FakeClock, settled int) {
	start := time.Date(2026, 11, 30, 7, 0, 0, 0, Berlin)
	clock = clocktesting.NewFakeClock(start)
	ft := &fatalT{TB: t}
	n := 0
	cur := &gpupoolv1.GPUPoolProfile{}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(fatal); !ok {
				panic(v)
			}
			msg = ft.msg
		}
	}()
	p = Loop{T: ft, Clock: clock,
		Reconcile: func() ctrl.Result {
			cur.Status = statuses[min(n, len(statuses)-1)]
			n++
			return ctrl.Result{RequeueAfter: requeue}
		},
		Settle: func() { settled++ },
		Get:    func() *gpupoolv1.GPUPoolProfile { return cur.DeepCopy() },
	}.Converge(layout, passes)
	return p, msg, clock, settled
}

func TestConverge(t *testing.T) {
	moving := gpupoolv1.GPUPoolProfileStatus{Phase: gpupoolv1.PhaseTransitioning, DesiredLayout: "night", ActiveLayout: "day"}
	steady := gpupoolv1.GPUPoolProfileStatus{Phase: gpupoolv1.PhaseSteady, DesiredLayout: "night", ActiveLayout: "night"}
	blocked := gpupoolv1.GPUPoolProfileStatus{Phase: gpupoolv1.PhaseBlocked, DesiredLayout: "night", ActiveLayout: "day"}

	p, msg, clock, settled := converge(t, "night", 10, time.Minute, moving, moving, steady)
	if p == nil || msg != "" || settled != 3 {
		t.Fatalf("reached: pool %v, message %q, settled %d times", p, msg, settled)
	}
	// Two passes before the steady one, each stepping the clock by at most MaxStep.
	if got := clock.Since(time.Date(2026, 11, 30, 7, 0, 0, 0, Berlin)); got != 2*MaxStep {
		t.Errorf("clock moved %s, want %s", got, 2*MaxStep)
	}
	if _, msg, _, _ := converge(t, "night", 10, 0, moving, blocked); !strings.Contains(msg, "pool blocked on the way to night") {
		t.Errorf("blocked: message %q", msg)
	}
	_, msg, clock, _ = converge(t, "night", 5, 0, moving)
	if !strings.Contains(msg, "did not converge to night after 5 passes: phase Transitioning") {
		t.Errorf("not reached: message %q", msg)
	}
	if got := clock.Since(time.Date(2026, 11, 30, 7, 0, 0, 0, Berlin)); got != 5*MinStep {
		t.Errorf("clock moved %s after five passes that asked for no delay, want %s", got, 5*MinStep)
	}
}

func TestReached(t *testing.T) {
	for _, c := range []struct {
		phase           gpupoolv1.Phase
		paused          bool
		desired, active string
		layout          string
		want            bool
	}{
		{gpupoolv1.PhaseSteady, false, "day", "day", "day", true},
		{gpupoolv1.PhaseSteady, false, "day", "day", "", true},
		{gpupoolv1.PhaseSteady, false, "day", "day", "night", false},
		{gpupoolv1.PhaseSteady, false, "night", "day", "day", false},
		{gpupoolv1.PhaseTransitioning, false, "night", "day", "night", false},
		{gpupoolv1.PhasePaused, true, "day", "night", "day", true},
		{gpupoolv1.PhasePaused, false, "day", "day", "day", false},
		{gpupoolv1.PhaseBlocked, false, "day", "day", "day", false},
	} {
		p := &gpupoolv1.GPUPoolProfile{Spec: gpupoolv1.GPUPoolProfileSpec{Paused: c.paused},
			Status: gpupoolv1.GPUPoolProfileStatus{Phase: c.phase, DesiredLayout: c.desired, ActiveLayout: c.active}}
		if got := Reached(p, c.layout); got != c.want {
			t.Errorf("%+v: Reached = %v", c, got)
		}
	}
}

func TestStep(t *testing.T) {
	for _, c := range []struct{ requeue, want time.Duration }{
		{0, MinStep}, {300 * time.Millisecond, MinStep}, {3 * time.Second, 3 * time.Second}, {time.Hour, MaxStep},
	} {
		if got := Step(ctrl.Result{RequeueAfter: c.requeue}); got != c.want {
			t.Errorf("Step(%s) = %s, want %s", c.requeue, got, c.want)
		}
	}
}
