// Package replay runs a recorded trace (internal/trace) through the real demand decision
// (plan.Desired and plan.Decide, as the operator's pass calls them) under a spec, offline:
// it steps a clock over the trace's period, places the pods on the active layout's GPUs,
// feeds Decide what demand would observe, carries out the switches it answers (each
// taking the time the pool's history took), and measures what the work waited and what
// sat idle. kubectl gpupool simulate prints it; docs/simulate.md.
//
// Like test/demandsim it is a model of the cluster, not of the reconciler: the decision
// is the operator's on purpose (that is what it measures), the rest is this package's.
package replay

import (
	"fmt"
	"math"
	"slices"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/trace"
)

// DefaultStep is how often the replay decides: the operator decides on every change
// (within seconds); a step of 10 s keeps a week at 60,480 decisions.
const DefaultStep = 10 * time.Second

// DefaultSwitchTime is how long a switch takes when the trace's history has none to
// learn from.
const DefaultSwitchTime = 5 * time.Minute

// Options are how to replay.
type Options struct {
	// Step is the decision period; 0: DefaultStep.
	Step time.Duration
	// SwitchTime, when positive, is how long every switch takes; 0: learned from the
	// trace's completed switches (the median per target layout, else overall, else
	// DefaultSwitchTime).
	SwitchTime time.Duration
}

// Switch is a transition the replay carried out.
type Switch struct {
	From, To string
	Reason   gpupoolv1.DesiredReason
	Start    time.Time
	// End is when it completed (zero: still in flight when the trace ended, or
	// superseded).
	End time.Time
	// Evictions are the GPU pods it evicted.
	Evictions int
}

// Result is what a replay measured.
type Result struct {
	Switches  []Switch
	Evictions int
	// QueuedGPUHours: GPU-time batch pods (those with a recorded run: a Job's pod that
	// ran to its end) and Workloads waited; UnservedGPUHours: GPU-time the other pods
	// (services) were wanted and not running.
	QueuedGPUHours, UnservedGPUHours float64
	// IdleGPUHours: physical GPU time (GPU-equivalents) no pod used, switching included.
	IdleGPUHours float64
	// Waits are the batch pods' waits from arrival to their (last) start and the
	// Workloads' to their admission; Unstarted counts those never started or admitted.
	Waits     Waits
	Unstarted int
	// SwitchTimes are the switch durations used, by target layout.
	SwitchTimes map[string]time.Duration
}

// P50Wait, P95Wait and MeanWait summarise Waits.
func (r *Result) P50Wait() time.Duration  { return r.Waits.Quantile(0.5) }
func (r *Result) P95Wait() time.Duration  { return r.Waits.Quantile(0.95) }
func (r *Result) MeanWait() time.Duration { return r.Waits.Mean() }

// Waits are work's waits, from arrival to start (test/demandsim's too).
type Waits []time.Duration

// Mean is the waits' mean, 0 for none.
func (ws Waits) Mean() time.Duration {
	if len(ws) == 0 {
		return 0
	}
	var sum time.Duration
	for _, w := range ws {
		sum += w
	}
	return sum / time.Duration(len(ws))
}

// Quantile is the nearest-rank q-quantile, 0 for none.
func (ws Waits) Quantile(q float64) time.Duration {
	if len(ws) == 0 {
		return 0
	}
	w := slices.Clone(ws)
	slices.Sort(w)
	return w[int(math.Ceil(q*float64(len(w))))-1]
}

// Run replays t under spec.
func Run(t *trace.Trace, spec *gpupoolv1.GPUPoolProfileSpec, opt Options) (*Result, error) {
	w, err := newWorld(t, spec, opt)
	if err != nil {
		return nil, err
	}
	for now := t.Header.Start; now.Before(t.Header.End); now = now.Add(w.step) {
		if err := w.tick(now); err != nil {
			return nil, err
		}
	}
	w.finish()
	return w.res, nil
}

// world is a replay in progress.
type world struct {
	spec     *gpupoolv1.GPUPoolProfileSpec
	step     time.Duration
	capacity map[string]trace.Capacity
	physical float64
	// pods are the trace's pods in the order they arrived; live those arrived and not
	// gone (a step looks at these only), next the first pod yet to arrive.
	pods []*pod
	live []*pod
	next int
	// deferred are the pods of Workloads the replay admitted, by the time they arrive;
	// allPods are the pods that arrived or will (not those of Workloads never admitted).
	deferred []*pod
	allPods  []*pod
	// past are the switches recorded before the period, then the replay's, as Decide
	// counts them (cooldown, minDwell, maxSwitchesPerDay) as the operator would; the
	// last is the one in flight, if any.
	past             []plan.PastSwitch
	switchTimes      map[string]time.Duration
	defaultSwitch    time.Duration
	active, inFlight string
	switchDone       time.Time
	timers           plan.DemandTimers
	warnAhead        time.Duration
	res              *Result
}

