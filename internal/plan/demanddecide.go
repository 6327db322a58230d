package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// maxNamed is how many pods a demand message names.
const maxNamed = 5

// demandMove is a switch demand would start: to layout, by the rule, because of why.
type demandMove struct {
	layout string
	action gpupoolv1.DemandAction
	rule   *rule
	why    string
}

// decide applies demand to out.Decision, Desired's answer.
func (r *demandRun) decide(out *DemandDecision) {
	d := out.Decision
	if d.Reason == gpupoolv1.DesiredByOverride {
		r.cancel("an override is in force")
		r.note("override in force: demand does not act")
		return
	}
	if r.in.Active == "" {
		r.cancel("no layout is active")
		r.note("no layout active yet: demand acts once one is")
		return
	}
	cur := cmp.Or(r.inflight, r.in.Active)
	if sw := r.timers.Switch; sw != nil && sw.Layout == cur {
		r.timers.Switch = nil // it started
	}
	if cur != d.Layout {
		// The schedule wants another layout: demand may hold the one the pool has.
		if hold, ok := r.hold(cur, d); ok {
			out.Decision = hold
			r.note("%s", hold.Message)
			return
		}
		r.cancel(fmt.Sprintf("the schedule wants layout %s", d.Layout))
		return
	}
	if r.inflight != "" {
		r.cancel(fmt.Sprintf("a switch to layout %s is in progress", r.inflight))
		return
	}
	mv := r.candidate(cur)
	if mv == nil {
		why := "its demand is gone"
		if sw := r.timers.Switch; sw != nil && r.whyNot[sw.Layout] != "" {
			why = r.whyNot[sw.Layout]
		}
		r.cancel(why)
		return
	}
	if why := r.guards(mv); why != "" {
		r.cancel(why)
		r.note("demand for layout %s does not switch: %s", mv.layout, why)
		return
	}
	sw := r.timers.Switch
	evicts := r.in.WarnAhead > 0 && r.in.Observed[mv.layout].Evictions > 0
	// Note: a switch decided when it evicted nothing is announced afresh once it would
	// evict: it was never warned.
	if sw == nil || sw.Layout != mv.layout || sw.Action != mv.action || (evicts && sw.At.Before(sw.Decided.Add(r.in.WarnAhead))) {
		at := r.now
		if evicts {
			at = r.now.Add(r.in.WarnAhead)
		}
		sw = &AnnouncedSwitch{Layout: mv.layout, Action: mv.action, Decided: r.now, At: at, Message: mv.why}
	}
	// Only a warned switch is remembered (until it starts); one without a warning is
	// decided again each pass.
	r.timers.Switch = nil
	if sw.At.After(sw.Decided) {
		r.timers.Switch = sw
	}
	if r.now.Before(sw.At) {
		if d.Next == nil || sw.At.Before(d.Next.At) {
			out.Next = &Boundary{Layout: mv.layout, At: sw.At}
		}
		r.wakeAt(sw.At)
		r.note("demand switch to layout %s starts at %s, after the warning (warnAhead %s): %s",
			mv.layout, r.format(sw.At), shortDuration(r.in.WarnAhead), mv.why)
		return
	}
	out.Decision = Decision{Layout: mv.layout, Reason: gpupoolv1.DesiredByDemand, Window: -1, Message: "demand: " + mv.why}
	r.note("demand switches to layout %s: %s", mv.layout, mv.why)
}

// waits notes why demand for a layout does not act this pass; an announced switch to
// it that is cancelled gives that as its reason.
func (r *demandRun) waits(layout, format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	if r.whyNot == nil {
		r.whyNot = map[string]string{}
	}
	r.whyNot[layout] = why
	r.note("layout %s: %s", layout, why)
}

// cancel drops an announced switch that no longer holds, saying why.
func (r *demandRun) cancel(why string) {
	if sw := r.timers.Switch; sw != nil {
		r.note("demand switch to layout %s announced at %s is cancelled: %s", sw.Layout, r.format(sw.Decided), why)
		r.timers.Switch = nil
	}
}

