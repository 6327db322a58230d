package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// TestFlavorQuotaFollowsTheCount: the flavor of a layout by count has its quota scaled
// from convert.count to the count in effect, for every resource; during a step of the
// count the layout keeps serving with the smaller count's quota, and a Workload's check
// stays Ready; a flavor of a layout with workers keeps its quota as written.
func TestFlavorQuotaFollowsTheCount(t *testing.T) {
	now := time.Date(2031, 3, 17, 7, 0, 0, 0, mustZone("Europe/Berlin"))
	pool := kueuePool()
	pool.Spec.Layouts = []gpupoolv1.Layout{{Name: "day"}, {Name: "night", Convert: &gpupoolv1.Conversion{Base: "day", Count: 4, Profile: "grid_p100-16q"}}}
	pool.Spec.Kueue.Flavors[1].Quota = corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")}
	for _, tc := range []struct {
		name        string
		status      gpupoolv1.GPUPoolProfileStatus
		gpus, mem   string
		checkPended bool
	}{
		{name: "count as written", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", ActiveCount: 4}, gpus: "8", mem: "64Gi"},
		{name: "no count recorded", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night"}, gpus: "8", mem: "64Gi"},
		{name: "one GPU converted", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", ActiveCount: 1}, gpus: "2", mem: "16Gi"},
		{name: "three GPUs converted", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", ActiveCount: 3}, gpus: "6", mem: "48Gi"},
		{name: "stepping up from 1 to 3", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", ActiveCount: 1,
			Transition: &gpupoolv1.TransitionStatus{From: "night", To: "night", FromCount: 1, Count: 3}}, gpus: "2", mem: "16Gi"},
		{name: "stepping down from 3 to 2", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", ActiveCount: 3,
			Transition: &gpupoolv1.TransitionStatus{From: "night", To: "night", FromCount: 3, Count: 2}}, gpus: "4", mem: "32Gi"},
		{name: "switching in with 2", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
			Transition: &gpupoolv1.TransitionStatus{From: "day", To: "night", Count: 2}}, gpus: "0", mem: "0", checkPended: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool.Status = tc.status
			if day, _ := flavorQuota(pool, &pool.Spec.Kueue.Flavors[0], now); tc.status.ActiveLayout == "night" {
				if q := day[nodes.DefaultGPUResource]; q.String() != "1" {
					t.Errorf("day quota %s, want its waiting quota 1, unscaled", q.String())
				}
			}
			q, _ := flavorQuota(pool, &pool.Spec.Kueue.Flavors[1], now)
			if g, m := q[nodes.DefaultGPUResource], q[corev1.ResourceMemory]; g.String() != tc.gpus || m.String() != tc.mem {
				t.Errorf("night quota %s GPUs, %s memory; want %s, %s", g.String(), m.String(), tc.gpus, tc.mem)
			}
			if state, msg := checkState(pool, []string{"night"}, now); (state == checkPending) != tc.checkPended {
				t.Errorf("check %s (%s), want pending %v", state, msg, tc.checkPended)
			}
		})
	}
}

