package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
)

// Defaults of spec.demand, as the CRD writes them; repeated here for specs that reach the
// planner without the API server's defaulting (tests, older CRDs).
const (
	DefaultMinDwell          = 30 * time.Minute
	DefaultCooldown          = 15 * time.Minute
	DefaultMaxSwitchesPerDay = 4
	DefaultDemandFor         = 2 * time.Minute
	DefaultIdleFor           = 10 * time.Minute
)

// budgetPeriod is the period the switch budget (maxSwitchesPerDay) counts over.
const budgetPeriod = 24 * time.Hour

// LayoutDemand is the demand observed for one layout in one pass, summed over the
// sources that see demand (pending pods; a queue such as Kueue's can add its workloads).
type LayoutDemand struct {
	// PendingGPUs is what the work waiting for the layout requests; Pending names it
	// ("pod ns/name"), sorted.
	PendingGPUs int64
	Pending     []string
	// RunningGPUs is what the pods on the layout's nodes request, except on nodes that
	// every other layout keeps as they are (no switch away from the layout disrupts them).
	RunningGPUs int64
	// Evictions is how many GPU pods a switch from the active layout to this one would
	// evict; DoNotDisrupt and NearCompletion name those that must not be disrupted.
	Evictions      int
	DoNotDisrupt   []string
	NearCompletion []string
}

// Add sums another source's observation into d.
func (d *LayoutDemand) Add(o LayoutDemand) {
	d.PendingGPUs += o.PendingGPUs
	d.Pending = append(d.Pending, o.Pending...)
	d.RunningGPUs += o.RunningGPUs
	d.Evictions += o.Evictions
	d.DoNotDisrupt = append(d.DoNotDisrupt, o.DoNotDisrupt...)
	d.NearCompletion = append(d.NearCompletion, o.NearCompletion...)
	slices.Sort(d.Pending)
	slices.Sort(d.DoNotDisrupt)
	slices.Sort(d.NearCompletion)
}

// DemandTimers are what demand remembers from pass to pass: instants on the operator's
// own clock, which cannot be observed again.
type DemandTimers struct {
	// PendingSince is, per layout, since when its pending GPUs have been at or above the
	// threshold; IdleSince since when nothing was pending for it and nothing ran on it.
	PendingSince map[string]time.Time
	IdleSince    map[string]time.Time
	// Switch is a demand switch announced ahead (warnAhead), nil if none.
	Switch *AnnouncedSwitch
}

// AnnouncedSwitch is a demand switch decided at Decided that starts at At.
type AnnouncedSwitch struct {
	Layout  string
	Action  gpupoolv1.DemandAction
	Decided time.Time
	At      time.Time
	Message string
}

// PastSwitch is a transition that started: status.transition and status.history.
type PastSwitch struct {
	// ID is the transition's id. Entries with the same ID are one switch, counted once:
	// an aborted switch is in status.transition and in status.history, and a history may
	// record one switch's end more than once (aborted, then superseded).
	ID     string
	To     string
	Reason gpupoolv1.DesiredReason
	Start  time.Time
	// End is when it completed, zero if it did not (in progress, superseded, aborted).
	End time.Time
	// Aborted: a drain timed out and the switch was given up. An aborted switch is not in
	// flight: it makes nothing and holds nothing.
	Aborted bool
}

// DemandInput is what Decide needs besides the spec and the time.
type DemandInput struct {
	// Active is status.activeLayout; InFlight the layout of the transition in status.
	// When that transition is aborted (its PastSwitch says so) it is not in flight:
	// Decide then treats the pool as settled on Active.
	Active, InFlight string
	// Observed is the demand per layout this pass.
	Observed map[string]LayoutDemand
	// Timers are those Decide returned last time.
	Timers DemandTimers
	// Switches are the transitions that started, in any order.
	Switches []PastSwitch
	// WarnAhead is how long a demand switch that evicts pods is announced ahead.
	WarnAhead time.Duration
	// BudgetSince is when an admin last reset the switch budget (zero: never): switches
	// that started before it do not count.
	BudgetSince time.Time
}

// DemandBudget is the switch budget (maxSwitchesPerDay) as Decide counted it.
type DemandBudget struct {
	// Used is how many switches count: started in the last 24 hours (and since
	// BudgetSince), scheduled or demanded; overrides do not count.
	Used, Max int
	// FreeAt is when one more switch is allowed; zero while the budget is not spent.
	FreeAt time.Time
}

