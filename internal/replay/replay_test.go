package replay

import (
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/trace"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func mins(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Minute} }

// pool is a day/night pool: day four grid_p100-4q VMs on one 16 GB P100 (4 GPUs for
// pods, 1 GPU-equivalent), night one grid_p100-16q (1 GPU, 1 equivalent), labelled and
// tainted for training; night is brought in by 5 minutes of pending training and let go
// after 15 idle minutes. No schedule windows: day is the default.
func pool() *gpupoolv1.GPUPoolProfileSpec {
	s := &gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day",
		Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "night",
			NodeLabels: map[string]string{"lab.example/workload": "training"},
			NodeTaints: []corev1.Taint{{Key: "lab.example/training", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}},
		Schedule: &gpupoolv1.Schedule{TimeZone: "UTC"},
		Demand: &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{},
			Rules:    []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn, MinGPUs: ptr.To(int32(1)), For: mins(5), IdleFor: mins(15)}},
			MinDwell: mins(0), Cooldown: mins(0)},
	}
	for _, vm := range []string{"a", "b", "c", "d"} {
		s.Layouts[0].Workers = append(s.Layouts[0].Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
	}
	s.Layouts[1].Workers = []gpupoolv1.Worker{{VM: "a", Profile: "grid_p100-16q"}}
	return s
}

// training is a Job's pod that only night's nodes take.
func training() *trace.Constraints {
	return &trace.Constraints{NodeSelector: map[string]string{"lab.example/workload": "training"},
		Tolerations: []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}
}

