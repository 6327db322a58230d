package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Demand sizes a layout by count (issue 38, point 3): a BringIn rule with
// countFromDemand {min, max} makes the count the layout converts follow the GPUs its
// work needs. DecideCount runs once a pass has observed the world and resolved the
// layouts by count (it needs what a step would disrupt, which the resolver counts on the
// same snapshot), after Decide has chosen the layout:
//
//   - a layout being brought in gets the count its demand needs now, when the rule's
//     windows are open (else its convert.count); an override gets convert.count;
//   - an active, settled layout steps to the count its demand needs, while the rule's
//     windows are open, within the guard rails of a demand switch: minDwell since the
//     last switch or step ended, cooldown since the last started, the switch budget,
//     and the disruption limits (maxEvictions; no do-not-disrupt pod or Job near
//     completion). A step up waits until the demand has held for the rule's `for`. A
//     step that evicts is announced warnAhead before it starts. Where the whole step is
//     not allowed, the largest part of it that is is taken;
//   - a switch or step in flight keeps its count.
//
// A step is a transition to the active layout with another count: it is recorded in
// status.history and counts toward the cooldown and the budget like any switch.

// CountInput is what DecideCount needs besides the spec and the time.
type CountInput struct {
	// Demand is the input Decide had this pass, with the timers it returned.
	Demand *DemandInput
	// Layout is the layout the pass makes, Reason why (Decide's decision).
	Layout string
	Reason gpupoolv1.DesiredReason
	// Active is the count in effect (status.activeCount) when Layout is the active
	// layout; 0 when none is recorded (convert.count is then in effect).
	Active int
	// InFlight is the count of the transition to Layout in flight, 0 if none is.
	InFlight int
	// PerGPU is how many pod GPUs one converted GPU serves (Resolution.PerGPU).
	PerGPU int64
	// Step is the step announced on an earlier pass (status.demand.step), nil if none.
	Step *AnnouncedStep
	// Disruption is what making the layout with count GPUs converted would disrupt,
	// from the world observed now; an error when that count cannot be resolved.
	Disruption func(count int) (StepCost, error)
	// Estimate asks for the count a switch to Layout would make it with, for a layout
	// the pass does not make: its resolution then tells demand what bringing it in
	// would disrupt (the next pass's DemandInput.Observed).
	Estimate bool
}

// StepCost is what a step disrupts: GPU pods evicted, and among them do-not-disrupt pods
// and pods of Jobs near completion.
type StepCost struct {
	Evictions, DoNotDisrupt, NearCompletion int
}

// AnnouncedStep is a count step decided at Decided that starts at At.
type AnnouncedStep struct {
	Layout   string
	From, To int
	Decided  time.Time
	At       time.Time
	Message  string
}

// CountDecision is the count a pass makes its layout by count with.
type CountDecision struct {
	// Count is the count to make; 0 when the layout is not by count.
	Count int
	// Sized: demand sized the count (countFromDemand applies to the layout).
	Sized bool
	// Step is a step announced and not yet started, to be kept for the next pass.
	Step *AnnouncedStep
	// Message says what demand decided about the count, or why it did not step.
	Message string
	// Recheck is when the answer may change without anything else changing.
	Recheck time.Time
}

// maxStepTries bounds how many counts toward the wanted one are tried when the whole
// step is not allowed.
const maxStepTries = 8

