package localenv

import (
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The demos' timeline prints a line only when what it says changed: the pool's line,
// a layout once it is Steady, a worker's step (not its message while waiting for its
// node, unless what it waits for changes), and nothing for a worker with no step.
func TestDemoLogPrintsChangesOnly(t *testing.T) {
	var out strings.Builder
	log := newDemoLog(&out)
	r := &demoRun{log: log, res: &DemoResult{}}
	steady := &gpupoolv1.GPUPoolProfileStatus{Phase: gpupoolv1.PhaseSteady, ActiveLayout: "day"}
	waiting := func(msg string) []gpupoolv1.WorkerStatus {
		return []gpupoolv1.WorkerStatus{
			{VM: "gpu-day-1"},
			{VM: "gpu-night-1", Step: gpupoolv1.StepWaitNodeReady, Message: msg},
		}
	}

	log.sayChanged(&log.line, "pool daynight: phase Steady", "%s")
	log.sayChanged(&log.line, "pool daynight: phase Steady", "%s")
	var layouts []string
	layouts = log.noteActive(layouts, steady)
	layouts = log.noteActive(layouts, steady)
	log.sayWorkers(waiting("node NotReady (3s)"), r.stepKey)
	log.sayWorkers(waiting("node NotReady (4s)"), r.stepKey)
	log.sayWorkers(waiting("node has no nvidia.com/gpu (5s)"), r.stepKey)
	// Without a key function (the demand demo), only the step counts.
	plain := newDemoLog(&out)
	plain.sayWorkers(waiting("node NotReady (6s)"), nil)
	plain.sayWorkers(waiting("node has no nvidia.com/gpu (7s)"), nil)

	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		_, text, ok := strings.Cut(l, "] ")
		if !ok || !strings.HasPrefix(l, "[") {
			t.Fatalf("line %q has no time stamp", l)
		}
		got = append(got, text)
	}
	want := []string{
		"pool daynight: phase Steady",
		"*** layout day is active",
		"  gpu-night-1  WaitNodeReady        node NotReady (3s)",
		"  gpu-night-1  WaitNodeReady        node has no nvidia.com/gpu (5s)",
		"  gpu-night-1  WaitNodeReady        node NotReady (6s)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(layouts, ",") != "day" {
		t.Errorf("layouts %v, want [day]", layouts)
	}
	if strings.Join(r.res.WaitedForGPUs, ",") != "gpu-night-1" {
		t.Errorf("WaitedForGPUs %v, want [gpu-night-1]", r.res.WaitedForGPUs)
	}
}
