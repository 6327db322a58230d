package requests

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)

func spec() *gpupoolv1.GPUPoolProfileSpec {
	return &gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day", Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "night"}}}
}

// req is a request created at t0+at, and taken into account by gpupool then
// (status.startTime, from which a duration counts); opts adjust it.
func req(name string, act gpupoolv1.RequestAction, at time.Duration, opts ...func(*gpupoolv1.GPUPoolRequest)) gpupoolv1.GPUPoolRequest {
	q := gpupoolv1.GPUPoolRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(at))},
		Spec:       gpupoolv1.GPUPoolRequestSpec{Pool: "p", Action: act},
		Status:     gpupoolv1.GPUPoolRequestStatus{StartTime: &metav1.Time{Time: t0.Add(at)}},
	}
	if act == gpupoolv1.RequestSwitch {
		q.Spec.Layout = "night"
	}
	for _, o := range opts {
		o(&q)
	}
	return q
}

func lasting(d time.Duration) func(*gpupoolv1.GPUPoolRequest) {
	return func(q *gpupoolv1.GPUPoolRequest) { q.Spec.Duration = &metav1.Duration{Duration: d} }
}

func layout(l string) func(*gpupoolv1.GPUPoolRequest) {
	return func(q *gpupoolv1.GPUPoolRequest) { q.Spec.Layout = l }
}

func recorded(p gpupoolv1.RequestPhase) func(*gpupoolv1.GPUPoolRequest) {
	return func(q *gpupoolv1.GPUPoolRequest) { q.Status.Phase = p }
}

func TestResolve(t *testing.T) {
	const (
		sw, re, pa, un = gpupoolv1.RequestSwitch, gpupoolv1.RequestResume, gpupoolv1.RequestPause, gpupoolv1.RequestUnpause
		A, C, E, S, I  = gpupoolv1.RequestActive, gpupoolv1.RequestCompleted, gpupoolv1.RequestExpired, gpupoolv1.RequestSuperseded, gpupoolv1.RequestInvalid
	)
	tests := []struct {
		name   string
		reqs   []gpupoolv1.GPUPoolRequest
		now    time.Duration // after t0
		phases []gpupoolv1.RequestPhase
		layout string // forced ("" none)
		paused bool
		next   time.Duration // after t0; 0 none
	}{
		{name: "none", now: time.Hour},
		{name: "a switch holds until its duration", reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, lasting(2*time.Hour))},
			now: time.Hour, phases: []gpupoolv1.RequestPhase{A}, layout: "night", next: 2 * time.Hour},
		{name: "a switch expires at its duration", reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, lasting(2*time.Hour))},
			now: 2 * time.Hour, phases: []gpupoolv1.RequestPhase{E}},
		{name: "a switch without expiry lasts 8h", reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0)},
			now: 7 * time.Hour, phases: []gpupoolv1.RequestPhase{A}, layout: "night", next: 8 * time.Hour},
		{name: "until wins over the default", reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, func(q *gpupoolv1.GPUPoolRequest) {
			q.Spec.Until = &metav1.Time{Time: t0.Add(30 * time.Minute)}
		})}, now: 31 * time.Minute, phases: []gpupoolv1.RequestPhase{E}},
		{name: "the newest switch wins, listed in any order",
			reqs: []gpupoolv1.GPUPoolRequest{req("b", sw, time.Minute, layout("day")), req("a", sw, 0)},
			now:  time.Hour, phases: []gpupoolv1.RequestPhase{A, S}, layout: "day", next: 8*time.Hour + time.Minute},
		{name: "an earlier switch does not come back when the later expires",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, lasting(5*time.Hour)), req("b", sw, time.Minute, lasting(time.Hour), layout("day"))},
			now:  2 * time.Hour, phases: []gpupoolv1.RequestPhase{S, E}},
		{name: "resume ends the earlier switch",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0), req("r", re, time.Minute)},
			now:  time.Hour, phases: []gpupoolv1.RequestPhase{S, C}},
		{name: "a switch after a resume holds",
			reqs: []gpupoolv1.GPUPoolRequest{req("r", re, 0), req("a", sw, time.Minute, lasting(time.Hour))},
			now:  2 * time.Minute, phases: []gpupoolv1.RequestPhase{C, A}, layout: "night", next: time.Hour + time.Minute},
		{name: "within the same second a resume is the later",
			reqs: []gpupoolv1.GPUPoolRequest{req("z-resume", re, 0), req("a-switch", sw, 0)},
			now:  time.Minute, phases: []gpupoolv1.RequestPhase{C, S}},
		{name: "a superseded request stays superseded once its superseder is gone",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, recorded(S))},
			now:  time.Minute, phases: []gpupoolv1.RequestPhase{S}},
		{name: "pause holds over a switch and both are active",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0), req("p", pa, time.Minute, lasting(time.Hour))},
			now:  2 * time.Minute, phases: []gpupoolv1.RequestPhase{A, A}, layout: "night", paused: true, next: time.Hour + time.Minute},
		{name: "resume does not end a pause, unpause does",
			reqs: []gpupoolv1.GPUPoolRequest{req("p", pa, 0), req("r", re, time.Minute), req("q", pa, 2*time.Minute), req("u", un, 3*time.Minute)},
			now:  4 * time.Minute, phases: []gpupoolv1.RequestPhase{S, C, S, C}},
		{name: "a pause after an unpause holds",
			reqs: []gpupoolv1.GPUPoolRequest{req("u", un, 0), req("p", pa, time.Minute, lasting(time.Hour))},
			now:  2 * time.Minute, phases: []gpupoolv1.RequestPhase{C, A}, paused: true, next: time.Hour + time.Minute},
		{name: "a layout the pool lacks is invalid and forces nothing",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, layout("nigth"))},
			now:  time.Minute, phases: []gpupoolv1.RequestPhase{I}},
		{name: "an invalid request expires",
			reqs: []gpupoolv1.GPUPoolRequest{req("a", sw, 0, layout("nigth"), lasting(time.Hour), recorded(I))},
			now:  time.Hour, phases: []gpupoolv1.RequestPhase{E}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Resolve(spec(), tt.reqs, t0.Add(tt.now))
			if len(res.Verdicts) != len(tt.reqs) {
				t.Fatalf("%d verdicts for %d requests", len(res.Verdicts), len(tt.reqs))
			}
			for i, v := range res.Verdicts {
				if v.Name != tt.reqs[i].Name || v.Phase != tt.phases[i] {
					t.Errorf("request %s: %s (%s), want %s", v.Name, v.Phase, v.Message, tt.phases[i])
				}
				if v.Message == "" {
					t.Errorf("request %s: no message", v.Name)
				}
			}
			got := ""
			if res.Override != nil {
				got = res.Override.Layout
				if !strings.HasPrefix(res.Override.Reason, "request "+res.Switch.Name) {
					t.Errorf("override reason %q does not name the request", res.Override.Reason)
				}
			}
			if got != tt.layout || res.Paused() != tt.paused {
				t.Errorf("forced %q paused %t, want %q %t", got, res.Paused(), tt.layout, tt.paused)
			}
			var want time.Time
			if tt.next > 0 {
				want = t0.Add(tt.next)
			}
			if !res.Next.Equal(want) {
				t.Errorf("next %s, want %s", res.Next, want)
			}
		})
	}
}

