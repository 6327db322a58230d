package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
	"github.com/gpupool/gpupool/internal/world"
)

// Condition reasons. The planner's problem reasons (plan.Reason*) are used unchanged
// when a problem is what stalls the pool.
// ReasonConflictingClaim: an older pool claims a VM of this one on the same vCenter.
const ReasonConflictingClaim = "ConflictingClaim"

const (
	ReasonLayoutActive       = "LayoutActive"
	ReasonTransitioning      = "Transitioning"
	ReasonRepairing          = "Repairing"
	ReasonReverting          = "Reverting"
	ReasonIdle               = "Idle"
	ReasonDrainBlocked       = "DrainBlocked"
	ReasonDrainAborted       = "DrainAborted"
	ReasonNodeNotReady       = "NodeNotReady"
	ReasonTaskFailed         = "VSphereTaskFailed"
	ReasonStepFailed         = "StepFailed"
	ReasonInfeasible         = "LayoutInfeasible"
	ReasonVCenterUnavailable = "VCenterUnavailable"
	ReasonCredentials        = "CredentialsUnavailable"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonMachineUnreadable  = "MachineUnreadable"
	ReasonMachineNotTrusted  = "MachineNotTrusted"
	ReasonPaused             = "Paused"
	ReasonNotPaused          = "NotPaused"
	ReasonAsExpected         = "AsExpected"
	ReasonDeleting           = "Deleting"
)

// maxConditionMessage keeps condition messages readable and well under the API's limit.
const maxConditionMessage = 4096

// summarize computes every condition and the phase from the pass's facts and the status
// that was persisted (transition, workers). It is the only place conditions are set, so
// a condition whose cause is gone is cleared on the next pass.
func summarize(s *scope) {
	p, f := s.pool, &s.facts
	st := &p.Status
	t := st.Transition
	aborted := t != nil && t.AbortedTime != nil

	if f.paused {
		msg := "spec.paused is true: no node is drained and no VM is changed"
		if f.pausedBy != "" && !p.Spec.Paused {
			msg = f.pausedBy + " pauses the pool: no node is drained and no VM is changed"
		}
		if len(f.pausedTasks) > 0 {
			msg += fmt.Sprintf("; %d vSphere task(s) started before the pause are followed until they end: %s", len(f.pausedTasks), firstFew(f.pausedTasks, ", "))
		}
		setCond(p, gpupoolv1.ConditionPaused, true, ReasonPaused, msg)
	} else {
		setCond(p, gpupoolv1.ConditionPaused, false, ReasonNotPaused, "not paused")
	}

	stalledReason, stalledMsg := stalled(s)
	if stalledReason != "" {
		setCond(p, gpupoolv1.ConditionStalled, true, stalledReason, stalledMsg)
	} else if !f.paused {
		setCond(p, gpupoolv1.ConditionStalled, false, ReasonAsExpected, "nothing needs a person")
	}

	if reason, msg := degraded(s); reason != "" {
		setCond(p, gpupoolv1.ConditionDegraded, true, reason, msg)
	} else if f.observed || findCondition(p, gpupoolv1.ConditionDegraded) == nil {
		setCond(p, gpupoolv1.ConditionDegraded, false, ReasonAsExpected, "no failures")
	}

	progressing(s, stalledReason, aborted)
	reconciling(s, stalledReason)

	switch {
	case f.deleting != "":
		setCond(p, gpupoolv1.ConditionReady, false, ReasonDeleting, f.deleting)
	case f.paused:
		setCond(p, gpupoolv1.ConditionReady, false, ReasonPaused, "paused")
	case f.observed && f.done && f.fallback == "" && stalledReason == "" && st.ActiveLayout == st.DesiredLayout:
		setCond(p, gpupoolv1.ConditionReady, true, ReasonLayoutActive, fmt.Sprintf("layout %s is active (%s)", st.ActiveLayout, s.decision.Message))
	case stalledReason != "":
		setCond(p, gpupoolv1.ConditionReady, false, stalledReason, stalledMsg)
	case f.vcenter != "":
		setCond(p, gpupoolv1.ConditionReady, false, ReasonVCenterUnavailable, f.vcenter)
	case aborted:
		setCond(p, gpupoolv1.ConditionReady, false, ReasonDrainAborted, t.Message)
	case f.observed:
		active := fmt.Sprintf("layout %s is active", st.ActiveLayout)
		if st.ActiveLayout == "" {
			active = "no layout is active yet"
		}
		setCond(p, gpupoolv1.ConditionReady, false, ReasonTransitioning, fmt.Sprintf("layout %s is wanted; %s", st.DesiredLayout, active))
	}

	st.Progress = progress(st.Workers)

	switch {
	case f.paused:
		st.Phase = gpupoolv1.PhasePaused
	case stalledReason != "" || aborted:
		st.Phase = gpupoolv1.PhaseBlocked
	case t != nil:
		st.Phase = gpupoolv1.PhaseTransitioning
	case f.observed:
		st.Phase = gpupoolv1.PhaseSteady
	case st.Phase == "" || st.Phase == gpupoolv1.PhasePaused || st.Phase == gpupoolv1.PhaseBlocked:
		st.Phase = gpupoolv1.PhasePending
	}
}