// hold returns the decision that keeps cur, the layout the pool has or is switching to,
// against the schedule's d, when a rule or the dwell of a layout demand brought says so.
func (r *demandRun) hold(cur string, d Decision) (Decision, bool) {
	h := Decision{Layout: cur, Reason: gpupoolv1.DesiredByDemand, Window: -1}
	// Note: only a layout demand brought in is held while in use; one the schedule or an
	// override brought in leaves when the schedule says, whatever runs on it.
	if ru := r.policy.find(cur, gpupoolv1.DemandBringIn); ru != nil && r.broughtByDemand(cur) {
		if until, open := ru.openUntil(r.now); open && !r.heldFor(r.timers.IdleSince, cur, ru.idle) {
			h.Message = fmt.Sprintf("demand keeps layout %s (demand.rules[%d]) over the schedule's %s: %s", cur, ru.index, d.Layout, r.use(cur, ru))
			if !until.IsZero() {
				h.Next = &Boundary{Layout: d.Layout, At: until}
				r.wakeAt(until)
			}
			return h, true
		}
	}
	if ru := r.policy.find(d.Layout, gpupoolv1.DemandSkip); ru != nil {
		if until, open := ru.openUntil(r.now); open && r.unwanted(d.Layout, ru) {
			h.Message = fmt.Sprintf("demand skips layout %s (demand.rules[%d]): nothing is pending for it or runs on it; layout %s stays", d.Layout, ru.index, cur)
			h.Next = d.Next
			if !until.IsZero() && (d.Next == nil || until.Before(d.Next.At)) {
				h.Next = &Boundary{Layout: d.Layout, At: until}
				r.wakeAt(until)
			}
			if h.Next != nil && h.Next.Layout == cur {
				h.Next = nil
			}
			return h, true
		}
	}
	if r.inflight == cur && r.inFlightBy() == gpupoolv1.DesiredByDemand {
		// A switch demand started goes on to its layout, which then stays its dwell.
		h.Message = fmt.Sprintf("demand keeps the switch to layout %s it started; the layout then stays at least minDwell %s",
			cur, shortDuration(r.policy.minDwell))
		return h, true
	}
	if at, by := r.arrival(); cur == r.in.Active && r.inflight == "" && by == gpupoolv1.DesiredByDemand && r.now.Before(at.Add(r.policy.minDwell)) {
		end := at.Add(r.policy.minDwell)
		h.Message = fmt.Sprintf("demand keeps layout %s, which it brought in at %s, until its dwell ends at %s (minDwell %s)",
			cur, r.format(at), r.format(end), shortDuration(r.policy.minDwell))
		h.Next = &Boundary{Layout: d.Layout, At: end}
		r.wakeAt(end)
		return h, true
	}
	return Decision{}, false
}

// closesSoon says whether the rule's window closes before a layout brought in now (after
// its warning, if it evicts; an announced switch at its announced start) could stay
// minDwell: the schedule would take it back at once.
func (r *demandRun) closesSoon(ru *rule, o LayoutDemand) bool {
	until, open := ru.openUntil(r.now)
	if !open || until.IsZero() {
		return false
	}
	start := r.now
	switch sw := r.timers.Switch; {
	case sw != nil && sw.Layout == ru.layout:
		// Announced: it starts at its announced start, which a later pass does not move.
		if sw.At.After(start) {
			start = sw.At
		}
	case r.in.WarnAhead > 0 && o.Evictions > 0:
		start = start.Add(r.in.WarnAhead)
	}
	return until.Before(start.Add(r.policy.minDwell))
}

// unwanted says whether a layout a Skip rule names has no demand: nothing held pending
// for the rule's `for`, nothing running on its nodes.
func (r *demandRun) unwanted(layout string, ru *rule) bool {
	return r.in.Observed[layout].RunningGPUs == 0 && !r.heldFor(r.timers.PendingSince, layout, ru.hold)
}

// use says what keeps a layout in use, for messages.
func (r *demandRun) use(layout string, ru *rule) string {
	o := r.in.Observed[layout]
	var parts []string
	if o.PendingGPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d GPUs pending for it (%s)", o.PendingGPUs, named(o.Pending)))
	}
	if o.RunningGPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d GPUs in use on its nodes", o.RunningGPUs))
	}
	if since, ok := r.timers.IdleSince[layout]; ok {
		parts = append(parts, fmt.Sprintf("idle since %s, let go at %s (idleFor %s)", r.format(since), r.format(since.Add(ru.idle)), shortDuration(ru.idle)))
	}
	return strings.Join(parts, ", ")
}

