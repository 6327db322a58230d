package record

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/testpods"
	"github.com/gpupool/gpupool/internal/trace"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

func pod(name string, opts ...testpods.Opt) *corev1.Pod {
	p := testpods.Pod(name, 1, opts...)
	p.UID = types.UID("uid-" + name)
	return p
}

func phase(ph corev1.PodPhase) testpods.Opt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// events are the trace's events as "minute kind pod/outcome/to".
func events(t *testing.T, tr *trace.Trace) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := trace.Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	if _, err := trace.Read(&buf); err != nil {
		t.Fatalf("the recorder's trace does not read back: %v", err)
	}
	var out []string
	for _, ev := range tr.Events {
		what := ev.Pod + ev.Outcome
		if ev.Kind == trace.Switch {
			what = ev.From + ">" + ev.To
			if !ev.Finished.IsZero() {
				what += fmt.Sprintf(" done %d", int(ev.Finished.Sub(t0).Minutes()))
			}
			if ev.Aborted {
				what += " aborted"
			}
		}
		out = append(out, fmt.Sprintf("%d %s %s", int(ev.At.Sub(t0).Minutes()), ev.Kind, what))
	}
	return out
}

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
}

// TestPodsAsSeen: what a pod's changes record, whatever order and repetition the watch
// delivers them in: a pod there before the recording arrived at its start; a pod first
// seen running arrives and starts at once; a pod first seen finished or deleted, or
// asking for no GPU, is not recorded; repeated states record once; a deleted pod ends
// once, and nothing after its end counts.
func TestPodsAsSeen(t *testing.T) {
	r := New(testpods.DayNightPool(), t0, 100)
	r.Pod(at(0), pod("before", testpods.OnNode("n"), phase(corev1.PodRunning)), 1, false)
	r.Pod(at(1), pod("a"), 1, false)
	r.Pod(at(2), pod("a"), 1, false)
	r.Pod(at(3), pod("a", testpods.OnNode("n"), phase(corev1.PodPending)), 1, false)
	r.Pod(at(4), pod("a", testpods.OnNode("n"), phase(corev1.PodRunning)), 1, false)
	r.Pod(at(5), pod("a", testpods.OnNode("n"), phase(corev1.PodRunning)), 1, false)
	r.Pod(at(6), pod("a", testpods.OnNode("n"), phase(corev1.PodFailed)), 1, false)
	r.Pod(at(7), pod("a", testpods.OnNode("n"), phase(corev1.PodFailed)), 1, true)
	r.Pod(at(8), pod("done", phase(corev1.PodSucceeded)), 1, false)
	r.Pod(at(9), pod("gone"), 1, true)
	r.Pod(at(10), pod("cpu"), 0, false)
	r.Pod(at(11), pod("web"), 2, false)
	r.Pod(at(12), pod("web"), 2, true)
	r.Pod(at(13), pod("web"), 2, false) // a stale event after the deletion
	equal(t, events(t, r.Finish(at(20))), []string{
		"0 arrive ml/before", "0 start ml/before", "1 arrive ml/a", "4 start ml/a", "6 end ml/afailed",
		"11 arrive ml/web", "12 end ml/webdeleted",
	})
}

// TestPodFacts: an arrival carries the pod's tenant, GPUs, the layouts whose shapes take
// it, its constraints, whether demand counts it, a Job's and do-not-disrupt.
func TestPodFacts(t *testing.T) {
	pool := testpods.DayNightPool()
	r := New(pool, t0, 100)
	r.Tenant = func(ns string) string { return "team-" + ns }
	p := pod("train", testpods.Selecting("workload", "training"), testpods.Tolerating("training"))
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "j", Controller: new(true)}}
	p.Annotations = map[string]string{gpupoolv1.AnnotationDoNotDisrupt: "true"}
	r.Pod(at(1), p, 3, false)
	ev := r.Finish(at(2)).Events[0]
	if ev.Tenant != "team-ml" || ev.GPUs != 3 || fmt.Sprint(ev.Layouts) != "[night]" || !ev.Job || !ev.DoNotDisrupt || ev.Counts ||
		ev.Constraints == nil || len(ev.Constraints.Tolerations) != 1 {
		t.Fatalf("arrival %+v", ev)
	}
}

// TestMaxPods: beyond maxPods no pod is recorded and the header says so; the pods
// already recorded go on to their end.
func TestMaxPods(t *testing.T) {
	r := New(testpods.DayNightPool(), t0, 2)
	for i := range 5 {
		r.Pod(at(i), pod(fmt.Sprint("p", i)), 1, false)
	}
	r.Pod(at(6), pod("p0"), 1, true)
	tr := r.Finish(at(7))
	if !tr.Header.Truncated {
		t.Error("not marked truncated")
	}
	equal(t, events(t, tr), []string{"0 arrive ml/p0", "1 arrive ml/p1", "6 end ml/p0deleted"})
}