// DecideCount returns the count the pass makes in.Layout with. It is pure.
func DecideCount(spec *gpupoolv1.GPUPoolProfileSpec, now time.Time, in CountInput) (CountDecision, error) {
	i := slices.IndexFunc(spec.Layouts, func(l gpupoolv1.Layout) bool { return l.Name == in.Layout })
	if i < 0 || spec.Layouts[i].Convert == nil {
		return CountDecision{}, nil
	}
	specCount := int(spec.Layouts[i].Convert.Count)
	cf, ruleIndex := countRule(spec.Demand, in.Layout)
	if cf == nil || in.Demand == nil {
		return CountDecision{Count: specCount}, nil
	}
	s, err := compile(spec)
	if err != nil {
		return CountDecision{}, err
	}
	p, err := compilePolicy(spec.Demand, s)
	if err != nil {
		return CountDecision{}, err
	}
	r := &demandRun{policy: p, sched: s, spec: spec, now: now, in: in.Demand, switches: distinctSwitches(in.Demand.Switches),
		timers: in.Demand.Timers}
	r.inflight = r.inFlight()
	c := &counting{demandRun: r, in: in, rule: &p.rules[ruleIndex], min: int(cf.Min), max: int(cf.Max), specCount: specCount}
	out := c.decide()
	out.Sized = true
	out.Message = strings.Join(r.notes, "; ")
	out.Recheck = r.recheck
	return out, nil
}

// countRule is the countFromDemand of the layout's BringIn rule, and the rule's index.
func countRule(dp *gpupoolv1.DemandPolicy, layout string) (*gpupoolv1.CountFromDemand, int) {
	if dp == nil {
		return nil, -1
	}
	for i, ru := range dp.Rules {
		if ru.Layout == layout && ru.Action == gpupoolv1.DemandBringIn {
			return ru.CountFromDemand, i
		}
	}
	return nil, -1
}

// counting is one DecideCount call.
type counting struct {
	*demandRun
	in            CountInput
	rule          *rule
	min, max      int
	specCount     int
	need, perGPU  int64
	pending, runs int64
}

func (c *counting) decide() CountDecision {
	layout := c.in.Layout
	o := c.in.Demand.Observed[layout]
	c.pending, c.runs = o.PendingGPUs, o.RunningGPUs
	c.need, c.perGPU = c.pending+c.runs, max(c.in.PerGPU, 1)
	want := c.wanted()
	_, open := c.rule.openUntil(c.now)
	switch {
	case c.inflight == layout && c.in.InFlight > 0:
		c.note("layout %s: the switch to %d GPUs converted is in progress; the count follows demand once it is done", layout, c.in.InFlight)
		return CountDecision{Count: c.in.InFlight}
	case c.in.Reason == gpupoolv1.DesiredByOverride:
		return CountDecision{Count: c.specCount}
	case c.in.Estimate || c.inflight != "" || c.in.Demand.Active != layout:
		if !open {
			if !c.in.Estimate {
				c.wakeAtOpening(c.rule)
			}
			return CountDecision{Count: c.specCount}
		}
		// Brought in: the count its demand needs, or the largest count down to min
		// whose switch the disruption limits allow.
		n, _, why := c.allowedStep(c.min-1, want)
		if n < c.min {
			n = c.min
		}
		if !c.in.Estimate {
			msg := fmt.Sprintf("layout %s is made with %d GPUs converted: %s", layout, n, c.needs())
			if n != want {
				msg += fmt.Sprintf("; not %s", why)
			}
			c.note("%s", msg)
		}
		return CountDecision{Count: n}
	}
	cur := c.in.Active
	if cur == 0 {
		cur = c.specCount
	}
	out := CountDecision{Count: cur}
	switch {
	case !open:
		c.wakeAtOpening(c.rule)
		c.note("layout %s keeps %d GPUs converted: outside the windows of demand.rules[%d]", layout, cur, c.rule.index)
		return out
	case want == cur:
		c.note("layout %s: %d GPUs converted serve its demand (%s)", layout, cur, c.needs())
		return out
	case want > cur && !c.heldFor(c.timers.PendingSince, layout, c.rule.hold):
		c.note("layout %s: %s; it steps from %d to %d GPUs converted once that holds for %s", layout, c.needs(), cur, want, shortDuration(c.rule.hold))
		return out
	}
	if why := c.timeGuards(); why != "" {
		c.note("layout %s does not step from %d to %d GPUs converted: %s", layout, cur, want, why)
		return out
	}
	to, cost, why := c.allowedStep(cur, want)
	if to == cur {
		c.note("layout %s does not step from %d to %d GPUs converted: %s", layout, cur, want, why)
		return out
	}
	msg := fmt.Sprintf("steps layout %s from %d to %d GPUs converted (demand.rules[%d].countFromDemand): %s", layout, cur, to, c.rule.index, c.needs())
	if to != want {
		msg += fmt.Sprintf("; not %s", why)
	}
	evicts := c.in.Demand.WarnAhead > 0 && cost.Evictions > 0
	st := c.in.Step
	if st == nil || st.Layout != layout || st.From != cur || st.To != to || (evicts && st.At.Before(st.Decided.Add(c.in.Demand.WarnAhead))) {
		at := c.now
		if evicts {
			at = c.now.Add(c.in.Demand.WarnAhead)
		}
		st = &AnnouncedStep{Layout: layout, From: cur, To: to, Decided: c.now, At: at, Message: msg}
	}
	if c.now.Before(st.At) {
		c.wakeAt(st.At)
		c.note("demand step of layout %s from %d to %d GPUs converted starts at %s, after the warning (warnAhead %s): it evicts %d GPU pods; %s",
			layout, cur, to, c.format(st.At), shortDuration(c.in.Demand.WarnAhead), cost.Evictions, msg)
		out.Step = st
		return out
	}
	c.note("demand %s", msg)
	out.Count = to
	return out
}