func newWorld(t *trace.Trace, spec *gpupoolv1.GPUPoolProfileSpec, opt Options) (*world, error) {
	if d := spec.Demand; d != nil {
		for i, r := range d.Rules {
			if r.CountFromDemand != nil {
				return nil, fmt.Errorf("spec.demand.rules[%d].countFromDemand: simulate replays layouts switched whole; a layout sized by count is measured by make bench-demand's count model, not replayed (remove countFromDemand to compare the rest)", i)
			}
		}
	}
	w := &world{spec: spec, step: cmpOr(opt.Step, DefaultStep), warnAhead: plan.WarnAhead(spec), res: &Result{}}
	if w.step <= 0 {
		return nil, fmt.Errorf("step %s: give a positive step such as 10s", opt.Step)
	}
	var err error
	if w.capacity, err = capacities(spec, t.Header.Capacity); err != nil {
		return nil, err
	}
	for _, c := range w.capacity {
		w.physical = max(w.physical, c.Equivalents)
	}
	if w.pods, err = podsOf(t, spec); err != nil {
		return nil, err
	}
	w.allPods = slices.Clone(w.pods)
	w.switchTimes, w.defaultSwitch = learnSwitchTimes(t, opt.SwitchTime)
	w.res.SwitchTimes = map[string]time.Duration{}
	for _, l := range spec.Layouts {
		w.res.SwitchTimes[l.Name] = w.switchTime(l.Name)
	}
	var last *trace.Event
	for i, ev := range t.Events {
		if ev.Kind == trace.Switch && ev.At.Before(t.Header.Start) {
			w.past = append(w.past, plan.PastSwitch{ID: fmt.Sprint("recorded-", len(w.past)), To: ev.To, Reason: ev.Reason,
				Start: ev.At, End: ev.Finished, Aborted: ev.Aborted})
			last = &t.Events[i]
		}
	}
	w.active = t.Header.Active
	if _, ok := w.capacity[w.active]; !ok {
		first, err := plan.Desired(spec, t.Header.Start)
		if err != nil {
			return nil, err
		}
		w.active = first.Layout
	}
	// A switch in flight when the recording started goes on as recorded: its GPUs are
	// offline until it ended (or for as long as its layout's switches take).
	if last != nil && inFlightAt(last, t.Header.Start) && w.capacity[last.To] != (trace.Capacity{}) {
		w.inFlight, w.switchDone = last.To, last.Finished
		if last.Finished.IsZero() {
			w.switchDone = last.At.Add(w.switchTime(last.To))
		}
		w.past[len(w.past)-1].End = time.Time{}
	}
	return w, nil
}

