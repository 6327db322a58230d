package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
)

// TestDescribeKueue: status shows, for a pool with spec.kueue, the Workloads gpupool's
// check holds, and per flavor its layout, the quota gpupool sets now and when and to
// what it changes next; a paused pool says that nothing is set; a pool whose spec.kueue
// was removed says that its checks are being released; a pool without Kueue shows no
// section.
func TestDescribeKueue(t *testing.T) {
	now := testclock.Base()
	gpus := func(n string) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}
	}
	switchAt := metav1.NewTime(now.Add(9*time.Hour + 50*time.Minute))
	pool := func() *gpupoolv1.GPUPoolProfile {
		return &gpupoolv1.GPUPoolProfile{
			ObjectMeta: metav1.ObjectMeta{Name: "lab"},
			Spec: gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "night", Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "night"}},
				Schedule: &gpupoolv1.Schedule{TimeZone: "Europe/Berlin", WarnAhead: &metav1.Duration{Duration: 10 * time.Minute}},
				Kueue: &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
					{Name: "day-p100-4q", Layout: "day", Quota: gpus("4")},
					{Name: "night-p100-16q", Layout: "night", Quota: gpus("2"), WaitingQuota: gpus("1")},
				}}},
			Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day", DesiredLayout: "day", Phase: gpupoolv1.PhaseSteady,
				NextTransition: &gpupoolv1.NextTransition{Layout: "night", At: switchAt},
				Kueue:          &gpupoolv1.KueueStatus{HeldWorkloads: 2}},
		}
	}
	describe := func(p *gpupoolv1.GPUPoolProfile) string {
		var out bytes.Buffer
		a := newApp(genericiooptions.IOStreams{Out: &out, ErrOut: &out}, func() time.Time { return now })
		a.tz = "Europe/Berlin"
		if err := a.describe(&out, p, false); err != nil {
			t.Fatal(err)
		}
		return squeeze(out.String())
	}
	sc := screen{loc: berlin, now: now}
	drops := sc.at(switchAt.Add(-10 * time.Minute))
	for _, tc := range []struct {
		name   string
		change func(*gpupoolv1.GPUPoolProfile)
		want   []string
		not    []string
	}{
		{"day ready", nil, []string{
			"Kueue:", "Held Workloads: 2 (gpupool's AdmissionCheck gpupool.dev/layout keeps them Pending",
			"Quota in the ClusterQueues labelled gpupool.dev/pool=lab:",
			"FLAVOR LAYOUT QUOTA NOW NEXT CHANGE",
			"day-p100-4q day nvidia.com/gpu=4 nvidia.com/gpu=0 at " + drops + " (warnAhead before layout day is left)",
			"night-p100-16q night nvidia.com/gpu=1 nvidia.com/gpu=2 once layout night is active and ready for work",
		}, []string{"paused"}},
		{"within warnAhead", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.NextTransition.At = metav1.NewTime(now.Add(5 * time.Minute))
		}, []string{
			"day-p100-4q day nvidia.com/gpu=0 nvidia.com/gpu=4 on layout day's next turn (a switch away from it is due)",
		}, nil},
		{"paused", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = true }, []string{
			"(paused: gpupool changes no quota and no check until kubectl gpupool unpause lab; below is what it would set)",
			"day-p100-4q day nvidia.com/gpu=4",
		}, nil},
		{"removed", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Kueue = nil }, []string{
			"Kueue:", "spec.kueue was removed: gpupool releases the admission checks the pool held",
		}, []string{"FLAVOR", "Held Workloads"}},
		{"no kueue", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Kueue, p.Status.Kueue = nil, nil }, nil, []string{"Kueue:"}},
	} {
		p := pool()
		if tc.change != nil {
			tc.change(p)
		}
		got := describe(p)
		if testing.Verbose() {
			t.Logf("%s:\n%s", tc.name, got)
		}
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: status does not say %q:\n%s", tc.name, want, got)
			}
		}
		for _, not := range tc.not {
			if strings.Contains(got, not) {
				t.Errorf("%s: status says %q:\n%s", tc.name, not, got)
			}
		}
	}
}