// progress is status.progress: the workers with no step left over all workers, empty
// before any worker was observed.
func progress(ws []gpupoolv1.WorkerStatus) string {
	if len(ws) == 0 {
		return ""
	}
	settled := 0
	for _, w := range ws {
		if w.Step == gpupoolv1.StepNone {
			settled++
		}
	}
	return fmt.Sprintf("%d/%d", settled, len(ws))
}

// stalled says what keeps the pool from going on until a person acts.
func stalled(s *scope) (string, string) {
	f := &s.facts
	switch {
	case f.invalidSpec != "":
		return ReasonInvalidSpec, f.invalidSpec
	case f.credentials != "":
		return cmp.Or(f.credentialsReason, ReasonCredentials), f.credentials
	case f.conflict != "":
		return ReasonConflictingClaim, f.conflict
	case len(f.problems) > 0:
		msg := problemsMessage(f.problems)
		if f.fallback != "" {
			msg = fmt.Sprintf("layout %s cannot be completed: %s; layout %s is brought back where its GPUs are free", s.decision.Layout, msg, f.fallback)
		}
		return ReasonInfeasible, msg
	case f.reportStands:
		if c := findCondition(s.persisted, gpupoolv1.ConditionStalled); c != nil {
			return c.Reason, c.Message
		}
	case len(f.held) > 0:
		return f.held[0].Reason, problemsMessage(f.held)
	}
	return "", ""
}

// degraded says what failed, from this pass's facts and the workers' recorded state.
func degraded(s *scope) (string, string) {
	f, st := &s.facts, &s.pool.Status
	var reason string
	var msgs []string
	add := func(r, m string) {
		if reason == "" {
			reason = r
		}
		msgs = append(msgs, m)
	}
	if f.vcenter != "" {
		add(ReasonVCenterUnavailable, f.vcenter)
	}
	if t := st.Transition; t != nil && t.AbortedTime != nil {
		add(ReasonDrainAborted, t.Message)
	}
	for _, w := range st.Workers {
		if w.Attempts > 0 && w.NextRetryTime != nil {
			add(ReasonTaskFailed, fmt.Sprintf("VM %s: %s", w.VM, w.Message))
		}
	}
	for _, w := range st.Workers {
		if waitExpired(s.pool, s.now, &w) {
			add(ReasonNodeNotReady, fmt.Sprintf("VM %s is powered on but node %s is not ready for work after %s%s", w.VM, orNoNode(w.Node), execute.NodeReadyTimeout(s.pool), gapsOf(&s.w, w.VM)))
		}
	}
	for _, e := range f.stepErrors {
		add(ReasonStepFailed, e)
	}
	return reason, cut(strings.Join(msgs, "; "))
}

// progressing sets Progressing: True while gpupool is changing the pool.
func progressing(s *scope, stalledReason string, aborted bool) {
	p, f := s.pool, &s.facts
	st := &p.Status
	// What the nodes waited for lack, then what failed.
	extra := ""
	if len(f.nodeWaits) > 0 {
		sort.Strings(f.nodeWaits)
		extra = "; " + firstFew(f.nodeWaits, "; ")
	}
	if len(f.stepErrors) > 0 {
		extra += "; errors: " + strings.Join(f.stepErrors, "; ")
	}
	switch {
	case f.deleting != "":
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonDeleting, f.deleting)
	case f.paused:
		setCond(p, gpupoolv1.ConditionProgressing, false, ReasonPaused, "paused")
	case aborted:
		setCond(p, gpupoolv1.ConditionProgressing, false, ReasonDrainAborted, st.Transition.Message)
	case !f.observed && stalledReason != "":
		setCond(p, gpupoolv1.ConditionProgressing, false, stalledReason, "waiting for a person: see the Stalled condition")
	case !f.observed && f.vcenter != "" && findCondition(p, gpupoolv1.ConditionProgressing) != nil:
		// An earlier pass's word ("nothing to do") no longer holds. A pool never
		// observed has none: Reconciling stays True for it (reconciling).
		setCond(p, gpupoolv1.ConditionProgressing, false, ReasonVCenterUnavailable, "waiting for vCenter: "+f.vcenter)
	case !f.observed:
		// Nothing was learnt: the last word stands.
	case f.settling:
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonTransitioning, "waiting for the vSphere tasks in flight, or a read after those that just ended, before deciding the next steps")
	case f.fallback != "" && !f.done:
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonReverting, fmt.Sprintf("layout %s cannot be completed; bringing back layout %s%s", s.decision.Layout, f.fallback, extra))
	case f.done || (stalledReason != "" && f.fallback == ""):
		reason, msg := ReasonIdle, fmt.Sprintf("layout %s: nothing to do", orNone(st.ActiveLayout))
		if stalledReason != "" {
			reason, msg = stalledReason, "waiting for a person: see the Stalled condition"
		}
		setCond(p, gpupoolv1.ConditionProgressing, false, reason, msg)
	case len(f.drainBlocked) > 0:
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonDrainBlocked, strings.Join(f.drainBlocked, "; ")+extra)
	case st.Transition != nil:
		t := st.Transition
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonTransitioning, fmt.Sprintf("transition %s from %s to %s in progress: %s%s", t.ID, fromWhat(t.From), t.To, stepCounts(st.Workers), extra))
	default:
		setCond(p, gpupoolv1.ConditionProgressing, true, ReasonRepairing, fmt.Sprintf("repairing layout %s: %s%s", st.ActiveLayout, stepCounts(st.Workers), extra))
	}
}