// handTrace: from 08:00 to 12:00 on day, one training pod arrives at 08:10 asking for one
// GPU; it ran for an hour in the recording.
func handTrace(spec *gpupoolv1.GPUPoolProfileSpec) *trace.Trace {
	return &trace.Trace{Header: trace.Header{Pool: "lab", Start: t0, End: t0.Add(4 * time.Hour), Active: "day", Spec: *spec},
		Events: []trace.Event{
			{At: t0.Add(10 * time.Minute), Kind: trace.Arrive, Pod: "ml/train", GPUs: 1, Layouts: []string{"night"}, Constraints: training(), Job: true, Counts: true},
			{At: t0.Add(60 * time.Minute), Kind: trace.Start, Pod: "ml/train"},
			{At: t0.Add(120 * time.Minute), Kind: trace.End, Pod: "ml/train", Outcome: trace.Succeeded},
		}}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestReplayByHand: the hand trace under the pool, a decision a minute and switches of
// 6 minutes, worked out by hand: the pod pending from 08:10 brings night in at 08:15
// (for 5m); night is up at 08:21 and the pod starts then, running its hour in the 60
// steps 08:21-09:20; night is idle from 09:21 and let go at 09:36 (idleFor 15m); day is
// back at 09:42. The pod waited 08:10-08:20 (11 steps): 11/60 GPU-hours, 11 minutes.
// Idle (1 physical GPU): 15 steps of day, 6 switching, 15 of idle night, 6 switching
// and 138 of day after: 180 minutes.
func TestReplayByHand(t *testing.T) {
	spec := pool()
	res, err := Run(handTrace(spec), spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := []Switch{
		{From: "day", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: t0.Add(15 * time.Minute), End: t0.Add(21 * time.Minute)},
		{From: "night", To: "day", Start: t0.Add(96 * time.Minute), End: t0.Add(102 * time.Minute)},
	}
	if len(res.Switches) != len(want) {
		t.Fatalf("switches %+v, want %+v", res.Switches, want)
	}
	for i, w := range want {
		g := res.Switches[i]
		if g.From != w.From || g.To != w.To || !g.Start.Equal(w.Start) || !g.End.Equal(w.End) || (w.Reason != "" && g.Reason != w.Reason) {
			t.Errorf("switch %d: %+v, want %+v", i, g, w)
		}
	}
	if !near(res.QueuedGPUHours, 11.0/60) || res.MeanWait() != 11*time.Minute || len(res.Waits) != 1 || res.Unstarted != 0 {
		t.Errorf("queued %.4f GPU-h, waits %v, unstarted %d; want 11/60, [11m], 0", res.QueuedGPUHours, res.Waits, res.Unstarted)
	}
	if !near(res.IdleGPUHours, 180.0/60) {
		t.Errorf("idle %.4f GPU-h, want 180/60", res.IdleGPUHours)
	}
	if res.Evictions != 0 || res.UnservedGPUHours != 0 {
		t.Errorf("evictions %d, services waited %.3f; want none", res.Evictions, res.UnservedGPUHours)
	}
}

// TestReplayServicesAndEvictions: a service (a Deployment's pod, no recorded end of its
// own) running on day holds night off as demand's maxEvictions (default 0) says; with
// maxEvictions 1 it is evicted by the switch to night, waits while night is active
// (services waited GPU-hours) and runs again when day is back; do-not-disrupt holds the
// switch whatever maxEvictions allows.
func TestReplayServicesAndEvictions(t *testing.T) {
	spec := pool()
	tr := handTrace(spec)
	tr.Events = append([]trace.Event{{At: t0, Kind: trace.Arrive, Pod: "serve/web", GPUs: 1, Layouts: []string{"day"}, Counts: true},
		{At: t0, Kind: trace.Start, Pod: "serve/web"}}, tr.Events...)
	if res, err := Run(tr, spec, Options{Step: time.Minute}); err != nil || len(res.Switches) != 0 || res.Unstarted != 1 {
		t.Fatalf("maxEvictions 0: %+v, %v; want no switch and the training pod never started", res, err)
	}
	spec.Demand.MaxEvictions = ptr.To(int32(1))
	res, err := Run(tr, spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) != 2 || res.Evictions != 1 || res.Switches[0].Evictions != 1 {
		t.Fatalf("switches %+v, evictions %d; want two, the first evicting the service", res.Switches, res.Evictions)
	}
	// Away from day from 08:15 to 09:42: 87 steps.
	if !near(res.UnservedGPUHours, 87.0/60) {
		t.Errorf("services waited %.4f GPU-h, want 87/60", res.UnservedGPUHours)
	}

	tr.Events[0].DoNotDisrupt = true
	held, err := Run(tr, spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(held.Switches) != 0 || held.Unstarted != 1 || !near(held.QueuedGPUHours, 230.0/60) {
		t.Errorf("with a do-not-disrupt service: switches %+v, unstarted %d, queued %.3f; want none, the pod never started, queued 08:10-12:00", held.Switches, held.Unstarted, held.QueuedGPUHours)
	}
}

// TestReplayCandidateMatchesConstraints: a candidate that renames night "big" (same
// labels and taints) still serves the recorded pod, by its constraints; one whose night
// nodes lose the label serves it nowhere, and the pod never starts.
func TestReplayCandidateMatchesConstraints(t *testing.T) {
	live := pool()
	tr := handTrace(live)
	renamed := pool()
	renamed.Layouts[1].Name = "big"
	renamed.Demand.Rules[0].Layout = "big"
	res, err := Run(tr, renamed, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) == 0 || res.Switches[0].To != "big" || res.Unstarted != 0 {
		t.Fatalf("renamed: switches %+v, unstarted %d; want big brought in and the pod run", res.Switches, res.Unstarted)
	}
	unlabelled := pool()
	unlabelled.Layouts[1].NodeLabels = nil
	res, err = Run(tr, unlabelled, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) != 0 || res.Unstarted != 1 {
		t.Fatalf("unlabelled: switches %+v, unstarted %d; want none and the pod never started", res.Switches, res.Unstarted)
	}
}

// TestSwitchTimesLearned: the median of the completed switches per target layout, the
// overall median for a layout with none, DefaultSwitchTime with none at all; aborted and
// unfinished switches teach nothing; a fixed time wins.
func TestSwitchTimesLearned(t *testing.T) {
	sw := func(to string, start, took time.Duration, aborted bool) trace.Event {
		ev := trace.Event{At: t0.Add(start), Kind: trace.Switch, To: to, Aborted: aborted}
		if took > 0 {
			ev.Finished = ev.At.Add(took)
		}
		return ev
	}
	tr := &trace.Trace{Header: trace.Header{Start: t0, End: t0.Add(time.Hour)}, Events: []trace.Event{
		sw("night", 0, 3*time.Minute, false), sw("night", time.Minute, 5*time.Minute, false), sw("night", 2*time.Minute, 9*time.Minute, false),
		sw("day", 3*time.Minute, 2*time.Minute, false), sw("day", 4*time.Minute, time.Hour, true), sw("day", 5*time.Minute, 0, false),
	}}
	by, other := learnSwitchTimes(tr, 0)
	if by["night"] != 5*time.Minute || by["day"] != 2*time.Minute || other != 3*time.Minute {
		t.Errorf("learned %v, others %s; want night 5m, day 2m, others 3m (median of 2, 3, 5, 9 rounded down)", by, other)
	}
	if _, other := learnSwitchTimes(&trace.Trace{}, 0); other != DefaultSwitchTime {
		t.Errorf("no switches: %s, want %s", other, DefaultSwitchTime)
	}
	if by, other := learnSwitchTimes(tr, time.Minute); len(by) != 0 || other != time.Minute {
		t.Errorf("fixed: %v %s", by, other)
	}
}

// TestReplayRefuses: what the replay cannot model is an error that says what to do,
// never a silent result.
func TestReplayRefuses(t *testing.T) {
	count := pool()
	count.Demand.Rules[0].CountFromDemand = &gpupoolv1.CountFromDemand{Min: 1, Max: 2}
	selected := pool()
	selected.Layouts[1].Workers = nil
	selected.Layouts[1].Select = &gpupoolv1.Selection{Profile: "grid_p100-16q"}
	for _, c := range []struct {
		name string
		spec *gpupoolv1.GPUPoolProfileSpec
		opt  Options
		want string
	}{
		{"countFromDemand", count, Options{}, "spec.demand.rules[0].countFromDemand"},
		{"a layout of selected VMs, no capacity recorded", selected, Options{}, "spec.layouts[1] (night): its capacity"},
		{"a negative step", pool(), Options{Step: -time.Second}, "give a positive step"},
	} {
		if _, err := Run(handTrace(pool()), c.spec, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestDivergence: the first switch either has that the other has not, or that goes
// elsewhere, or starts further than the tolerance away.
func TestDivergence(t *testing.T) {
	a := []Switch{{To: "night", Start: t0}, {To: "day", Start: t0.Add(time.Hour)}}
	if _, _, _, ok := Divergence(a, a, 0); ok {
		t.Error("a sequence diverges from itself")
	}
	later := []Switch{{To: "night", Start: t0.Add(20 * time.Second)}, a[1]}
	if _, _, _, ok := Divergence(later, a, 30*time.Second); ok {
		t.Error("20 s apart diverges within 30 s")
	}
	if at, g, r, ok := Divergence(later, a, 10*time.Second); !ok || !at.Equal(t0) || g != &later[0] || r != &a[0] {
		t.Errorf("20 s apart within 10 s: %v %v %v %v", at, g, r, ok)
	}
	if at, g, r, ok := Divergence(a[:1], a, 0); !ok || g != nil || r != &a[1] || !at.Equal(a[1].Start) {
		t.Errorf("one missing: %v %v %v %v", at, g, r, ok)
	}
	other := []Switch{a[0], {To: "big", Start: a[1].Start}}
	if _, g, _, ok := Divergence(other, a, time.Hour); !ok || g.To != "big" {
		t.Error("another layout is no divergence")
	}
}

// TestReplaySwitchInFlightAtStart: a switch recorded in flight when the recording
// started goes on in the replay until it ended: night comes up at 08:03 as recorded, the
// training pod runs then, and the replay reports no switch of its own to night.
func TestReplaySwitchInFlightAtStart(t *testing.T) {
	spec := pool()
	tr := handTrace(spec)
	tr.Events = append([]trace.Event{{At: t0.Add(-2 * time.Minute), Kind: trace.Switch, From: "day", To: "night", Reason: gpupoolv1.DesiredByDemand,
		Finished: t0.Add(3 * time.Minute)}}, tr.Events...)
	res, err := Run(tr, spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) == 0 || res.Switches[0].To != "day" || len(res.Waits) != 1 || res.Waits[0] != 0 {
		t.Fatalf("switches %+v, waits %v; want night up from 08:03 (the pod starts on arrival at 08:10) and a switch back to day first", res.Switches, res.Waits)
	}
	if got := Recorded(tr); len(got) != 0 {
		t.Errorf("the switch before the start is history, not recorded in the period: %+v", got)
	}
}

// TestReplayWorkloads: a Kueue Workload held for night waits (queued, no GPU) until the
// replay's night is ready, then is admitted, and its pod, recorded a minute after the
// recorded admission, arrives a minute after the replay's and runs its half hour: the
// Workload arrives 08:10, night is brought in at 08:15 and ready at 08:21 (admitted,
// waited 11 minutes), its pod arrives at 08:22 and runs 08:22-08:51, night is let go at
// 09:07. Without demand the Workload is never admitted and its pod never arrives.
func TestReplayWorkloads(t *testing.T) {
	spec := pool()
	tr := &trace.Trace{Header: trace.Header{Pool: "lab", Start: t0, End: t0.Add(4 * time.Hour), Active: "day", Spec: *spec},
		Events: []trace.Event{
			{At: t0.Add(10 * time.Minute), Kind: trace.Arrive, Pod: "workload:ml/job-train", GPUs: 1, Layouts: []string{"night"}, Workload: true, Job: true, Group: "job-uid", Counts: true},
			{At: t0.Add(40 * time.Minute), Kind: trace.End, Pod: "workload:ml/job-train", Outcome: trace.Admitted},
			{At: t0.Add(41 * time.Minute), Kind: trace.Arrive, Pod: "ml/train-x", GPUs: 1, Layouts: []string{"night"}, Constraints: training(), Job: true, Group: "job-uid", Counts: true},
			{At: t0.Add(42 * time.Minute), Kind: trace.Start, Pod: "ml/train-x"},
			{At: t0.Add(72 * time.Minute), Kind: trace.End, Pod: "ml/train-x", Outcome: trace.Succeeded},
		}}
	res, err := Run(tr, spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) != 2 || !res.Switches[0].Start.Equal(t0.Add(15*time.Minute)) || !res.Switches[1].Start.Equal(t0.Add(67*time.Minute)) {
		t.Fatalf("switches %+v; want night at 08:15 and day at 09:07", res.Switches)
	}
	if len(res.Waits) != 2 || res.Waits[0] != 11*time.Minute || res.Waits[1] != 0 || !near(res.QueuedGPUHours, 11.0/60) || res.Unstarted != 0 {
		t.Errorf("waits %v, queued %.4f, unstarted %d; want the Workload's 11m and its pod's 0, 11/60 GPU-h", res.Waits, res.QueuedGPUHours, res.Unstarted)
	}
	none := pool()
	none.Demand = nil
	res, err = Run(tr, none, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) != 0 || res.Unstarted != 1 || len(res.Waits) != 0 || !near(res.QueuedGPUHours, 230.0/60) {
		t.Errorf("without demand: switches %+v, unstarted %d, waits %v, queued %.3f; want the Workload waiting 08:10-12:00 and no pod", res.Switches, res.Unstarted, res.Waits, res.QueuedGPUHours)
	}
}

// TestReplayWorkloadMemberLeaves: a Workload's pod that left in the recording (a service
// deleted nine minutes after it came) leaves nine minutes after the replay brings it:
// admitted at 08:21, it arrives at 08:22 and leaves at 08:31, night is idle from then
// and let go at 08:46.
func TestReplayWorkloadMemberLeaves(t *testing.T) {
	spec := pool()
	tr := &trace.Trace{Header: trace.Header{Pool: "lab", Start: t0, End: t0.Add(4 * time.Hour), Active: "day", Spec: *spec},
		Events: []trace.Event{
			{At: t0.Add(10 * time.Minute), Kind: trace.Arrive, Pod: "workload:ml/serve", GPUs: 1, Layouts: []string{"night"}, Workload: true, Group: "rs-uid", Counts: true},
			{At: t0.Add(40 * time.Minute), Kind: trace.End, Pod: "workload:ml/serve", Outcome: trace.Admitted},
			{At: t0.Add(41 * time.Minute), Kind: trace.Arrive, Pod: "ml/serve-x", GPUs: 1, Layouts: []string{"night"}, Group: "rs-uid", Counts: true},
			{At: t0.Add(50 * time.Minute), Kind: trace.End, Pod: "ml/serve-x", Outcome: trace.Deleted},
		}}
	res, err := Run(tr, spec, Options{Step: time.Minute, SwitchTime: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Switches) != 2 || !res.Switches[1].Start.Equal(t0.Add(46*time.Minute)) {
		t.Fatalf("switches %+v; want night let go at 08:46", res.Switches)
	}
}
