package controllers

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// request creates a GPUPoolRequest for the pool, expiring at until on the harness's
// clock (zero: no expiry, for Resume and Unpause), and deletes it when the test ends.
func (h *harness) request(name, pool string, act gpupoolv1.RequestAction, layout string, until time.Time) *gpupoolv1.GPUPoolRequest {
	h.t.Helper()
	q := &gpupoolv1.GPUPoolRequest{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + name},
		Spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool, Action: act, Layout: layout, Reason: "maintenance " + name}}
	if !until.IsZero() {
		q.Spec.Until = &metav1.Time{Time: until}
	}
	h.must(k8s.Create(h.ctx, q))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, q) })
	return q
}

// requestNow reads a request back (nil: deleted).
func (h *harness) requestNow(q *gpupoolv1.GPUPoolRequest) *gpupoolv1.GPUPoolRequest {
	h.t.Helper()
	var got gpupoolv1.GPUPoolRequest
	err := k8s.Get(h.ctx, client.ObjectKeyFromObject(q), &got)
	if apierrors.IsNotFound(err) {
		return nil
	}
	h.must(err)
	return &got
}

// TestRequestSwitchBeatsOverrideUntilItExpires: a Switch request forces its layout
// over the pool's spec.override (as Git has it) and the schedule; once it expires the
// spec's override applies again; a day after that, the request is deleted.
func TestRequestSwitchBeatsOverrideUntilItExpires(t *testing.T) {
	h := newHarness(t, "rqs-")
	pool := h.dayNight()
	pool.Spec.Override = &gpupoolv1.Override{Layout: "day", Reason: "kept in Git"}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	until := monday1000.Add(time.Hour)
	q := h.request("night", pool.Name, gpupoolv1.RequestSwitch, "night", until)
	p := h.converge(pool.Name, "night", 60)
	h.checkNight(p)
	if p.Status.DesiredReason != gpupoolv1.DesiredByOverride || !strings.Contains(historyText(p), "request "+q.Name) {
		t.Errorf("desired %s %q; want Override naming request %s", p.Status.DesiredReason, historyText(p), q.Name)
	}
	if nt := p.Status.NextTransition; nt == nil || nt.Layout != "day" || !nt.At.Time.Equal(until) {
		t.Errorf("next transition %+v, want day at the request's expiry", nt)
	}
	got := h.requestNow(q)
	if got.Status.Phase != gpupoolv1.RequestActive || got.Status.StartTime == nil || got.Status.ExpiresAt == nil || !got.Status.ExpiresAt.Time.Equal(until) {
		t.Errorf("request status %+v, want Active from now until %s", got.Status, until)
	}
	containsAll(t, "events", h.events(), "RequestActive")

	h.clock.SetTime(until)
	p = h.converge(pool.Name, "day", 60)
	if p.Status.DesiredReason != gpupoolv1.DesiredByOverride {
		t.Errorf("desired reason %s after the request expired, want the spec's Override", p.Status.DesiredReason)
	}
	got = h.requestNow(q)
	if got.Status.Phase != gpupoolv1.RequestExpired || got.Status.EndTime == nil {
		t.Fatalf("request status %+v after its expiry, want Expired with an end time", got.Status)
	}

	h.clock.Step(DefaultRequestRetention)
	h.reconcile(pool.Name)
	if h.requestNow(q) != nil {
		t.Errorf("request %s still there %s after it expired", q.Name, DefaultRequestRetention)
	}
}

// TestRequestPauseHoldsUntilUnpause: a Pause request pauses a pool whose spec is not
// paused; a later Unpause request ends it (Superseded, Completed) and the pool acts.
func TestRequestPauseHoldsUntilUnpause(t *testing.T) {
	h := newHarness(t, "rqp-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	pause := h.request("pause", pool.Name, gpupoolv1.RequestPause, "", monday1950.Add(4*time.Hour))
	for range 5 {
		h.reconcile(pool.Name)
		h.clock.Step(time.Minute)
	}
	p := h.get(pool.Name)
	if c := findCondition(p, gpupoolv1.ConditionPaused); p.Status.Phase != gpupoolv1.PhasePaused || c == nil || !strings.Contains(c.Message, "request "+pause.Name) {
		t.Fatalf("phase %s Paused %+v, want Paused by request %s", p.Status.Phase, c, pause.Name)
	}
	for m, n := range h.opCounts() {
		if n != 0 {
			t.Errorf("%s called %d times while paused by a request", m, n)
		}
	}
	unpause := h.request("unpause", pool.Name, gpupoolv1.RequestUnpause, "", time.Time{})
	h.checkNight(h.converge(pool.Name, "night", 60))
	if got := h.requestNow(pause); got.Status.Phase != gpupoolv1.RequestSuperseded || !strings.Contains(got.Status.Message, unpause.Name) {
		t.Errorf("pause request %+v, want Superseded by %s", got.Status, unpause.Name)
	}
	if got := h.requestNow(unpause); got.Status.Phase != gpupoolv1.RequestCompleted {
		t.Errorf("unpause request %+v, want Completed", got.Status)
	}

	// Deleting the pool deletes its requests.
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	for i := 0; i < 10 && !h.gone(pool.Name); i++ {
		h.reconcile(pool.Name)
		h.settle()
		h.clock.Step(requeueTask)
	}
	if !h.gone(pool.Name) || h.requestNow(pause) != nil || h.requestNow(unpause) != nil {
		t.Errorf("pool gone %t; requests left: pause %t, unpause %t", h.gone(pool.Name), h.requestNow(pause) != nil, h.requestNow(unpause) != nil)
	}
}

// historyText is the pool's transition reasons and messages, for a test to search.
func historyText(p *gpupoolv1.GPUPoolProfile) string {
	var b strings.Builder
	for _, r := range p.Status.History {
		b.WriteString(string(r.Reason) + " " + r.Message + "\n")
	}
	return b.String()
}

// TestPoolPausedReadsRequestsThroughTheStatus: the Kueue controller and the demand watch
// take a pool as paused when its spec says so or when its last pass found a Pause
// request (the Paused condition), so that a pause by request freezes Kueue's quota too.
func TestPoolPausedReadsRequestsThroughTheStatus(t *testing.T) {
	cond := func(s metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: gpupoolv1.ConditionPaused, Status: s}}
	}
	for _, tc := range []struct {
		name   string
		spec   bool
		conds  []metav1.Condition
		paused bool
	}{
		{"neither", false, nil, false},
		{"spec", true, nil, true},
		{"request", false, cond(metav1.ConditionTrue), true},
		{"unpaused", false, cond(metav1.ConditionFalse), false},
	} {
		p := &gpupoolv1.GPUPoolProfile{Spec: gpupoolv1.GPUPoolProfileSpec{Paused: tc.spec}, Status: gpupoolv1.GPUPoolProfileStatus{Conditions: tc.conds}}
		if got := poolPaused(p); got != tc.paused {
			t.Errorf("%s: paused %t, want %t", tc.name, got, tc.paused)
		}
	}
}