// reconciling sets Reconciling, the condition kstatus (Flux, Argo CD) reads, from the
// same facts as Progressing: True while gpupool changes the pool. Before the pool was
// ever observed it is True too (gpupool is still getting there), unless a person must
// act (Stalled) or the pool is paused, so that no tool takes a new pool for current.
func reconciling(s *scope, stalledReason string) {
	p := s.pool
	c := findCondition(p, gpupoolv1.ConditionProgressing)
	switch {
	case c != nil:
		setCond(p, gpupoolv1.ConditionReconciling, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	case s.facts.paused || stalledReason != "":
		setCond(p, gpupoolv1.ConditionReconciling, false, cmp.Or(stalledReason, ReasonPaused), "not reconciling: see the Stalled and Paused conditions")
	case s.facts.vcenter != "":
		setCond(p, gpupoolv1.ConditionReconciling, true, ReasonVCenterUnavailable, "the pool was not observed yet: "+s.facts.vcenter)
	}
}

// stepCounts says how many workers are at each step.
func stepCounts(ws []gpupoolv1.WorkerStatus) string {
	counts := map[gpupoolv1.Step]int{}
	for _, w := range ws {
		if w.Step != gpupoolv1.StepNone {
			counts[w.Step]++
		}
	}
	if len(counts) == 0 {
		return "no worker has a step"
	}
	parts := make([]string, 0, len(counts))
	for step, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, step))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// waitExpired tells whether a worker has waited spec.nodeReadyTimeout for its node.
func waitExpired(pool *gpupoolv1.GPUPoolProfile, now time.Time, ws *gpupoolv1.WorkerStatus) bool {
	return ws.Step == gpupoolv1.StepWaitNodeReady && ws.StepStartTime != nil &&
		now.Sub(ws.StepStartTime.Time) >= execute.NodeReadyTimeout(pool)
}

func orNoNode(n string) string {
	if n == "" {
		return "(none registered)"
	}
	return n
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func setCond(p *gpupoolv1.GPUPoolProfile, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: cut(msg), ObservedGeneration: p.Generation,
	})
}

// cut keeps a message under maxConditionMessage.
func cut(msg string) string {
	return text.Cut(msg, maxConditionMessage)
}

func findCondition(p *gpupoolv1.GPUPoolProfile, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

func problemsMessage(ps []plan.Problem) string {
	msgs := make([]string, 0, len(ps))
	for _, p := range ps {
		msgs = append(msgs, p.Message)
	}
	sort.Strings(msgs)
	// Note: the VMs of one shared node are held with one message.
	return strings.Join(slices.Compact(msgs), "; ")
}

// gapsOf says what the node of a worker (by spec id) lacks, for messages.
func gapsOf(w *world.World, id string) string {
	if v, ok := w.VMs[id]; ok && len(w.Gaps[v.Name]) > 0 {
		return ": " + nodes.WaitingFor(w.Gaps[v.Name])
	}
	return ""
}

// maxNamed bounds how many items (pods, VMs, tasks) a message names, so that a crowded
// pool cannot grow its status toward the API server's object size limit.
const maxNamed = 5

// firstFew joins the first maxNamed items with sep and says how many more there are.
func firstFew(items []string, sep string) string {
	if len(items) <= maxNamed {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:maxNamed], sep), sep, len(items)-maxNamed)
}
