package controllers

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// maxHistory is how many past transitions status.history keeps. Ten covers a few days
// of a day/night schedule and keeps the object small.
const maxHistory = 10

// maxHistoryMessage bounds a history entry's message (the API allows 1024).
const maxHistoryMessage = 512

// recordHistory adds the transition in status to status.history as ended now with the
// given result. endTransition (transition.go), where every transition ends, calls it.
func recordHistory(s *scope, result gpupoolv1.TransitionResult, message string) {
	st := &s.pool.Status
	t := st.Transition
	if t == nil {
		return
	}
	if message == "" && (t.Reason == gpupoolv1.DesiredByDemand || t.Reason == gpupoolv1.DesiredByOverride) {
		// A switch demand caused keeps its cause: the pods that caused it; an override's,
		// its reason and, for a GPUPoolRequest, the request's name.
		message = t.Cause
	}
	message = text.Cut(message, maxHistoryMessage)
	rec := gpupoolv1.TransitionRecord{
		ID: t.ID, From: t.From, To: t.To, FromCount: t.FromCount, Count: t.Count, Reason: reasonFor(s.decision, t.To),
		StartTime: t.StartTime, EndTime: metav1.NewTime(s.now), Result: result,
		SlowestWorker: slowestWorker(s.persisted), Message: message,
	}
	// An aborted transition stays in status.transition until it is retried or replaced;
	// record it once.
	if len(st.History) > 0 && st.History[0].ID == rec.ID && st.History[0].Result == rec.Result {
		return
	}
	st.History = append([]gpupoolv1.TransitionRecord{rec}, st.History...)
	if len(st.History) > maxHistory {
		st.History = st.History[:maxHistory]
	}
}

// reasonFor is why a layout is wanted, when it is the one the pass decided on. A
// transition that ends because another layout is wanted (superseded) does not know why
// its own layout was wanted any more.
func reasonFor(d plan.Decision, layout string) gpupoolv1.DesiredReason {
	if d.Layout == layout {
		return d.Reason
	}
	return ""
}

// slowestWorker names the worker that held the transition last: of the workers that
// still had a step when the previous pass ended (the status as persisted), the one
// furthest behind (earliest step in a host's order), then by name. Those are the
// workers the end waited for; a worker that finished earlier cannot have taken longer.
func slowestWorker(persisted *gpupoolv1.GPUPoolProfile) string {
	var busy []gpupoolv1.WorkerStatus
	for _, w := range persisted.Status.Workers {
		if w.Step != gpupoolv1.StepNone {
			busy = append(busy, w)
		}
	}
	if len(busy) == 0 {
		return ""
	}
	slices.SortStableFunc(busy, func(a, b gpupoolv1.WorkerStatus) int {
		if c := plan.StepOrder(a.Step) - plan.StepOrder(b.Step); c != 0 {
			return c
		}
		switch {
		case a.VM < b.VM:
			return -1
		case a.VM > b.VM:
			return 1
		}
		return 0
	})
	return busy[0].VM
}