// DemandDecision is Desired's answer with demand applied.
type DemandDecision struct {
	Decision
	// Timers are to be kept for the next call.
	Timers DemandTimers
	// Message is demand's own account: what it decided, or why it did not act.
	Message string
	// Recheck is the next instant at which a timer or a guard runs out, zero if none:
	// the answer may change then without anything else changing.
	Recheck time.Time
	// Budget is the switch budget now.
	Budget DemandBudget
}

// Decide returns the layout the pool should have at now, with demand applied within its
// guard rails. The precedence is override > demand > schedule > default: Decide starts
// from Desired and changes its answer only when spec.demand allows it.
//
// It is pure: the same spec, now and input give the same answer. What it must remember
// (since when demand has held, an announced switch) it returns in Timers, and the
// switches that happened it reads from the input, so the caller persists only those.
//
//   - A BringIn rule whose window is open brings its layout in when the GPUs pending for
//     it have been at or above minGPUs for `for`, and keeps it, against the schedule,
//     until the layout has been idle (nothing pending, no GPU pod on its nodes) for
//     idleFor.
//   - A Skip rule whose window is open keeps the pool off its layout while the schedule
//     wants it and nothing is pending for it (for `for`) or runs on it; an active layout
//     that has been idle for idleFor is ended, back to defaultLayout.
//   - Demand starts a switch only from a settled pool on the schedule's layout, and only
//     when the layout it leaves has been active for minDwell, no switch started within
//     cooldown, fewer than maxSwitchesPerDay started in the last 24 hours, no pod it
//     would evict is do-not-disrupt or of a Job near completion, and it evicts at most
//     maxEvictions GPU pods. A switch that evicts is announced warnAhead before it
//     starts. A layout demand brought in is let go no earlier than minDwell after it
//     became active.
func Decide(spec *gpupoolv1.GPUPoolProfileSpec, now time.Time, in *DemandInput) (DemandDecision, error) {
	d, err := Desired(spec, now)
	if err != nil {
		return DemandDecision{}, err
	}
	out := DemandDecision{Decision: d}
	if spec.Demand == nil || in == nil {
		return out, nil
	}
	s, err := compile(spec)
	if err != nil {
		return DemandDecision{}, err
	}
	p, err := compilePolicy(spec.Demand, s)
	if err != nil {
		return DemandDecision{}, err
	}
	r := &demandRun{policy: p, sched: s, spec: spec, now: now, in: in, switches: distinctSwitches(in.Switches)}
	r.inflight = r.inFlight()
	r.timers = r.tick()
	r.decide(&out)
	out.Timers = r.timers
	out.Message = strings.Join(r.notes, "; ")
	out.Recheck = r.recheck
	n, free := r.budget()
	out.Budget = DemandBudget{Used: n, Max: p.maxSwitches}
	if n >= p.maxSwitches {
		out.Budget.FreeAt = free
	}
	return out, nil
}

// demandPolicy is spec.demand compiled, with its defaults applied.
type demandPolicy struct {
	rules                   []rule
	minDwell, cooldown      time.Duration
	maxSwitches, maxEvicted int
}

type rule struct {
	index      int
	layout     string
	instead    string
	action     gpupoolv1.DemandAction
	windows    []window
	minGPUs    int64
	hold, idle time.Duration
}