func TestEffectiveLeavesTheSpecAlone(t *testing.T) {
	s := spec()
	s.Override = &gpupoolv1.Override{Layout: "day"}
	res := Resolve(s, []gpupoolv1.GPUPoolRequest{req("a", gpupoolv1.RequestSwitch, 0), req("p", gpupoolv1.RequestPause, 0)}, t0)
	eff := Effective(s, res)
	if eff.Override.Layout != "night" || !eff.Paused {
		t.Fatalf("effective spec: override %v paused %t, want night and paused", eff.Override, eff.Paused)
	}
	if s.Override.Layout != "day" || s.Paused {
		t.Fatalf("the pool's spec changed: %v %t", s.Override, s.Paused)
	}
	if Effective(s, Resolve(s, nil, t0)) != s {
		t.Fatal("without requests the spec itself is not used")
	}
}

// TestDurationCountsOnGpupoolsClock: a request's duration counts from when gpupool took
// it into account (status.startTime, its own clock), never from the creationTimestamp
// the API server stamped: a request first seen with the API server's clock an hour
// ahead or behind, or after the manager was down, still lasts its whole duration.
func TestDurationCountsOnGpupoolsClock(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	for _, created := range []time.Time{now.Add(-3 * time.Hour), now.Add(-time.Hour), now.Add(time.Hour)} {
		q := req("a", gpupoolv1.RequestSwitch, created.Sub(t0), lasting(2*time.Hour))
		q.Status.StartTime = nil // not yet taken into account
		res := Resolve(spec(), []gpupoolv1.GPUPoolRequest{q}, now)
		if v := res.Verdicts[0]; v.Phase != gpupoolv1.RequestActive || v.ExpiresAt == nil || !v.ExpiresAt.Equal(now.Add(2*time.Hour)) {
			t.Errorf("created at %s, first seen at %s: %s until %v, want Active until %s", created, now, v.Phase, v.ExpiresAt, now.Add(2*time.Hour))
		}
		q.Status.StartTime = &metav1.Time{Time: now}
		if v := Resolve(spec(), []gpupoolv1.GPUPoolRequest{q}, now.Add(2*time.Hour)).Verdicts[0]; v.Phase != gpupoolv1.RequestExpired {
			t.Errorf("created at %s: %s two hours after gpupool took it, want Expired", created, v.Phase)
		}
	}
}