// candidate returns the switch demand would start from cur, the schedule's layout the
// pool has: the BringIn rule with the most GPUs held pending, else the end of cur by a
// Skip rule when it has been idle for idleFor (for the rule's instead, by default
// defaultLayout). It notes why other rules do not act.
func (r *demandRun) candidate(cur string) *demandMove {
	var best *demandMove
	var bestGPUs int64
	for i := range r.policy.rules {
		ru := &r.policy.rules[i]
		o := r.in.Observed[ru.layout]
		if ru.action != gpupoolv1.DemandBringIn || ru.layout == cur || o.PendingGPUs == 0 {
			continue
		}
		switch _, open := ru.openUntil(r.now); {
		case !open:
			r.waits(ru.layout, "%d GPUs pending, outside the windows of demand.rules[%d]", o.PendingGPUs, ru.index)
			r.wakeAtOpening(ru)
		case o.PendingGPUs < ru.minGPUs:
			r.waits(ru.layout, "%d GPUs pending, below minGPUs %d", o.PendingGPUs, ru.minGPUs)
		case r.closesSoon(ru, o):
			until, _ := ru.openUntil(r.now)
			r.waits(ru.layout, "%d GPUs pending, but the window of demand.rules[%d] closes at %s, before the layout could stay its minDwell %s",
				o.PendingGPUs, ru.index, r.format(until), shortDuration(r.policy.minDwell))
		case !r.heldFor(r.timers.PendingSince, ru.layout, ru.hold):
			since := r.timers.PendingSince[ru.layout]
			msg := fmt.Sprintf("%d GPUs pending since %s, demand acts at %s (for %s)", o.PendingGPUs,
				r.format(since), r.format(since.Add(ru.hold)), shortDuration(ru.hold))
			if n, free := r.budget(); n >= r.policy.maxSwitches {
				msg += fmt.Sprintf(", but the switch budget is spent until %s (%d switches in 24h, maxSwitchesPerDay %d)", r.format(free), n, r.policy.maxSwitches)
			}
			r.waits(ru.layout, "%s", msg)
		case best == nil || o.PendingGPUs > bestGPUs:
			best, bestGPUs = &demandMove{layout: ru.layout, action: ru.action, rule: ru,
				why: fmt.Sprintf("brings layout %s in (demand.rules[%d]): %d pods pending for it request %d GPUs since %s (%s)",
					ru.layout, ru.index, len(o.Pending), o.PendingGPUs, r.format(r.timers.PendingSince[ru.layout]), named(o.Pending))}, o.PendingGPUs
		}
	}
	if best != nil {
		return best
	}
	ru := r.policy.find(cur, gpupoolv1.DemandSkip)
	if ru == nil {
		return nil
	}
	instead := cmp.Or(ru.instead, r.spec.DefaultLayout)
	if instead == cur {
		return nil
	}
	if _, open := ru.openUntil(r.now); !open {
		r.wakeAtOpening(ru) // an idle layout is ended once the rule's window opens
		return nil
	}
	since, idle := r.timers.IdleSince[cur]
	if !r.heldFor(r.timers.IdleSince, cur, ru.idle) {
		if idle {
			r.note("layout %s: idle since %s, demand ends it at %s (idleFor %s)", cur, r.format(since), r.format(since.Add(ru.idle)), shortDuration(ru.idle))
		}
		return nil
	}
	return &demandMove{layout: instead, action: gpupoolv1.DemandSkip, rule: ru,
		why: fmt.Sprintf("ends layout %s (demand.rules[%d]): nothing pending for it or running on it since %s; layout %s instead",
			cur, ru.index, r.format(since), instead)}
}

// wakeAtOpening makes the next opening of the rule's windows a recheck: demand that
// waits for a window acts when it opens, not at the next resync.
func (r *demandRun) wakeAtOpening(ru *rule) {
	for w := range ru.windows {
		r.wakeAt(ru.windows[w].next(r.now))
	}
}

// guards returns why demand must not start mv now, "" when it may: timeGuards, then the
// disruption limit.
func (r *demandRun) guards(mv *demandMove) string {
	if why := r.timeGuards(); why != "" {
		return why
	}
	p := r.policy
	o := r.in.Observed[mv.layout]
	switch {
	case len(o.DoNotDisrupt) > 0:
		return fmt.Sprintf("it would evict do-not-disrupt pods (%s)", named(o.DoNotDisrupt))
	case len(o.NearCompletion) > 0:
		return fmt.Sprintf("it would evict pods of Jobs near completion (%s)", named(o.NearCompletion))
	case o.Evictions > p.maxEvicted:
		return fmt.Sprintf("it would evict %d GPU pods (maxEvictions %d)", o.Evictions, p.maxEvicted)
	}
	return ""
}

