package demandsim

import (
	"fmt"
	"math/rand"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// The count model (RunCount): night is a layout by count of day. Each of the world's
// PhysicalGPUs runs either DayGPUs/PhysicalGPUs inference vGPUs (day's profile) or,
// converted, one training GPU (night's 16Q). Night with k GPUs converted is a partial
// layout: its k GPUs serve training, the others go on serving inference. Demand sizes k
// (countFromDemand) by plan.DecideCount after plan.Decide picked the layout; a step of k
// is a transition to night with another count, recorded as a Switch like any other.
//
// A transition takes SwitchTime, and only the GPUs whose profile changes are offline
// meanwhile: training jobs on the GPUs that stay converted keep running through a step,
// and inference keeps the GPUs that stay unconverted. This holds for the switches
// between day and night too (night is day plus k converted GPUs), which the all-or-
// nothing model of Run takes offline whole.

// CountSpec is Spec with night a layout by count of day: convert.count is every physical
// GPU (what an override or a closed window of the rule makes), one 16Q candidate each.
func CountSpec(zone string, w *World, demand *gpupoolv1.DemandPolicy) *gpupoolv1.GPUPoolProfileSpec {
	spec := Spec(zone, demand)
	conv := &gpupoolv1.Conversion{Base: Day, Count: int32(w.PhysicalGPUs), Profile: "grid_p100-16q"} //nolint:gosec // a handful of GPUs
	for i := range w.PhysicalGPUs {
		conv.Candidates = append(conv.Candidates, gpupoolv1.Candidate{VM: "train-" + itoa(i)})
	}
	spec.Layouts[1].Convert = conv
	return spec
}

// countSim is one RunCount: the world, and the pool's state as a reconciler records it.
type countSim struct {
	w       *World
	spec    *gpupoolv1.GPUPoolProfileSpec
	warn    time.Duration
	res     *Result
	jobs    []*job
	perPhys int // inference vGPUs of one unconverted physical GPU
	// active and count are the layout in effect and, for night, its GPUs converted;
	// inFlight, toCount and done the transition in flight ("" when none is).
	active, inFlight string
	count, toCount   int
	done             time.Time
	timers           plan.DemandTimers
	// step is the step DecideCount announced last (status.demand.step).
	step *plan.AnnouncedStep
	// gpus are the physical GPUs, and rng places the inference pods on their nodes.
	gpus []gpuState
	rng  *rand.Rand
}

// RunCount steps the world under spec (CountSpec) with night sized by count, and returns
// what happened. keepSteps records every step (for the property tests).
func RunCount(w *World, spec *gpupoolv1.GPUPoolProfileSpec, warnAhead time.Duration, keepSteps bool) (*Result, error) {
	if w.PhysicalGPUs <= 0 || w.DayGPUs%w.PhysicalGPUs != 0 {
		return nil, fmt.Errorf("the count model needs DayGPUs (%d) a multiple of PhysicalGPUs (%d)", w.DayGPUs, w.PhysicalGPUs)
	}
	s := &countSim{w: w, spec: spec, warn: warnAhead, res: &Result{}, jobs: newJobs(w), perPhys: w.DayGPUs / w.PhysicalGPUs,
		gpus: make([]gpuState, w.PhysicalGPUs), rng: rand.New(rand.NewSource(w.Seed))} //nolint:gosec // a model's placement, not security
	first, err := plan.Desired(spec, w.Start)
	if err != nil {
		return nil, err
	}
	s.active = first.Layout
	if s.active == Night {
		// The pool starts as if night had just been brought in: with its bring-in count.
		in := &plan.DemandInput{Observed: map[string]plan.LayoutDemand{}}
		cd, err := plan.DecideCount(spec, w.Start, plan.CountInput{Demand: in, Layout: Night, Reason: first.Reason, PerGPU: 1,
			Disruption: s.snapshot(w.Start).cost})
		if err != nil {
			return nil, err
		}
		s.count = cd.Count
		s.convertTo(cd.Count)
		s.settle()
	}
	for t := w.Start; t.Before(w.Start.Add(w.Span)); t = t.Add(w.Step) {
		if s.inFlight != "" && !t.Before(s.done) {
			s.active, s.count, s.inFlight = s.inFlight, s.toCount, ""
			s.settle()
			s.res.Switches[len(s.res.Switches)-1].End = t
		}
		if err := s.tick(t, keepSteps); err != nil {
			return nil, err
		}
	}
	s.res.collectWaits(s.jobs)
	return s.res, nil
}

// tick is one step at t: observe, decide the layout (Decide) and, for night, its count
// (DecideCount), start the transition they ask for, and move the world on.
func (s *countSim) tick(t time.Time, keepSteps bool) error {
	running := runningGPUs(s.jobs)
	inf := min(s.w.Inference(t), s.w.DayGPUs)
	obs, err := s.observe(t, inf, running)
	if err != nil {
		return err
	}
	in := s.demandInput(obs)
	dec, err := plan.Decide(s.spec, t, in)
	if err != nil {
		return err
	}
	s.timers = dec.Timers
	var cin *plan.CountInput
	var cd plan.CountDecision
	if dec.Layout == Night {
		// DecideCount reads the input Decide had, with the timers it returned.
		din := *in
		din.Timers = dec.Timers
		cin = &plan.CountInput{Demand: &din, Layout: Night, Reason: dec.Reason, PerGPU: 1, Step: s.step,
			Disruption: s.snapshot(t).cost}
		if s.active == Night {
			cin.Active = s.count
		}
		if s.inFlight == Night {
			cin.InFlight = s.toCount
		}
		if cd, err = plan.DecideCount(s.spec, t, *cin); err != nil {
			return err
		}
		s.step = cd.Step
	}
	if keepSteps {
		s.res.Steps = append(s.res.Steps, Step{At: t, Active: s.active, InFlight: s.inFlight, Input: in, Decision: dec, Observed: obs,
			ActiveCount: s.count, InFlightCount: s.inFlightCount(), Count: cin, CountDecision: cd})
	}
	if layout, count := s.target(); dec.Layout != layout || cd.Count != count {
		s.start(t, dec, cd.Count, obs)
	}
	s.advance(t, inf)
	return nil
}

func (s *countSim) demandInput(obs map[string]plan.LayoutDemand) *plan.DemandInput {
	in := &plan.DemandInput{Active: s.active, InFlight: s.inFlight, Observed: obs, Timers: s.timers, WarnAhead: s.warn}
	for _, sw := range s.res.Switches {
		in.Switches = append(in.Switches, sw.PastSwitch)
	}
	return in
}

func (s *countSim) inFlightCount() int {
	if s.inFlight == "" {
		return 0
	}
	return s.toCount
}

// target is the layout the pool has or is switching to, and its GPUs converted (0 for
// day).
func (s *countSim) target() (string, int) {
	switch {
	case s.inFlight == Night:
		return Night, s.toCount
	case s.inFlight != "":
		return s.inFlight, 0
	case s.active == Night:
		return Night, s.count
	}
	return s.active, 0
}

// start starts the transition to layout dec.Layout with count GPUs converted (0: day),
// evicting what it must: the inference pods on the GPUs it converts and the training
// jobs on those it releases (a step or a switch to night), or every training job (a
// switch to day).
func (s *countSim) start(t time.Time, dec plan.DemandDecision, count int, obs map[string]plan.LayoutDemand) {
	evicted := 0
	if dec.Layout == Night {
		sn := s.snapshot(t)
		c, _ := sn.cost(count)
		evicted = c.Evictions
		// The cost counts the training jobs released too; the pods moved are the rest.
		released := sn.released(count)
		if moved := s.convertTo(count); moved != evicted-len(released) {
			panic(fmt.Sprintf("demandsim: converting to %d GPUs evicted %d inference pods, the cost said %d", count, moved, evicted-len(released)))
		}
		for _, j := range released {
			s.jobs[j].stop()
		}
	} else {
		s.convertTo(0)
		for _, j := range s.jobs {
			if j.running {
				j.stop()
				evicted++
			}
		}
	}
	from := 0
	if s.active == Night {
		from = s.count
	}
	s.res.Evictions += evicted
	s.res.Switches = append(s.res.Switches, Switch{PastSwitch: plan.PastSwitch{To: dec.Layout, Reason: dec.Reason, Start: t},
		From: s.active, Observed: obs, FromCount: from, ToCount: count, Evictions: evicted})
	s.inFlight, s.toCount, s.done = dec.Layout, count, t.Add(s.w.SwitchTime)
}

// capacity is what the pool offers now: the GPUs training jobs may run on, the physical
// GPUs serving inference, and those offline (changing profile in a transition).
func (s *countSim) capacity() (train, inference, offline int) {
	from := 0
	if s.active == Night {
		from = s.count
	}
	layout, to := s.target()
	if layout != Night {
		to = 0
	}
	if s.active == Night && layout == Night {
		train = min(from, to)
	}
	return train, s.w.PhysicalGPUs - max(from, to), max(from, to) - min(from, to)
}

// advance moves the world on one step from t and counts the physical GPU time no pod
// used (offline GPUs included).
func (s *countSim) advance(t time.Time, inf int) {
	train, infGPUs, _ := s.capacity()
	if !s.nested() {
		panic("demandsim: the target's converted GPUs and the active layout's are not nested")
	}
	if serving := len(s.serving()); serving != infGPUs {
		panic(fmt.Sprintf("demandsim: %d GPUs serve inference by their states, %d by the counts", serving, infGPUs))
	}
	free := runJobs(s.w, t, s.jobs, train-runningGPUs(s.jobs), s.res)
	used := float64(train-free) + float64(s.place(inf))/float64(s.perPhys)
	s.res.IdleGPUHours += (float64(s.w.PhysicalGPUs) - used) * s.w.Step.Hours()
}