// inFlightAt says whether a recorded switch was still in flight at start.
func inFlightAt(ev *trace.Event, start time.Time) bool {
	return !ev.Aborted && (ev.Finished.IsZero() || ev.Finished.After(start))
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// tick is one step at now: a switch due ends; services leave and are placed; demand is
// observed and decided; a switch starts; batch pods run, end or start; the time is
// accounted. The order is test/demandsim's (a service's pods are placed as the layout
// has room; a batch pod starts after the decision of its step).
func (w *world) tick(now time.Time) error {
	for w.next < len(w.pods) && !w.pods[w.next].arrive.After(now) {
		w.live = append(w.live, w.pods[w.next])
		w.next++
	}
	for len(w.deferred) > 0 && !w.deferred[0].arrive.After(now) {
		w.live = append(w.live, w.deferred[0])
		w.deferred = w.deferred[1:]
	}
	defer func() {
		w.live = slices.DeleteFunc(w.live, func(p *pod) bool { return p.gone })
	}()
	if w.inFlight != "" && !now.Before(w.switchDone) {
		w.active, w.inFlight = w.inFlight, ""
		w.past[len(w.past)-1].End = now
		if n := len(w.res.Switches); n > 0 && w.res.Switches[n-1].End.IsZero() {
			w.res.Switches[n-1].End = now // not the one in flight at the start
		}
	}
	settled := w.inFlight == ""
	w.placeServices(now, settled)
	obs := w.observe()
	in := &plan.DemandInput{Active: w.active, InFlight: w.inFlight, Observed: obs, Timers: w.timers, WarnAhead: w.warnAhead,
		Switches: slices.Clip(w.past)}
	dec, err := plan.Decide(w.spec, now, in)
	if err != nil {
		return err
	}
	w.timers = dec.Timers
	if dec.Layout != cmpOr(w.inFlight, w.active) {
		w.startSwitch(now, dec, obs)
		settled = false
	}
	w.runBatch(now, settled)
	return nil
}

// startSwitch begins a switch to dec.Layout: the pods running stop (a batch pod starts
// over when it runs again), and the active layout's GPUs are offline until it ends.
func (w *world) startSwitch(now time.Time, dec plan.DemandDecision, obs map[string]plan.LayoutDemand) {
	evicted := 0
	if w.inFlight == "" {
		evicted = obs[dec.Layout].Evictions
		w.res.Evictions += evicted
	}
	for _, p := range w.live {
		if p.running {
			p.stop()
		}
	}
	w.res.Switches = append(w.res.Switches, Switch{From: w.active, To: dec.Layout, Reason: dec.Reason, Start: now, Evictions: evicted})
	w.past = append(w.past, plan.PastSwitch{ID: fmt.Sprint("replayed-", len(w.res.Switches)), To: dec.Layout, Reason: dec.Reason, Start: now})
	w.inFlight, w.switchDone = dec.Layout, now.Add(w.switchTime(dec.Layout))
}

// used is what the pods running on the active layout take.
func (w *world) used() int64 {
	n := int64(0)
	for _, p := range w.live {
		if p.running {
			n += p.gpus
		}
	}
	return n
}

// placeServices removes the services gone by now and places those waiting, in the order
// they arrived, where the active layout has room.
func (w *world) placeServices(now time.Time, settled bool) {
	free := w.capacity[w.active].GPUs - w.used()
	for _, p := range w.live {
		if p.waits() || p.gone {
			continue
		}
		if !p.leave.IsZero() && !now.Before(p.leave) {
			if p.running {
				free += p.gpus
			}
			p.running, p.gone = false, true
			continue
		}
		if !p.running && settled && p.layouts[w.active] && free >= p.gpus {
			p.running, p.started, free = true, now, free-p.gpus
		}
	}
}

// runBatch moves the batch pods on one step from now: those running go on (and end),
// those waiting start while the active layout's GPUs last; and accounts the step.
func (w *world) runBatch(now time.Time, settled bool) {
	stepH := w.step.Hours()
	capGPUs := w.capacity[w.active].GPUs
	free := int64(0)
	if settled {
		free = capGPUs - w.used()
	}
	for _, p := range w.live {
		switch {
		case p.gone:
		case p.workload:
			if p.ready(w.active, settled) {
				w.admit(now, p)
			} else {
				w.res.QueuedGPUHours += float64(p.gpus) * stepH
			}
		case !p.batch():
			if !p.running {
				w.res.UnservedGPUHours += float64(p.gpus) * stepH
			}
		case p.running:
			p.remaining -= w.step
			if p.remaining <= 0 {
				p.running, p.gone = false, true
			}
		case settled && p.layouts[w.active] && free >= p.gpus:
			// It runs during this step: work of n steps holds its GPUs for n.
			p.running, p.started, free = true, now, free-p.gpus
			p.everStarted = true
			p.remaining -= w.step
			if p.remaining <= 0 {
				p.running, p.gone = false, true
			}
		default:
			w.res.QueuedGPUHours += float64(p.gpus) * stepH
		}
	}
	usedEq := 0.0
	if settled && capGPUs > 0 {
		usedEq = float64(capGPUs-free) / float64(capGPUs) * w.capacity[w.active].Equivalents
	}
	w.res.IdleGPUHours += (w.physical - usedEq) * stepH
}

// admit is Kueue admitting a Workload once its layout is ready for work (gpupool's check
// passes): its wait ends and its pods arrive as they did after the recorded admission.
func (w *world) admit(now time.Time, wl *pod) {
	wl.gone, wl.started, wl.everStarted = true, now, true
	shift := now.Sub(wl.admitted)
	for _, m := range wl.members {
		m.arrive = now.Add(m.offset)
		if !m.leave.IsZero() {
			m.leave = m.leave.Add(shift)
		}
		// After those arriving at the same instant: pods keep the order they came in.
		i, _ := slices.BinarySearchFunc(w.deferred, m.arrive, func(p *pod, t time.Time) int {
			if p.arrive.After(t) {
				return 1
			}
			return -1
		})
		w.deferred = slices.Insert(w.deferred, i, m)
	}
	w.allPods = append(w.allPods, wl.members...)
}

// finish collects the waits of the batch pods and Workloads.
func (w *world) finish() {
	for _, p := range w.allPods {
		if !p.waits() {
			continue
		}
		if !p.everStarted {
			w.res.Unstarted++
			continue
		}
		w.res.Waits = append(w.res.Waits, p.started.Sub(p.arrive))
	}
}

// Recorded are the switches the trace recorded within its period, as a replay reports
// them (From as the recorder saw it).
func Recorded(t *trace.Trace) []Switch {
	var out []Switch
	for _, ev := range t.Events {
		if ev.Kind == trace.Switch && !ev.At.Before(t.Header.Start) {
			out = append(out, Switch{From: ev.From, To: ev.To, Reason: ev.Reason, Start: ev.At, End: ev.Finished})
		}
	}
	return out
}

// Divergence is where got first departs from ref: the first switch of either that the
// other has not, to the same layout, within tol of its start. ok is false when none does.
func Divergence(got, ref []Switch, tol time.Duration) (at time.Time, g, r *Switch, ok bool) {
	for i := range max(len(got), len(ref)) {
		switch {
		case i >= len(got):
			return ref[i].Start, nil, &ref[i], true
		case i >= len(ref):
			return got[i].Start, &got[i], nil, true
		}
		d := got[i].Start.Sub(ref[i].Start)
		if got[i].To != ref[i].To || d > tol || -d > tol {
			return minTime(got[i].Start, ref[i].Start), &got[i], &ref[i], true
		}
	}
	return time.Time{}, nil, nil, false
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