// TestSwitchesAsSeen: the history of the day before the start is kept with its own
// times, older history is not; a transition in flight at the start is recorded from its
// start; a new one starts when first seen and is finished when its record completes, or
// marked aborted when it was aborted or superseded (it made no layout).
func TestSwitchesAsSeen(t *testing.T) {
	pool := testpods.DayNightPool()
	rec := func(id, to string, start, end int, result gpupoolv1.TransitionResult) gpupoolv1.TransitionRecord {
		return gpupoolv1.TransitionRecord{ID: id, To: to, Result: result, StartTime: metav1.NewTime(at(start)), EndTime: metav1.NewTime(at(end))}
	}
	pool.Status.ActiveLayout = "day"
	pool.Status.History = []gpupoolv1.TransitionRecord{
		rec("old", "night", -25*60, -25*60+5, gpupoolv1.TransitionCompleted),
		rec("y", "day", -60, -55, gpupoolv1.TransitionCompleted),
	}
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "inflight", To: "night", StartTime: metav1.NewTime(at(-2))}
	r := New(pool, t0, 10)
	// In flight at the start, completed at 3.
	pool.Status.Transition, pool.Status.ActiveLayout = nil, "night"
	pool.Status.History = append(pool.Status.History, rec("inflight", "night", -2, 3, gpupoolv1.TransitionCompleted))
	r.Pool(at(3), pool)
	// Seen at 10, aborted at 12 (it stays in status.transition until the next).
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "ab", To: "day", StartTime: metav1.NewTime(at(9))}
	r.Pool(at(10), pool)
	pool.Status.History = append(pool.Status.History, rec("ab", "day", 9, 12, gpupoolv1.TransitionAborted))
	r.Pool(at(12), pool)
	// Superseded at 20 by another, which completes at 25.
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "sup", To: "day", StartTime: metav1.NewTime(at(15))}
	r.Pool(at(15), pool)
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "next", To: "day", StartTime: metav1.NewTime(at(20))}
	pool.Status.History = append(pool.Status.History, rec("sup", "day", 15, 20, gpupoolv1.TransitionSuperseded))
	r.Pool(at(20), pool)
	pool.Status.Transition, pool.Status.ActiveLayout = nil, "day"
	pool.Status.History = append(pool.Status.History, rec("next", "day", 20, 25, gpupoolv1.TransitionCompleted))
	r.Pool(at(25), pool)
	r.Pool(at(26), pool) // seen again: nothing changes
	equal(t, events(t, r.Finish(at(30))), []string{
		"-60 switch >day done -55", "-2 switch day>night done 3", "10 switch night>day aborted",
		"15 switch night>day aborted", "20 switch night>day done 25",
	})
}

// TestNamesComeBackAndClocksStepBack: a StatefulSet's replica made anew under its name
// arrives again (the one before ended, its deletion seen or not); a clock stepped back
// records nothing before what is recorded: the trace reads back whatever happened.
func TestNamesComeBackAndClocksStepBack(t *testing.T) {
	r := New(testpods.DayNightPool(), t0, 100)
	old := pod("infer-0")
	r.Pod(at(1), old, 1, false)
	r.Pod(at(2), old, 1, true)
	again := pod("infer-0")
	again.UID = "uid-infer-0-b"
	r.Pod(at(3), again, 1, false)
	third := pod("infer-0") // its predecessor's deletion never seen
	third.UID = "uid-infer-0-c"
	r.Pod(at(5), third, 1, false)
	r.Pod(at(4), pod("late", testpods.OnNode("n"), phase(corev1.PodRunning)), 1, false) // the clock stepped back a minute
	equal(t, events(t, r.Finish(at(3))), []string{
		"1 arrive ml/infer-0", "2 end ml/infer-0deleted", "3 arrive ml/infer-0",
		"5 end ml/infer-0deleted", "5 arrive ml/infer-0", "5 arrive ml/late", "5 start ml/late",
	})
}

// TestAbortedWhileRecording: a transition marked aborted in status.transition is
// recorded aborted then, without waiting for the next transition.
func TestAbortedWhileRecording(t *testing.T) {
	pool := testpods.DayNightPool()
	pool.Status.ActiveLayout = "day"
	r := New(pool, t0, 10)
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "x", To: "night", StartTime: metav1.NewTime(at(1))}
	r.Pool(at(1), pool)
	pool.Status.Transition.AbortedTime = &metav1.Time{Time: at(4)}
	r.Pool(at(4), pool)
	equal(t, events(t, r.Finish(at(5))), []string{"1 switch day>night aborted"})
}

// TestWorkloadsAsHeld: a Workload first seen held arrives (its layouts, GPUs, its Job as
// its group, whether demand selects its namespace); held again it records nothing; no
// longer held it ends, admitted; its pod, of the same Job, carries the same group.
func TestWorkloadsAsHeld(t *testing.T) {
	r := New(testpods.DayNightPool(), t0, 100)
	held := []demand.Held{{Namespace: "ml", Name: "job-train", Layouts: []string{"night"}, GPUs: 2, Owner: "job-uid"},
		{Namespace: "ml", Name: "cpu-only", Layouts: []string{"night"}, Owner: "other"}} // asks no GPU: not recorded
	r.Workloads(at(1), held)
	r.Workloads(at(2), held)
	r.Workloads(at(3), nil)
	p := pod("train-x")
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: new(true)}}
	r.Pod(at(4), p, 2, false)
	tr := r.Finish(at(5))
	equal(t, events(t, tr), []string{"1 arrive workload:ml/job-train", "3 end workload:ml/job-trainadmitted", "4 arrive ml/train-x"})
	if wl, pd := tr.Events[0], tr.Events[2]; !wl.Workload || wl.GPUs != 2 || fmt.Sprint(wl.Layouts) != "[night]" || wl.Group != "job-uid" || pd.Group != "job-uid" {
		t.Errorf("workload %+v, pod %+v", wl, pd)
	}
}