func TestWaitingMessage(t *testing.T) {
	berlin := mustZone("Europe/Berlin")
	now := time.Date(2031, 3, 17, 15, 45, 0, 0, berlin)
	pool := kueuePool()
	pool.Status = gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
		NextTransition: &gpupoolv1.NextTransition{Layout: "night", At: metav1.NewTime(time.Date(2031, 3, 17, 19, 50, 0, 0, berlin))}}
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: the switch to it starts at 19:50 CET (in 4h5m)"; got != want {
		t.Errorf("scheduled: %q, want %q", got, want)
	}
	// An override's end is when the switch starts, leadTime or not; another day names
	// its date.
	pool.Spec.Schedule.LeadTime = &metav1.Duration{Duration: 10 * time.Minute}
	pool.Status.NextTransition.At = metav1.NewTime(time.Date(2031, 3, 18, 2, 12, 0, 0, berlin))
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: the switch to it starts at Tue 18 Mar 02:12 CET (in 10h27m)"; got != want {
		t.Errorf("tomorrow, with a leadTime: %q, want %q", got, want)
	}
	pool.Status.Transition, pool.Status.DesiredReason = &gpupoolv1.TransitionStatus{To: "night"}, gpupoolv1.DesiredByDemand
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: demand switch in progress"; got != want {
		t.Errorf("in flight: %q, want %q", got, want)
	}
	aborted := metav1.NewTime(time.Date(2031, 3, 17, 15, 30, 0, 0, berlin))
	pool.Status.Transition.AbortedTime = &aborted
	if got, want := waitingMessage(pool, "night", now), "waiting for layout night: the switch to it was aborted at 15:30 CET (a drain timed out)"; got != want {
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

// TestCheckState: a Workload's check is Ready only while its layouts are ready for work
// and not about to be left; from warnAhead before a switch away (scheduled or announced
// by demand) it stays Pending, so that no work is admitted onto nodes drained minutes
// later.
func TestCheckState(t *testing.T) {
	berlin := mustZone("Europe/Berlin")
	now := time.Date(2031, 3, 17, 7, 0, 0, 0, berlin)
	at := func(h, m int) metav1.Time { return metav1.NewTime(time.Date(2031, 3, 17, h, m, 0, 0, berlin)) }
	for _, tc := range []struct {
		name      string
		status    gpupoolv1.GPUPoolProfileStatus
		state     string
		msgPrefix string
	}{
		{name: "night ready, day's switch far", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7, 50)}}, state: checkReady, msgPrefix: "layout night is ready for work"},
		{name: "night within warnAhead of the switch to day", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at(7, 5)}}, state: checkPending,
			msgPrefix: "waiting for layout night: a switch away from it starts at 07:05 CET (in 5m)"},
		{name: "night with a demand switch to day announced", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			Demand: &gpupoolv1.DemandStatus{Switch: &gpupoolv1.DemandSwitch{Layout: "day", At: at(7, 8)}}}, state: checkPending,
			msgPrefix: "waiting for layout night: a switch away from it starts at 07:08 CET (in 8m)"},
		{name: "night switching out", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night",
			Transition: &gpupoolv1.TransitionStatus{To: "day"}}, state: checkPending, msgPrefix: "waiting for layout night (no switch to it"},
		{name: "night still switching in", status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day",
			Transition: &gpupoolv1.TransitionStatus{To: "night"}}, state: checkPending, msgPrefix: "waiting for layout night: switch in progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := kueuePool()
			pool.Status = tc.status
			state, msg := checkState(pool, []string{"night"}, now)
			if state != tc.state || !strings.HasPrefix(msg, tc.msgPrefix) {
				t.Errorf("check %s %q, want %s %q...", state, msg, tc.state, tc.msgPrefix)
			}
		})
	}
}

// TestHeldWorkloadsAreThePoolsQueues: the pool answers the check only on the Workloads
// whose quota is reserved in a ClusterQueue labelled for it; a Workload of another
// ClusterQueue that reserved a flavor of the same name is not the pool's.
func TestHeldWorkloadsAreThePoolsQueues(t *testing.T) {
	wl := func(name, cq string, conds ...string) unstructured.Unstructured {
		var cs []any
		for _, c := range conds {
			cs = append(cs, map[string]any{"type": c, "status": "True"})
		}
		return unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "apps"},
			"status": map[string]any{
				"conditions":      cs,
				"admissionChecks": []any{map[string]any{"name": "other-check", "state": "Pending"}, map[string]any{"name": "layout", "state": "Pending"}},
				"admission": map[string]any{"clusterQueue": cq, "podSetAssignments": []any{map[string]any{
					"flavors": map[string]any{"nvidia.com/gpu": "night"}, "resourceUsage": map[string]any{"nvidia.com/gpu": "2"}}}},
			},
		}}
	}
	v := &kueueView{read: true, checks: map[string]bool{"layout": true}, queueNames: map[string]bool{"training": true},
		workloads: []unstructured.Unstructured{wl("mine", "training"), wl("tenant-b", "tenant-b-queue"), wl("done", "training", "Admitted"), wl("unreserved", "")}}
	pool := kueuePool()
	var got []string
	for _, h := range heldWorkloads(pool, v) {
		got = append(got, fmt.Sprintf("%s check %d layouts %v gpus %d", h.obj.GetName(), h.check, h.layouts, h.gpus))
	}
	if want := []string{"mine check 1 layouts [night] gpus 2"}; !slices.Equal(got, want) {
		t.Errorf("held %q, want %q", got, want)
	}
}