func compilePolicy(dp *gpupoolv1.DemandPolicy, s *schedule) (*demandPolicy, error) {
	p := &demandPolicy{
		minDwell:    durationOr(dp.MinDwell, DefaultMinDwell),
		cooldown:    durationOr(dp.Cooldown, DefaultCooldown),
		maxSwitches: DefaultMaxSwitchesPerDay,
	}
	if dp.MaxSwitchesPerDay != nil {
		p.maxSwitches = int(*dp.MaxSwitchesPerDay)
	}
	if dp.MaxEvictions != nil {
		p.maxEvicted = int(*dp.MaxEvictions)
	}
	for i, dr := range dp.Rules {
		r := rule{index: i, layout: dr.Layout, instead: dr.Instead, action: dr.Action, minGPUs: 1,
			hold: durationOr(dr.For, DefaultDemandFor), idle: durationOr(dr.IdleFor, DefaultIdleFor)}
		if dr.MinGPUs != nil {
			r.minGPUs = int64(*dr.MinGPUs)
		}
		for j, w := range dr.Windows {
			sched, err := cronspec.Parse(w.Start)
			if err != nil {
				return nil, fmt.Errorf("demand.rules[%d].windows[%d].start: %w", i, j, err)
			}
			if w.Duration.Duration <= 0 {
				return nil, fmt.Errorf("demand.rules[%d].windows[%d].duration %s must be positive", i, j, w.Duration.Duration)
			}
			r.windows = append(r.windows, window{index: j, loc: s.loc, duration: w.Duration.Duration, sched: onWallClock(sched),
				spec: gpupoolv1.Window{Layout: dr.Layout, Start: w.Start, Duration: w.Duration}})
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// IdleFor is how long a layout stays unused before demand lets it go: the idleFor of
// its BringIn rule, else of its Skip rule, else DefaultIdleFor. No hold of the layout
// lasts longer unused, not even one kept while the demand cannot be read.
func IdleFor(dp *gpupoolv1.DemandPolicy, layout string) time.Duration {
	if dp == nil {
		return DefaultIdleFor
	}
	for _, action := range []gpupoolv1.DemandAction{gpupoolv1.DemandBringIn, gpupoolv1.DemandSkip} {
		for _, r := range dp.Rules {
			if r.Layout == layout && r.Action == action {
				return durationOr(r.IdleFor, DefaultIdleFor)
			}
		}
	}
	return DefaultIdleFor
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// openUntil says whether the rule may act at t and, when its windows are open, until
// when (zero: no windows, always open).
func (r *rule) openUntil(t time.Time) (time.Time, bool) {
	if len(r.windows) == 0 {
		return time.Time{}, true
	}
	var until time.Time
	for i := range r.windows {
		if s, ok := r.windows[i].openedAt(t); ok {
			if end := s.Add(r.windows[i].duration); end.After(until) {
				until = end
			}
		}
	}
	return until, !until.IsZero()
}

// find returns the first rule with the layout and action.
func (p *demandPolicy) find(layout string, action gpupoolv1.DemandAction) *rule {
	for i := range p.rules {
		if p.rules[i].layout == layout && p.rules[i].action == action {
			return &p.rules[i]
		}
	}
	return nil
}

// threshold is the GPUs pending for a layout that count as demand for it.
func (p *demandPolicy) threshold(layout string) int64 {
	if r := p.find(layout, gpupoolv1.DemandBringIn); r != nil {
		return r.minGPUs
	}
	if r := p.find(layout, gpupoolv1.DemandSkip); r != nil {
		return r.minGPUs
	}
	return 1
}

// demandRun is one Decide call.
type demandRun struct {
	policy *demandPolicy
	sched  *schedule
	spec   *gpupoolv1.GPUPoolProfileSpec
	now    time.Time
	in     *DemandInput
	// switches are in.Switches, one entry per switch (distinctSwitches); inflight is the
	// layout of the switch in flight, "" when none is or it was aborted (inFlight).
	switches []PastSwitch
	inflight string
	timers   DemandTimers
	notes    []string
	// whyNot is, per layout, why its demand does not act this pass (waits).
	whyNot  map[string]string
	recheck time.Time
}

// tick carries the timers forward: a condition that holds keeps its start, one that
// starts to hold starts now, one that no longer holds is forgotten.
func (r *demandRun) tick() DemandTimers {
	t := DemandTimers{PendingSince: map[string]time.Time{}, IdleSince: map[string]time.Time{}, Switch: r.in.Timers.Switch}
	for _, l := range r.layouts() {
		o := r.in.Observed[l]
		carry(t.PendingSince, r.in.Timers.PendingSince, l, o.PendingGPUs >= r.policy.threshold(l), r.now)
		carry(t.IdleSince, r.in.Timers.IdleSince, l, o.PendingGPUs == 0 && o.RunningGPUs == 0, r.now)
	}
	return t
}

func carry(into, from map[string]time.Time, key string, holds bool, now time.Time) {
	if !holds {
		return
	}
	if since, ok := from[key]; ok && !since.After(now) {
		into[key] = since
		return
	}
	into[key] = now
}

// layouts are the layouts the rules name, in rule order, once each.
func (r *demandRun) layouts() []string {
	var out []string
	for _, ru := range r.policy.rules {
		if !slices.Contains(out, ru.layout) {
			out = append(out, ru.layout)
		}
	}
	return out
}

// heldFor says whether the condition timed in since has held for d; when it holds but
// not yet long enough, the instant it will is a recheck.
func (r *demandRun) heldFor(since map[string]time.Time, layout string, d time.Duration) bool {
	t, ok := since[layout]
	if !ok {
		return false
	}
	if r.now.Before(t.Add(d)) {
		r.wakeAt(t.Add(d))
		return false
	}
	return true
}

func (r *demandRun) wakeAt(t time.Time) {
	if t.After(r.now) && (r.recheck.IsZero() || t.Before(r.recheck)) {
		r.recheck = t
	}
}

func (r *demandRun) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *demandRun) format(t time.Time) string { return r.sched.format(t) }
