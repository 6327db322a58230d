package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// endTransitionPools numbers the pools of TestEndTransition.
var endTransitionPools int

// TestEndTransition: every way a transition ends goes through endTransition, which
// records the history entry, counts the end under the label derived from the result
// (and the duration of a completed one), emits the Transition<Result> event, and keeps
// only an aborted transition in status.
func TestEndTransition(t *testing.T) {
	start := time.Date(2030, 3, 4, 19, 50, 0, 0, time.UTC)
	now := start.Add(90 * time.Second)
	for _, c := range []struct {
		result             gpupoolv1.TransitionResult
		message            string
		label, eventPrefix string
		wantMessage        string
		kept               bool
	}{
		{result: gpupoolv1.TransitionCompleted, label: "completed",
			eventPrefix: "Normal TransitionCompleted transition night-1: layout night is active after 1m30s: 0 nodes serving it"},
		{result: gpupoolv1.TransitionSuperseded, message: "layout day is wanted now (Override)", label: "superseded",
			eventPrefix: "Normal TransitionSuperseded transition night-1 to night superseded: day is wanted now", wantMessage: "layout day is wanted now (Override)"},
		{result: gpupoolv1.TransitionAborted, message: "transition night-1 to night aborted: drain timed out", label: "aborted",
			eventPrefix: "Warning TransitionAborted transition night-1 to night aborted: drain timed out", wantMessage: "transition night-1 to night aborted: drain timed out", kept: true},
	} {
		t.Run(string(c.result), func(t *testing.T) {
			// A pool name of its own, so that its duration series is new (also with -count).
			endTransitionPools++
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("end-transition-%d", endTransitionPools)}}
			pool.Status.ActiveLayout = "day"
			pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "night-1", From: "day", To: "night", StartTime: metav1.NewTime(start)}
			s := &scope{pool: pool, persisted: pool.DeepCopy(), now: now, decision: plan.Decision{Layout: "day", Reason: gpupoolv1.DesiredByOverride}}
			rec := events.NewFakeRecorder(10)
			r := &GPUPoolProfileReconciler{Recorder: rec}
			counter := transitionsTotal.WithLabelValues(pool.Name, c.label)
			before, durations := testutil.ToFloat64(counter), testutil.CollectAndCount(transitionDuration)

			r.endTransition(s, c.result, c.message)

			if got := testutil.ToFloat64(counter) - before; got != 1 {
				t.Errorf("gpupool_transitions_total{result=%q} rose by %v, want 1", c.label, got)
			}
			wantDurations := durations // only a completion is timed: its observation adds the pool's series
			if c.result == gpupoolv1.TransitionCompleted {
				wantDurations++
			}
			if got := testutil.CollectAndCount(transitionDuration); got != wantDurations {
				t.Errorf("%d duration series, want %d", got, wantDurations)
			}
			h := pool.Status.History
			if len(h) != 1 || h[0].ID != "night-1" || h[0].Result != c.result || h[0].Message != c.wantMessage ||
				!h[0].StartTime.Time.Equal(start) || !h[0].EndTime.Time.Equal(now) {
				t.Errorf("history %+v, want one %s entry for night-1 with message %q", h, c.result, c.wantMessage)
			}
			if kept := pool.Status.Transition != nil; kept != c.kept {
				t.Errorf("transition kept in status: %v, want %v", kept, c.kept)
			}
			select {
			case ev := <-rec.Events:
				if !strings.HasPrefix(ev, c.eventPrefix) {
					t.Errorf("event %q, want it to start with %q", ev, c.eventPrefix)
				}
			default:
				t.Errorf("no event, want %q", c.eventPrefix)
			}
			if len(rec.Events) != 0 {
				t.Errorf("%d more events, want one", len(rec.Events))
			}
		})
	}
}

// TestTransitionMetricResult: the metric label is the result in lower case, as the
// dashboards and alerts spell it.
func TestTransitionMetricResult(t *testing.T) {
	for result, want := range map[gpupoolv1.TransitionResult]string{
		gpupoolv1.TransitionCompleted: "completed", gpupoolv1.TransitionAborted: "aborted", gpupoolv1.TransitionSuperseded: "superseded",
	} {
		if got := transitionMetricResult(result); got != want {
			t.Errorf("transitionMetricResult(%s) = %q, want %q", result, got, want)
		}
	}
}
