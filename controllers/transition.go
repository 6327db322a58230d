package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// The transition lifecycle, in one place. A transition (status.transition) starts when
// the wanted layout is not the active one (startTransition) and ends in one of three
// ways, all through endTransition:
//
//   - Completed: the plan is done (completeTransition);
//   - Superseded: another layout is wanted before it is done (startTransition);
//   - Aborted: a drain timed out (abort). An aborted transition stays in status until
//     the spec changes or another layout is wanted; until then each pass keeps it
//     (keepAborted).
//
// Each end is recorded the same way: an entry in status.history, the counter
// gpupool_transitions_total with the result as its label (and, for a completed one, the
// duration histogram), and a Transition<Result> event.

// startTransition records a transition when the wanted layout is not the active one.
// Repairing the active layout (a node lost a label, a VM's node went away) is not a
// transition.
func (r *GPUPoolProfileReconciler) startTransition(s *scope, p *plan.Plan) {
	st := &s.pool.Status
	if t := st.Transition; t != nil && sameTarget(t.To, t.Count, s.decision) {
		return
	}
	if st.Transition == nil && sameTarget(st.ActiveLayout, st.ActiveCount, s.decision) {
		return // repairing the active layout's nodes is no transition
	}
	if st.Transition != nil {
		r.endTransition(s, gpupoolv1.TransitionSuperseded, fmt.Sprintf("layout %s is wanted now (%s)",
			targetName(s.decision.Layout, int32(s.decision.Count)), s.decision.Reason)) //nolint:gosec // a count, at most 4096
	}
	d := s.decision
	cause := d.Message
	if d.Layout == st.ActiveLayout && st.ActiveLayout != "" && d.Count > 0 && st.Demand != nil {
		// A step of the count: demand's account of it says why.
		cause = st.Demand.Message
	}
	st.Transition = &gpupoolv1.TransitionStatus{
		ID:         fmt.Sprintf("%s-%s", d.Layout, s.now.UTC().Format("20060102-150405")),
		From:       st.ActiveLayout,
		To:         d.Layout,
		Count:      int32(d.Count), //nolint:gosec // a count, at most 4096
		FromCount:  st.ActiveCount,
		StartTime:  metav1.NewTime(s.now),
		Generation: s.pool.Generation,
		Reason:     d.Reason,
		Cause:      text.Cut(cause, 1024),
	}
	// One line: kubectl events prints a table, which a multi-line note breaks. The
	// plan's steps are in status.plan (kubectl gpupool plan).
	r.transitionEvent(s.pool, st.Transition, corev1.EventTypeNormal, "TransitionStarted", "transition %s: switching from %s to %q (%s): %s; %s; steps: kubectl gpupool plan %s",
		st.Transition.ID, fromWhat(targetName(st.ActiveLayout, st.ActiveCount)), targetName(d.Layout, st.Transition.Count), d.Reason, oneLine(cause), planSummary(&s.w, p), s.pool.Name)
}

// completeTransition ends the transition in status, if any, as completed, and makes the
// decided layout the active one.
func (r *GPUPoolProfileReconciler) completeTransition(s *scope) {
	st := &s.pool.Status
	if st.Transition != nil {
		r.endTransition(s, gpupoolv1.TransitionCompleted, "")
	}
	if st.ActiveLayout == "" {
		r.emit(s.pool, corev1.EventTypeNormal, "LayoutActive", "layout %s is active", s.decision.Layout)
	}
	st.ActiveLayout = s.decision.Layout
	st.ActiveCount = int32(s.decision.Count) //nolint:gosec // a count, at most 4096
}

