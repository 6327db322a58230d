package controllers

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

func TestDrainWarnings(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.UTC) // the switch starts (boundary 08:00 - leadTime 10m)
	next := &plan.Boundary{Layout: "day", At: at}
	earlier := at.Add(-3 * time.Minute)
	cases := []struct {
		name      string
		now       time.Time
		next      *plan.Boundary
		horizon   time.Duration
		nextD     []string
		curD      []string
		announced map[string]time.Time
		want      map[string]time.Time
	}{
		{"before the horizon", at.Add(-11 * time.Minute), next, 10 * time.Minute, []string{"a"}, nil, nil, map[string]time.Time{}},
		{"at the horizon", at.Add(-10 * time.Minute), next, 10 * time.Minute, []string{"a", "b"}, nil, nil, map[string]time.Time{"a": at, "b": at}},
		{"inside", at.Add(-time.Second), next, 10 * time.Minute, []string{"a"}, nil, nil, map[string]time.Time{"a": at}},
		{"switch started: its drains keep the time announced", at, next, 10 * time.Minute, nil, []string{"a"}, map[string]time.Time{"a": at}, map[string]time.Time{"a": at}},
		{"drain started unannounced: now", at.Add(time.Minute), nil, 10 * time.Minute, nil, []string{"a"}, nil, map[string]time.Time{"a": at.Add(time.Minute)}},
		{"drain started earlier than announced: now", earlier, nil, 10 * time.Minute, nil, []string{"a"}, map[string]time.Time{"a": at}, map[string]time.Time{"a": earlier}},
		{"drained: no warning", at.Add(time.Minute), nil, 10 * time.Minute, nil, nil, map[string]time.Time{"a": at}, map[string]time.Time{}},
		{"cancelled (no next switch)", at.Add(-time.Minute), nil, 10 * time.Minute, []string{"a"}, nil, map[string]time.Time{"a": at}, map[string]time.Time{}},
		{"warnAhead 0: none", at.Add(-time.Second), next, 0, []string{"a"}, nil, nil, map[string]time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := drainWarnings(c.now, c.next, c.horizon, c.nextD, c.curD, c.announced)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("drainWarnings = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWarnAhead(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	cases := []struct {
		sc   *gpupoolv1.Schedule
		want time.Duration
	}{
		{nil, plan.DefaultWarnAhead},
		{&gpupoolv1.Schedule{}, plan.DefaultWarnAhead},
		{&gpupoolv1.Schedule{LeadTime: d(0)}, plan.DefaultWarnAhead},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute)}, 20 * time.Minute},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute), WarnAhead: d(time.Hour)}, time.Hour},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute), WarnAhead: d(0)}, 0},
	}
	for i, c := range cases {
		if got := plan.WarnAhead(&gpupoolv1.GPUPoolProfileSpec{Schedule: c.sc}); got != c.want {
			t.Errorf("%d: warnAhead = %s, want %s", i, got, c.want)
		}
	}
}

func TestPodChanged(t *testing.T) {
	pod := func(phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}, Status: corev1.PodStatus{Phase: phase}}
	}
	dnd := map[string]string{AnnotationDoNotDisrupt: "true"}
	off := map[string]string{AnnotationDoNotDisrupt: "false"}
	other := map[string]string{"x": "y"}
	phases := []corev1.PodPhase{"", corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}
	anns := []map[string]string{nil, dnd, off, other}
	done := func(ph corev1.PodPhase) bool { return ph == corev1.PodSucceeded || ph == corev1.PodFailed }
	for _, po := range phases {
		for _, pn := range phases {
			for _, ao := range anns {
				for _, an := range anns {
					want := (done(pn) && !done(po)) || ao[AnnotationDoNotDisrupt] != an[AnnotationDoNotDisrupt]
					got := podUpdateMatters(pod(po, ao), pod(pn, an))
					if got != want {
						t.Errorf("phase %q->%q, annotations %v->%v: update passes %v, want %v", po, pn, ao, an, got, want)
					}
				}
			}
		}
	}
}

func TestWarningDue(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.UTC)
	next := &plan.Boundary{Layout: "day", At: at}
	h := 10 * time.Minute
	cases := []struct {
		name string
		now  time.Time
		next *plan.Boundary
		due  bool
		at   time.Time
		want bool
	}{
		{"switch under way: kept", at.Add(time.Hour), nil, true, at, true},
		{"next switch, window open: kept", at.Add(-time.Minute), next, false, at, true},
		{"next switch, at the horizon: kept", at.Add(-h), next, false, at, true},
		{"next switch, before the horizon: withdrawn", at.Add(-h - time.Second), next, false, at, false},
		{"switch time passed, none under way: withdrawn", at, next, false, at, false},
		{"announces another time: withdrawn", at.Add(-time.Minute), next, false, at.Add(time.Hour), false},
		{"no next switch: withdrawn", at.Add(-time.Minute), nil, false, at, false},
	}
	for _, c := range cases {
		if got := warningDue(c.now, c.next, h, c.due, c.at); got != c.want {
			t.Errorf("%s: warningDue = %v, want %v", c.name, got, c.want)
		}
	}
	if warningDue(at.Add(-time.Minute), next, 0, false, at) {
		t.Error("warnAhead 0: no warning stands")
	}
}