// timeGuards returns why demand must not start a switch or a step now for time's
// sake, "" when it may: the dwell of the active layout, the cooldown, the switch budget.
func (r *demandRun) timeGuards() string {
	p := r.policy
	if at, _ := r.arrival(); !at.IsZero() && r.now.Before(at.Add(p.minDwell)) {
		r.wakeAt(at.Add(p.minDwell))
		return fmt.Sprintf("layout %s is active since %s and stays until %s (minDwell %s)",
			r.in.Active, r.format(at), r.format(at.Add(p.minDwell)), shortDuration(p.minDwell))
	}
	if last := r.lastStart(); !last.IsZero() && r.now.Before(last.Add(p.cooldown)) {
		r.wakeAt(last.Add(p.cooldown))
		return fmt.Sprintf("the last switch started at %s; cooldown until %s (cooldown %s)",
			r.format(last), r.format(last.Add(p.cooldown)), shortDuration(p.cooldown))
	}
	if n, free := r.budget(); n >= p.maxSwitches {
		r.wakeAt(free)
		return fmt.Sprintf("switch budget spent: %d scheduled and demand switches started in the last 24h (maxSwitchesPerDay %d; overrides do not count); the next may start at %s (or reset it: kubectl gpupool reset-budget)",
			n, p.maxSwitches, r.format(free))
	}
	return ""
}

// arrival is when the active layout became active, and why: the newest completed switch
// to it. Zero when the history does not say.
func (r *demandRun) arrival() (time.Time, gpupoolv1.DesiredReason) {
	var at time.Time
	var by gpupoolv1.DesiredReason
	for _, s := range r.switches {
		if s.To == r.in.Active && !s.End.IsZero() && s.End.After(at) {
			at, by = s.End, s.Reason
		}
	}
	return at, by
}

// distinctSwitches merges the entries of one switch (same ID) into one: the earliest
// start, the end if any entry has one, aborted if any entry says so, the first reason
// given. Entries without an ID are each a switch of their own.
func distinctSwitches(in []PastSwitch) []PastSwitch {
	out := make([]PastSwitch, 0, len(in))
	at := map[string]int{}
	for _, s := range in {
		i, seen := at[s.ID]
		if s.ID == "" || !seen {
			if s.ID != "" {
				at[s.ID] = len(out)
			}
			out = append(out, s)
			continue
		}
		m := &out[i]
		if s.Start.Before(m.Start) {
			m.Start = s.Start
		}
		if m.End.IsZero() {
			m.End = s.End
		}
		m.Aborted = m.Aborted || s.Aborted
		m.Reason = cmp.Or(m.Reason, s.Reason)
	}
	return out
}

// inFlight is the layout of the switch in flight: InFlight, unless the newest switch to
// it that has not completed was aborted. An aborted switch makes nothing and holds
// nothing, so that the schedule, demand's windows and idleness apply again; it still
// counts toward the cooldown and the budget.
func (r *demandRun) inFlight() string {
	var newest *PastSwitch
	for i := range r.switches {
		s := &r.switches[i]
		if s.To == r.in.InFlight && s.End.IsZero() && (newest == nil || !s.Start.Before(newest.Start)) {
			newest = s
		}
	}
	if newest != nil && newest.Aborted {
		return ""
	}
	return r.in.InFlight
}

// broughtByDemand says whether demand brought layout cur in: the switch to it in flight
// was started by demand, or, with none in flight, the newest completed switch to the
// active layout was.
func (r *demandRun) broughtByDemand(cur string) bool {
	if r.inflight != "" {
		return cur == r.inflight && r.inFlightBy() == gpupoolv1.DesiredByDemand
	}
	at, by := r.arrival()
	return cur == r.in.Active && !at.IsZero() && by == gpupoolv1.DesiredByDemand
}

// inFlightBy is why the switch in flight started: the newest switch to InFlight that
// has not ended.
func (r *demandRun) inFlightBy() gpupoolv1.DesiredReason {
	var at time.Time
	var by gpupoolv1.DesiredReason
	for _, s := range r.switches {
		if s.To == r.inflight && s.End.IsZero() && !s.Start.Before(at) {
			at, by = s.Start, s.Reason
		}
	}
	return by
}

// lastStart is when the newest switch started, zero if none did.
func (r *demandRun) lastStart() time.Time {
	var last time.Time
	for _, s := range r.switches {
		if s.Start.After(last) {
			last = s.Start
		}
	}
	return last
}

// budget counts the switches that started in the last 24 hours (and not before an
// admin's reset) and returns when one more will be allowed (the instant enough of them
// are older than 24 hours). Overrides do not count: they are a person's own decision,
// and trying one must not silence demand for a day; the schedule's switches and
// demand's own do.
func (r *demandRun) budget() (int, time.Time) {
	var starts []time.Time
	for _, s := range r.switches {
		if s.Reason != gpupoolv1.DesiredByOverride && s.Start.After(r.now.Add(-budgetPeriod)) && !s.Start.Before(r.in.BudgetSince) {
			starts = append(starts, s.Start)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	n := len(starts)
	if n < r.policy.maxSwitches {
		return n, r.now
	}
	return n, starts[n-r.policy.maxSwitches].Add(budgetPeriod)
}

// named lists up to maxNamed names, and how many more there are.
func named(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}
