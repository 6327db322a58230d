package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/testworld"
)

// TestStatusWritesWait runs day -> night -> day with StatusInterval 5 s and the starts
// past the pass, as the manager runs them (the power-ons of each switch held running
// until a pass finds nothing to write, and a pass a second after each pass that left
// its write), and checks after every pass that:
//   - a pass that left its write wrote nothing (the pool's resourceVersion as it was),
//     comes back within the interval, and no change waits longer than the interval:
//     the first pass at or past it writes;
//   - the next pass starts from what the last decided: a metadata write between them
//     (the pool's resourceVersion moves, its status does not) keeps what was left and
//     when; a status another writer changed drops it, and the pass that drops it starts
//     its own wait;
//   - no task id is looked for in vCenter (the starts keep their answers until a write
//     stores them), each operation is asked once, and nothing is left unwritten once a
//     switch is done.
func TestStatusWritesWait(t *testing.T) {
	const interval = 5 * time.Second
	h := newHarness(t, "swt-")
	h.startsBehind = true
	h.statusInterval = interval
	pool := h.dayNight()
	name := pool.Name
	h.clock.SetTime(monday1950)
	h.create(pool)
	left := func() float64 { return testutil.ToFloat64(statusWrites.WithLabelValues(name, "deferred")) }

	var annotated, tampered bool
	resumed := map[string]int{} // passes that went on with what the last one left, by what came between
	switchTo := func(layout string, meddle func(p *gpupoolv1.GPUPoolProfile) string) {
		t.Helper()
		var oldest time.Time // when the oldest change the API server lacks was decided
		between := "nothing"
		// The switch's power-ons run until the passes have nothing new to write: the
		// passes meanwhile find only what the last one left. (Its parks end: the
		// power-ons ahead of them wait for that.)
		h.sim.HoldTasksOf("PowerOnVM_Task")
		held := true
		for i := range 300 {
			before, was, now := h.get(name), left(), h.clock.Now()
			res := h.reconcile(name)
			after := h.get(name)
			if left() == was {
				oldest = time.Time{}
			} else {
				if after.ResourceVersion != before.ResourceVersion {
					t.Errorf("pass %d left its write and wrote the pool (resourceVersion %s -> %s)", i, before.ResourceVersion, after.ResourceVersion)
				}
				if oldest.IsZero() {
					oldest = now
				} else {
					resumed[between]++
				}
				if now.Sub(oldest) >= interval {
					t.Errorf("pass %d at %s left its write: the oldest change left was decided at %s, more than %s before", i, now, oldest, interval)
				}
				if res.RequeueAfter <= 0 || res.RequeueAfter > interval-now.Sub(oldest) {
					t.Errorf("pass %d left its write and comes back after %s, not within what is left of %s", i, res.RequeueAfter, interval)
				}
				switch u := h.rec.unwritten.last(after); {
				case u == nil:
					t.Fatalf("pass %d left its write and nothing is remembered", i)
				case !u.since.Equal(oldest):
					t.Fatalf("pass %d (after %s came between) left its write since %s, want since %s", i, between, u.since, oldest)
				}
				between = meddle(after)
				if between == "status" {
					oldest = time.Time{} // what was left is dropped: the next pass's own wait begins
				}
				// The next pass comes a second later with nothing settled: it starts from
				// what this one left, and leaves it again unless it must write.
				h.clock.Step(time.Second)
				continue
			}
			between = "nothing"
			if held && after.ResourceVersion == before.ResourceVersion {
				h.sim.ReleaseTasks()
				held = false
			}
			h.settle()
			if testworld.Reached(after, layout) {
				if u := h.rec.unwritten.last(after); u != nil {
					t.Errorf("%s reached with a status left unwritten since %s", layout, u.since)
				}
				return
			}
			h.clock.Step(testworld.Step(res))
		}
		t.Fatalf("did not reach %s", layout)
	}

	// Night: a write of the pool's metadata between two passes keeps what was left.
	switchTo("night", func(p *gpupoolv1.GPUPoolProfile) string {
		if annotated {
			return "nothing"
		}
		annotated = true
		before := p.DeepCopy()
		p.Annotations = map[string]string{"example.com/note": "metadata only"}
		h.must(k8s.Patch(h.ctx, p, client.MergeFrom(before)))
		return "metadata"
	})
	h.clock.SetTime(tuesday0750)
	// Day: another writer's change of the status drops it.
	switchTo("day", func(p *gpupoolv1.GPUPoolProfile) string {
		if tampered {
			return "nothing"
		}
		tampered = true
		before := p.DeepCopy()
		p.Status.Progress = "changed by another writer"
		h.must(k8s.Status().Patch(h.ctx, p, client.MergeFrom(before)))
		return "status"
	})
	if !annotated || !tampered || resumed["nothing"] == 0 || resumed["metadata"] == 0 {
		t.Fatalf("the passes did not go on with what the last one left often enough to tell (metadata written: %v, status changed: %v, went on: %v)", annotated, tampered, resumed)
	}
	if p := h.get(name); p.Status.Progress == "changed by another writer" {
		t.Errorf("the other writer's progress stands: %q", p.Status.Progress)
	}
	want := map[string]int{"SuspendVM_Task": 5, "PowerOnVM_Task": 5, "PowerOffVM_Task": 0, "ReconfigVM_Task": 0, "ShutdownGuest": 0}
	for m, n := range h.opCounts() {
		if n != want[m] {
			t.Errorf("%s issued %d times, want %d", m, n, want[m])
		}
	}
	if n := testutil.ToFloat64(execute.IntentsResolved.WithLabelValues(name, "adopted")); n != 0 {
		t.Errorf("%.0f task ids were looked for in vCenter: the starts must keep their answers until a write stores them", n)
	}
	t.Logf("passes that left their write: %.0f, went on with what the last left: %v, writes: %.0f", left(), resumed, testutil.ToFloat64(statusWrites.WithLabelValues(name, "written")))
}