// abort stops the transition (or the repair: then a transition record is made for it,
// so that the abort is remembered) after a drain timeout: the nodes gpupool cordoned are
// uncordoned, the VMs keep running, and Degraded says why. Nothing is retried until the
// spec changes or another layout is wanted.
func (r *GPUPoolProfileReconciler) abort(ctx context.Context, s *scope, why string) {
	st := &s.pool.Status
	r.evictions.Cancel(s.pool.Name) // before the uncordons: nothing is evicted after them
	r.starts.Cancel(s.pool.Name)    // nor a task started that the aborted switch decided
	r.uncordonRunning(ctx, s)
	if st.Transition == nil {
		st.Transition = &gpupoolv1.TransitionStatus{
			ID: fmt.Sprintf("repair-%s-%s", s.decision.Layout, s.now.UTC().Format("20060102-150405")), From: st.ActiveLayout,
			To: s.decision.Layout, Count: int32(s.decision.Count), FromCount: st.ActiveCount, StartTime: metav1.NewTime(s.now), //nolint:gosec // a count
		}
	}
	t := st.Transition
	t.AbortedTime = ptrTime(s.now)
	t.Generation = s.pool.Generation // retried when the spec changes from now on
	t.Message = cut(fmt.Sprintf("transition %s to %s aborted: %s; the VMs keep running and the nodes gpupool cordoned are uncordoned. Fix the blocking pods or set spec.drain.onTimeout: Force; a spec change retries", t.ID, t.To, why))
	r.endTransition(s, gpupoolv1.TransitionAborted, t.Message)
	execute.ForgetDrains(s.pool)
}

// keepAborted is a pass while an aborted switch waits for a new spec or another wanted
// layout: running nodes are uncordoned, the aborted switch drains nothing more, and the
// next scheduled switch still warns its nodes ahead.
func (r *GPUPoolProfileReconciler) keepAborted(ctx context.Context, s *scope) time.Duration {
	r.evictions.Cancel(s.pool.Name)
	r.starts.Cancel(s.pool.Name)
	r.uncordonRunning(ctx, s)
	s.nodeStates = nodeStates(&s.w, s.pool, s.now, s.wanted)
	r.planNext(s)
	s.aborted = true
	return r.publishMarks(ctx, s, nil, nil)
}

// endTransition ends the transition in status (there must be one) with result: message
// goes to its status.history entry (for a completed one, "" keeps a demand switch's
// cause there); the counter, the duration of a completed one and the event follow from
// result. An aborted transition stays in status.transition, so that it is not retried;
// the others are cleared.
func (r *GPUPoolProfileReconciler) endTransition(s *scope, result gpupoolv1.TransitionResult, message string) {
	st := &s.pool.Status
	t := st.Transition
	recordHistory(s, result, message)
	transitionsTotal.WithLabelValues(s.pool.Name, transitionMetricResult(result)).Inc()
	if result == gpupoolv1.TransitionCompleted {
		transitionDuration.WithLabelValues(s.pool.Name).Observe(s.now.Sub(t.StartTime.Time).Seconds())
	}
	typ, note := transitionEndEvent(s, t, result, message)
	r.transitionEvent(s.pool, t, typ, "Transition"+string(result), "%s", note)
	if result != gpupoolv1.TransitionAborted {
		st.Transition = nil
	}
}

// transitionMetricResult is the result label of gpupool_transitions_total: the
// TransitionResult in lower case (completed, aborted, superseded).
func transitionMetricResult(result gpupoolv1.TransitionResult) string {
	return strings.ToLower(string(result))
}

// transitionEndEvent is the type and note of the event that says how transition t
// ended: an abort is a Warning that repeats its message; a completion says how long it
// took and which nodes serve the layout now; a supersede names the layout wanted now.
func transitionEndEvent(s *scope, t *gpupoolv1.TransitionStatus, result gpupoolv1.TransitionResult, message string) (typ, note string) {
	switch result {
	case gpupoolv1.TransitionAborted:
		return corev1.EventTypeWarning, message
	case gpupoolv1.TransitionCompleted:
		return corev1.EventTypeNormal, fmt.Sprintf("transition %s: layout %s is active after %s: %s",
			t.ID, t.To, s.now.Sub(t.StartTime.Time).Round(time.Second), outcomeSummary(s))
	default: // superseded
		return corev1.EventTypeNormal, fmt.Sprintf("transition %s to %s superseded: %s is wanted now", t.ID, t.To, s.decision.Layout)
	}
}

// oneLine joins the lines of a message, for an event's note.
func oneLine(msg string) string {
	return strings.Join(strings.Fields(msg), " ")
}