// wanted is the count the demand needs: enough converted GPUs for the GPUs pending for
// the layout and running on its converted nodes, within min and max.
func (c *counting) wanted() int {
	n := int((c.need + c.perGPU - 1) / c.perGPU)
	return min(max(n, c.min), c.max)
}

func (c *counting) needs() string {
	return fmt.Sprintf("%d GPUs pending for it and %d in use on its converted nodes need %d converted GPUs of %d pod GPUs each (min %d, max %d)",
		c.pending, c.runs, (c.need+c.perGPU-1)/c.perGPU, c.perGPU, c.min, c.max)
}

// allowedStep is the count nearest to want, from cur toward it, whose step the
// disruption limits allow, with its cost and why want itself is not (""); cur and why
// not when none is.
func (c *counting) allowedStep(cur, want int) (int, StepCost, string) {
	dir := 1
	if want < cur {
		dir = -1
	}
	var firstWhy string
	for n, tries := want, 0; n != cur && tries < maxStepTries; n, tries = n-dir, tries+1 {
		why := ""
		cost, err := c.in.Disruption(n)
		switch {
		case err != nil:
			why = err.Error()
		case cost.DoNotDisrupt > 0:
			why = fmt.Sprintf("it would evict %d do-not-disrupt pods", cost.DoNotDisrupt)
		case cost.NearCompletion > 0:
			why = fmt.Sprintf("it would evict %d pods of Jobs near completion", cost.NearCompletion)
		case cost.Evictions > c.policy.maxEvicted:
			why = fmt.Sprintf("it would evict %d GPU pods (maxEvictions %d)", cost.Evictions, c.policy.maxEvicted)
		}
		if why == "" {
			return n, cost, firstWhy
		}
		if firstWhy == "" {
			firstWhy = fmt.Sprintf("to %d: %s", n, why)
		}
	}
	return cur, StepCost{}, firstWhy
}

// PerGPU is how many pod GPUs one of the resolution's converted GPUs serves: the vGPUs
// of the candidates it runs (each advertised gpuReplicas times), per converted GPU; at
// least 1.
func (r *Resolution) PerGPU() int64 {
	if r == nil || len(r.Chosen) == 0 {
		return 1
	}
	per := int64(max(r.VGPUs, 1))
	if g := r.Layout.GPUReplicas; g != nil && *g > 1 {
		per *= int64(*g)
	}
	var workers int64
	for _, g := range r.Chosen {
		workers += int64(len(g.Workers))
	}
	return max(workers*per/int64(len(r.Chosen)), 1)
}
