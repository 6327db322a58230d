package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

func kueuePool() *gpupoolv1.GPUPoolProfile {
	return &gpupoolv1.GPUPoolProfile{Spec: gpupoolv1.GPUPoolProfileSpec{
		Schedule: &gpupoolv1.Schedule{TimeZone: "Europe/Berlin", LeadTime: &metav1.Duration{Duration: 10 * time.Minute}},
		Kueue: &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
			{Name: "day", Layout: "day", Quota: gpuList("4"), WaitingQuota: gpuList("1")},
			{Name: "night", Layout: "night", Quota: gpuList("2")},
		}},
	}}
}

// TestFlavorQuota: a flavor has its quota while its layout is ready and not about to be
// left, from warnAhead before a scheduled or demand switch away its waiting quota, and
// its waiting quota (0 when not listed) while its layout is not ready.
func TestFlavorQuota(t *testing.T) {
	berlin := mustZone("Europe/Berlin")
	now := time.Date(2031, 3, 17, 7, 0, 0, 0, berlin)
	at := func(h, m int) metav1.Time { return metav1.NewTime(time.Date(2031, 3, 17, h, m, 0, 0, berlin)) }
	at0650 := at(6, 50)
	for _, tc := range []struct {
		name      string
		status    gpupoolv1.GPUPoolProfileStatus
		day, next string // day's quota and when it changes ("" never)
		night     string
	}{
		{name: "night ready, day's switch far", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7, 50)}}, day: "1", night: "2"},
		{name: "night in its warning", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7, 5)}}, day: "1", night: "0"},
		{name: "day switching in", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			Transition: &gpupoolv1.TransitionStatus{To: "day"}}, day: "1", night: "0"},
		{name: "day ready", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day"}, day: "4", night: "0"},
		// The aborted switch to night is not in flight: day still serves.
		{name: "day serving after the switch to night aborted", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
			Transition: &gpupoolv1.TransitionStatus{To: "night", AbortedTime: &at0650}}, day: "4", night: "0"},
		{name: "day ready, demand announced night", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
			Demand: &gpupoolv1.DemandStatus{Switch: &gpupoolv1.DemandSwitch{Layout: "night", At: at(7, 8)}}}, day: "1", night: "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := kueuePool()
			pool.Status = tc.status
			day, _ := flavorQuota(pool, &pool.Spec.Kueue.Flavors[0], now)
			night, _ := flavorQuota(pool, &pool.Spec.Kueue.Flavors[1], now)
			if q := day[nodes.DefaultGPUResource]; q.String() != tc.day {
				t.Errorf("day quota %s, want %s", q.String(), tc.day)
			}
			if q := night[nodes.DefaultGPUResource]; q.String() != tc.night {
				t.Errorf("night quota %s, want %s", q.String(), tc.night)
			}
		})
	}
	// The drop is due at the switch minus warnAhead (leadTime, 10m).
	pool := kueuePool()
	pool.Status = gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7, 50)}}
	if _, next := flavorQuota(pool, &pool.Spec.Kueue.Flavors[1], now); !next.Equal(at(7, 40).Time) {
		t.Errorf("night's quota drops at %s, want 07:40", next.In(berlin))
	}
}

func TestWaitingMessage(t *testing.T) {
	berlin := mustZone("Europe/Berlin")
	now := time.Date(2031, 3, 17, 15, 45, 0, 0, berlin)
	pool := kueuePool()
	pool.Status = gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
		NextTransition: &gpupoolv1.NextTransition{Layout: "night", At: metav1.NewTime(time.Date(2031, 3, 17, 19, 50, 0, 0, berlin))}}
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night at 20:00 (in 4h15m)"; got != want {
		t.Errorf("scheduled: %q, want %q", got, want)
	}
	pool.Status.Transition, pool.Status.DesiredReason = &gpupoolv1.TransitionStatus{To: "night"}, gpupoolv1.DesiredByDemand
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: demand switch in progress"; got != want {
		t.Errorf("in flight: %q, want %q", got, want)
	}
	aborted := metav1.NewTime(time.Date(2031, 3, 17, 15, 30, 0, 0, berlin))
	pool.Status.Transition.AbortedTime = &aborted
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: the switch to it was aborted at 15:30 (a drain timed out)"; got != want {
		t.Errorf("aborted: %q, want %q", got, want)
	}
	pool.Status = gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day"}
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night (no switch to it is scheduled)"; got != want {
		t.Errorf("unscheduled: %q, want %q", got, want)
	}
	for d, want := range map[time.Duration]string{4 * time.Hour: "in 4h", 90 * time.Minute: "in 1h30m", 5 * time.Minute: "in 5m", 0: "now",
		20 * time.Second: "in 20s", 400 * time.Millisecond: "now", time.Second: "in 1s", 29 * time.Second: "in 29s", 29600 * time.Millisecond: "in 1m", 30 * time.Second: "in 1m", 90 * time.Second: "in 2m", -time.Minute: "now"} {
		if got := inDuration(d); got != want {
			t.Errorf("inDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
