package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
)

// TestDescribeDemand: a pool that demand moved says why in its Wanted line, and shows
// per layout what is pending, what runs, since when, and what a switch would evict.
func TestDescribeDemand(t *testing.T) {
	now := testclock.Base()
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }
	since := at(-7 * time.Minute)
	p := &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day", Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "night"}},
			Demand: &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}},
		Status: gpupoolv1.GPUPoolProfileStatus{
			ActiveLayout: "day", DesiredLayout: "night", DesiredReason: gpupoolv1.DesiredByDemand, Phase: gpupoolv1.PhaseTransitioning,
			Transition: &gpupoolv1.TransitionStatus{ID: "night-1", From: "day", To: "night", StartTime: at(-time.Minute),
				Reason: gpupoolv1.DesiredByDemand, Cause: "demand: brings layout night in (demand.rules[0]): 1 pods pending for it request 2 GPUs since ... (pod ml/train-1)"},
			Demand: &gpupoolv1.DemandStatus{
				Message: "demand switches to layout night: brings layout night in",
				Budget:  &gpupoolv1.DemandBudget{Used: 4, Max: 4, NextAt: &since},
				Layouts: []gpupoolv1.LayoutDemand{
					{Layout: "day", RunningGPUs: 3},
					{Layout: "night", PendingPods: 1, PendingGPUs: 2, Pods: []string{"pod ml/train-1"}, PendingSince: &since, Evictions: 3, DoNotDisrupt: 1},
				},
			},
		},
	}
	got := describeAt(t, p, now)
	for _, want := range []string{
		"Wanted:", "night (demand: brings layout night in", "pod ml/train-1)",
		"Demand:", "demand switches to layout night",
		"night", "1 pods, 2 GPUs", "pending for 7m", "3 GPU pods, 1 do-not-disrupt",
		"Switch budget: 4 of 4 switches in 24h", "kubectl gpupool reset-budget lab resets it",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output does not say %q:\n%s", want, got)
		}
	}
}

// TestDescribeCountSteps: a layout by count sized by demand shows its count where it
// names the layout (now, the step in flight, history) and the step announced ahead.
func TestDescribeCountSteps(t *testing.T) {
	now := testclock.Base()
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }
	p := &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day", Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "night", Convert: &gpupoolv1.Conversion{Base: "day", Count: 4, Profile: "grid_p100-16q"}}},
			Demand: &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
				CountFromDemand: &gpupoolv1.CountFromDemand{Min: 1, Max: 4}}}}},
		Status: gpupoolv1.GPUPoolProfileStatus{
			ActiveLayout: "night", ActiveCount: 1, DesiredLayout: "night", DesiredReason: gpupoolv1.DesiredByDemand, Phase: gpupoolv1.PhaseTransitioning,
			Transition: &gpupoolv1.TransitionStatus{ID: "night-2", From: "night", FromCount: 1, To: "night", Count: 3, StartTime: at(-time.Minute), Reason: gpupoolv1.DesiredByDemand},
			Demand:     &gpupoolv1.DemandStatus{Step: &gpupoolv1.CountStep{Layout: "night", From: 3, To: 4, DecidedTime: at(-time.Minute), At: at(9 * time.Minute), Message: "steps layout night from 3 to 4"}},
			History:    []gpupoolv1.TransitionRecord{{ID: "night-1", From: "day", To: "night", Count: 1, Reason: gpupoolv1.DesiredByDemand, StartTime: at(-time.Hour), EndTime: at(-50 * time.Minute), Result: gpupoolv1.TransitionCompleted}},
		},
	}
	got := describeAt(t, p, now)
	for _, want := range []string{
		"Layout now:", "night (1 GPU)", "night (1 GPU) -> night (3 GPUs)",
		"Announced: step of night from 3 to 4 GPUs converted", "steps layout night from 3 to 4",
		"day", "night (1 GPU)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output does not say %q:\n%s", want, got)
		}
	}
}

// TestSinceCondAllowsForClockOffset: a condition's time is stamped by the operator's
// clock; with this machine's clock behind it, it still reads as past, never "in 5m";
// with this clock ahead, it reads as that long ago.
func TestSinceCondAllowsForClockOffset(t *testing.T) {
	stamped := testclock.Base()
	c := metav1.Condition{LastTransitionTime: metav1.NewTime(stamped)}
	for _, tc := range []struct {
		offset time.Duration // this machine's clock minus the operator's
		want   string
	}{{-5 * time.Minute, "now"}, {0, "now"}, {5 * time.Minute, "5m ago"}} {
		if got := sinceCond(c, false, screen{loc: time.UTC, now: stamped.Add(tc.offset)}); got != tc.want {
			t.Errorf("clock offset %s: %q, want %q", tc.offset, got, tc.want)
		}
	}
}

// TestTimelineShowsConvertedGPUs: the timeline names how many GPUs a layout by count
// converts: its count, or the range demand sizes it within; a layout with workers
// shows none.
func TestTimelineShowsConvertedGPUs(t *testing.T) {
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{{Name: "day"},
		{Name: "night", Convert: &gpupoolv1.Conversion{Base: "day", Count: 4, Profile: "grid_p100-16q"}}}}
	for _, tc := range []struct {
		layout, want string
		demand       *gpupoolv1.DemandPolicy
	}{
		{layout: "day", want: ""},
		{layout: "night", want: "4"},
		{layout: "night", want: "1-3 by demand", demand: &gpupoolv1.DemandPolicy{Rules: []gpupoolv1.DemandRule{
			{Layout: "night", Action: gpupoolv1.DemandBringIn, CountFromDemand: &gpupoolv1.CountFromDemand{Min: 1, Max: 3}}}}},
		{layout: "night", want: "4", demand: &gpupoolv1.DemandPolicy{Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}},
	} {
		spec.Demand = tc.demand
		if got := convertedGPUs(spec, tc.layout); got != tc.want {
			t.Errorf("%s with demand %v: %q, want %q", tc.layout, tc.demand != nil, got, tc.want)
		}
	}
}

// describeAt is what kubectl gpupool status prints of the pool at now, in Europe/Berlin.
func describeAt(t *testing.T, p *gpupoolv1.GPUPoolProfile, now time.Time) string {
	t.Helper()
	var out bytes.Buffer
	a := newApp(genericiooptions.IOStreams{Out: &out, ErrOut: &out}, func() time.Time { return now })
	a.tz = "Europe/Berlin"
	if err := a.describe(&out, p, false); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
