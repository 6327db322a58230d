package demand

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// Input is what plan.Decide needs from the pool's status: the layout active and in
// flight, the timers it keeps there and the switches of the history. Observed is empty.
func Input(pool *gpupoolv1.GPUPoolProfile, warnAhead time.Duration) *plan.DemandInput {
	st := &pool.Status
	in := &plan.DemandInput{
		Active:    st.ActiveLayout,
		Observed:  map[string]plan.LayoutDemand{},
		Timers:    plan.DemandTimers{PendingSince: map[string]time.Time{}, IdleSince: map[string]time.Time{}},
		WarnAhead: warnAhead,
	}
	if t := st.Transition; t != nil {
		// Note: an aborted switch stays in status.transition; Decide does not count it as
		// in flight, and counts it once with its history entry (same ID).
		in.InFlight = t.To
		in.Switches = append(in.Switches, plan.PastSwitch{ID: t.ID, To: t.To, Reason: t.Reason, Start: t.StartTime.Time, Aborted: t.AbortedTime != nil})
	}
	for _, h := range st.History {
		ps := plan.PastSwitch{ID: h.ID, To: h.To, Reason: h.Reason, Start: h.StartTime.Time, Aborted: h.Result == gpupoolv1.TransitionAborted}
		if h.Result == gpupoolv1.TransitionCompleted {
			ps.End = h.EndTime.Time
		}
		in.Switches = append(in.Switches, ps)
	}
	if d := st.Demand; d != nil {
		for _, l := range d.Layouts {
			if l.PendingSince != nil {
				in.Timers.PendingSince[l.Layout] = l.PendingSince.Time
			}
			if l.IdleSince != nil {
				in.Timers.IdleSince[l.Layout] = l.IdleSince.Time
			}
		}
		if sw := d.Switch; sw != nil {
			in.Timers.Switch = &plan.AnnouncedSwitch{Layout: sw.Layout, Action: sw.Action, Decided: sw.DecidedTime.Time, At: sw.At.Time, Message: sw.Message}
		}
	}
	return in
}

// Status is status.demand after a decision: every layout's demand, the timers and the
// announced switch, and demand's own account.
func Status(pool *gpupoolv1.GPUPoolProfile, in *plan.DemandInput, dec plan.DemandDecision) *gpupoolv1.DemandStatus {
	ds := &gpupoolv1.DemandStatus{Message: text.Cut(dec.Message, MaxMessage)}
	if sw := dec.Timers.Switch; sw != nil {
		ds.Switch = &gpupoolv1.DemandSwitch{Layout: sw.Layout, Action: sw.Action, DecidedTime: metav1.NewTime(sw.Decided),
			At: metav1.NewTime(sw.At), Message: text.Cut(sw.Message, MaxMessage)}
	}
	for _, l := range pool.Spec.Layouts {
		o := in.Observed[l.Name]
		ld := gpupoolv1.LayoutDemand{Layout: l.Name, PendingPods: int32(len(o.Pending)), PendingGPUs: o.PendingGPUs,
			RunningGPUs: o.RunningGPUs, Evictions: int32(o.Evictions), DoNotDisrupt: int32(len(o.DoNotDisrupt)),
			JobsNearCompletion: int32(len(o.NearCompletion))}
		if len(o.Pending) > 0 {
			ld.Pods = o.Pending[:min(len(o.Pending), 5)]
		}
		if t, ok := dec.Timers.PendingSince[l.Name]; ok {
			ld.PendingSince = &metav1.Time{Time: t}
		}
		if t, ok := dec.Timers.IdleSince[l.Name]; ok {
			ld.IdleSince = &metav1.Time{Time: t}
		}
		ds.Layouts = append(ds.Layouts, ld)
	}
	return ds
}

// BudgetReset is since when the switch budget counts and the reset token: an admin's new
// gpupool.dev/reset-demand-budget value resets it now (gpupool's clock; the value is
// never read as a time), otherwise the last reset in status stands.
func BudgetReset(pool *gpupoolv1.GPUPoolProfile, now time.Time) (time.Time, string) {
	var b *gpupoolv1.DemandBudget
	if pool.Status.Demand != nil {
		b = pool.Status.Demand.Budget
	}
	ann := text.Cut(pool.Annotations[gpupoolv1.AnnotationResetDemandBudget], 256)
	if ann != "" && (b == nil || b.ResetToken != ann) {
		return now, ann
	}
	if b != nil && b.ResetTime != nil {
		return b.ResetTime.Time, b.ResetToken
	}
	return time.Time{}, ""
}

// BudgetStatus is status.demand.budget.
func BudgetStatus(b plan.DemandBudget, since time.Time, token string) *gpupoolv1.DemandBudget {
	out := &gpupoolv1.DemandBudget{Used: int32(b.Used), Max: int32(b.Max), ResetToken: token}
	if !b.FreeAt.IsZero() {
		out.NextAt = &metav1.Time{Time: b.FreeAt}
	}
	if !since.IsZero() {
		out.ResetTime = &metav1.Time{Time: since}
	}
	return out
}
