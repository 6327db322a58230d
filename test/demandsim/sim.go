// Package demandsim runs plan.Decide, the pure demand decision, against a synthetic
// world: inference pods on the day layout's nodes by day, training jobs that only the
// night layout's nodes can run, arriving at random times, and switches that take time.
// It steps a fake clock, feeds Decide what a reconciler would observe, carries out what
// Decide answers, and measures what the pool offered and what the work waited.
//
// It is a model of a cluster, not of gpupool's reconciler: it shares the decision
// (plan.Decide, and plan.DecideCount for night sized by count: RunCount) with the
// operator on purpose, since that is what it measures, and nothing else. The property
// tests run it over random worlds and policies.
package demandsim

import (
	"math"
	"math/rand"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/replay"
)

// Layout names of the simulated pool.
const (
	Day   = "day"
	Night = "night"
)

// World is what the simulated cluster does, independent of the pool's policy.
type World struct {
	Start time.Time
	Span  time.Duration
	Step  time.Duration
	// DayGPUs and NightGPUs are the GPUs the layouts' nodes advertise; PhysicalGPUs are
	// the physical GPUs both are carved from (for idle GPU-hours).
	DayGPUs, NightGPUs, PhysicalGPUs int
	// SwitchTime is how long a transition takes (drain, park, reconfigure, boot).
	SwitchTime time.Duration
	// Inference is how many GPU pods want the day layout at t.
	Inference func(t time.Time) int
	// Jobs are the training jobs, by arrival.
	Jobs []Job
	// DoNotDisrupt marks running inference pods do-not-disrupt at t (a maintenance job).
	DoNotDisrupt func(t time.Time) bool
	// Seed seeds the scheduler's choices of the count model (RunCount): which free
	// node an inference pod lands on, which pod a scale-down removes.
	Seed int64
}

// Job is a training job: it waits for free night GPUs, then runs for Duration.
type Job struct {
	Arrival  time.Time
	GPUs     int
	Duration time.Duration
}

// Switch is a transition the simulation carried out.
type Switch struct {
	plan.PastSwitch
	From string
	// Action and Observed are what demand saw when it started a Demand switch.
	Observed map[string]plan.LayoutDemand
	// FromCount and ToCount are the GPUs converted before and after, for a layout by
	// count (RunCount; 0 otherwise), and Evictions the GPU pods the transition evicted.
	FromCount, ToCount, Evictions int
}

// Step is what happened at one instant, for the property tests.
type Step struct {
	At       time.Time
	Active   string
	InFlight string
	Input    *plan.DemandInput
	Decision plan.DemandDecision
	Observed map[string]plan.LayoutDemand
	// With RunCount: the counts in effect, what DecideCount was asked (nil when Decide
	// chose a layout not by count) and what it answered.
	ActiveCount, InFlightCount int
	Count                      *plan.CountInput
	CountDecision              plan.CountDecision
}

// Result is what a run measured.
type Result struct {
	Switches  []Switch
	Steps     []Step
	Evictions int
	// QueuedGPUHours is the integral of GPUs of training jobs waiting.
	QueuedGPUHours float64
	// IdleGPUHours is physical GPU time offered to no pod, or offline in a switch.
	IdleGPUHours float64
	// Waits are the training jobs' waits from arrival to their (last) start; Unstarted
	// counts those that never started.
	Waits     replay.Waits
	Unstarted int
}

// Spec is the simulated pool: day by default, night from 20:00 for 12 hours every day
// in zone, and demand as given (nil: the schedule alone).
func Spec(zone string, demand *gpupoolv1.DemandPolicy) *gpupoolv1.GPUPoolProfileSpec {
	return &gpupoolv1.GPUPoolProfileSpec{
		Layouts:       []gpupoolv1.Layout{{Name: Day}, {Name: Night}},
		DefaultLayout: Day,
		Schedule: &gpupoolv1.Schedule{TimeZone: zone, Windows: []gpupoolv1.Window{
			{Layout: Night, Start: "0 20 * * *", Duration: metav1.Duration{Duration: 12 * time.Hour}},
		}},
		Demand: demand,
	}
}

// MeanWait, P50Wait and P95Wait summarise Waits.
func (r *Result) MeanWait() time.Duration { return r.Waits.Mean() }
func (r *Result) P50Wait() time.Duration  { return r.Waits.Quantile(0.5) }
func (r *Result) P95Wait() time.Duration  { return r.Waits.Quantile(0.95) }

type job struct {
	Job
	started, done time.Time
	remaining     time.Duration
	running       bool
}

// Run steps the world under spec and returns what happened. keepSteps records every
// step (for the property tests).
func Run(w *World, spec *gpupoolv1.GPUPoolProfileSpec, warnAhead time.Duration, keepSteps bool) (*Result, error) {
	res := &Result{}
	jobs := newJobs(w)
	first, err := plan.Desired(spec, w.Start)
	if err != nil {
		return nil, err
	}
	active, inFlight := first.Layout, ""
	var switchDone time.Time
	var timers plan.DemandTimers
	for t := w.Start; t.Before(w.Start.Add(w.Span)); t = t.Add(w.Step) {
		if inFlight != "" && !t.Before(switchDone) {
			active, inFlight = inFlight, ""
			res.Switches[len(res.Switches)-1].End = t
		}
		running := runningGPUs(jobs)
		inf := min(w.Inference(t), w.DayGPUs)
		obs := observe(w, t, active, inFlight, jobs, inf, running)
		in := &plan.DemandInput{Active: active, InFlight: inFlight, Observed: obs, Timers: timers, WarnAhead: warnAhead}
		for _, s := range res.Switches {
			in.Switches = append(in.Switches, s.PastSwitch)
		}
		dec, err := plan.Decide(spec, t, in)
		if err != nil {
			return nil, err
		}
		timers = dec.Timers
		if keepSteps {
			res.Steps = append(res.Steps, Step{At: t, Active: active, InFlight: inFlight, Input: in, Decision: dec, Observed: obs})
		}
		if target := cmpOr(inFlight, active); dec.Layout != target {
			evicted := 0
			if inFlight == "" {
				// The switch drains the active layout's nodes: their pods are evicted.
				evicted = obs[dec.Layout].Evictions
				res.Evictions += evicted
			}
			for _, j := range jobs {
				if j.running {
					j.stop()
				}
			}
			res.Switches = append(res.Switches, Switch{PastSwitch: plan.PastSwitch{To: dec.Layout, Reason: dec.Reason, Start: t}, From: active, Observed: obs, Evictions: evicted})
			inFlight, switchDone = dec.Layout, t.Add(w.SwitchTime)
		}
		advance(w, t, jobs, active, inFlight, running, inf, res)
	}
	res.collectWaits(jobs)
	return res, nil
}

func newJobs(w *World) []*job {
	jobs := make([]*job, len(w.Jobs))
	for i := range w.Jobs {
		jobs[i] = &job{Job: w.Jobs[i], remaining: w.Jobs[i].Duration}
	}
	return jobs
}

// runningGPUs is what the running jobs use.
func runningGPUs(jobs []*job) int {
	n := 0
	for _, j := range jobs {
		if j.running {
			n += j.GPUs
		}
	}
	return n
}

// stop evicts a running job: it starts over when it runs again.
func (j *job) stop() { j.running, j.remaining = false, j.Duration }

// nearCompletion: the job has less than a quarter of its run left (what a reconciler
// would see as a Job near completion).
func (j *job) nearCompletion() bool { return j.running && j.remaining < j.Duration/4 }

func (r *Result) collectWaits(jobs []*job) {
	for _, j := range jobs {
		if j.started.IsZero() {
			r.Unstarted++
			continue
		}
		r.Waits = append(r.Waits, j.started.Sub(j.Arrival))
	}
}

// advance moves the world on one step from t: the jobs that run go on (and end), those
// that have arrived start where the night layout has GPUs free, the others queue; the
// GPUs no job or inference uses count as idle.
func advance(w *World, t time.Time, jobs []*job, active, inFlight string, running, inf int, res *Result) {
	stepH := w.Step.Hours()
	used := 0.0
	free := 0
	if inFlight == "" && active == Night {
		free = w.NightGPUs - running
	}
	free = runJobs(w, t, jobs, free, res)
	switch {
	case inFlight != "":
	case active == Night:
		used = float64(w.NightGPUs-free) / float64(w.NightGPUs)
	case active == Day:
		used = float64(inf) / float64(w.DayGPUs)
	}
	res.IdleGPUHours += (1 - used) * float64(w.PhysicalGPUs) * stepH
}

// runJobs moves the jobs on one step from t: those that run go on (and end), those that
// have arrived start while free GPUs last, the others queue. It returns the GPUs left free.
func runJobs(w *World, t time.Time, jobs []*job, free int, res *Result) int {
	for _, j := range jobs {
		switch {
		case j.Arrival.After(t) || !j.done.IsZero():
		case j.running:
			j.remaining -= w.Step
			if j.remaining <= 0 {
				j.running, j.done = false, t.Add(w.Step)
			}
		case free >= j.GPUs:
			// It runs during this step: a job of n steps holds its GPUs for n.
			j.running, j.started, free = true, t, free-j.GPUs
			j.remaining -= w.Step
			if j.remaining <= 0 {
				j.running, j.done = false, t.Add(w.Step)
			}
		default:
			res.QueuedGPUHours += float64(j.GPUs) * w.Step.Hours()
		}
	}
	return free
}

// observe is what a reconciler sees of the world: per layout, the GPUs waiting that only
// its nodes could serve, what runs on its nodes, and what a switch to it would evict.
func observe(w *World, t time.Time, active, inFlight string, jobs []*job, inf, running int) map[string]plan.LayoutDemand {
	obs := map[string]plan.LayoutDemand{}
	queued, pending, runningNames, near := training(t, jobs)
	settled := inFlight == ""
	night := plan.LayoutDemand{RunningGPUs: int64(running)}
	day := plan.LayoutDemand{}
	// As status.activeLayout is the layout switched from until a switch completes, work
	// it could take is not pending for it (internal/demand's Pods source).
	if active != Night {
		night.PendingGPUs, night.Pending = queued, pending
	}
	if settled && active == Day {
		day.RunningGPUs = int64(inf)
		night.Evictions = inf
		if w.DoNotDisrupt != nil && w.DoNotDisrupt(t) && inf > 0 {
			night.DoNotDisrupt = []string{"pod serve/inference-0"}
		}
	} else if inf > 0 && active != Day {
		day.PendingGPUs = int64(inf)
		day.Pending = []string{"pod serve/inference"}
	}
	if settled && active == Night {
		day.Evictions = len(runningNames)
		day.NearCompletion = near
	}
	obs[Day], obs[Night] = day, night
	return obs
}

// training is what a reconciler sees of the training jobs at t: the GPUs and pods
// waiting, the pods running, and those of them near completion (one pod a job).
func training(t time.Time, jobs []*job) (queued int64, pending, running, near []string) {
	for i, j := range jobs {
		if j.Arrival.After(t) || !j.done.IsZero() {
			continue
		}
		name := "pod train/job-" + itoa(i)
		switch {
		case j.running:
			running = append(running, name)
			if j.nearCompletion() {
				near = append(near, name)
			}
		default:
			queued += int64(j.GPUs)
			pending = append(pending, name)
		}
	}
	return queued, pending, running, near
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// Week is the benchmark's world: seven days from start (a Monday 00:00), inference on
// weekdays from 08:00 to 18:00, and training jobs arriving at random on weekdays and
// at weekends.
func Week(start time.Time, seed int64) *World {
	rng := rand.New(rand.NewSource(seed))
	w := &World{Start: start, Span: 7 * 24 * time.Hour, Step: time.Minute,
		DayGPUs: 16, NightGPUs: 4, PhysicalGPUs: 4, SwitchTime: 6 * time.Minute, Seed: seed}
	w.Inference = func(t time.Time) int {
		wd, h := t.Weekday(), t.Hour()
		if wd == time.Saturday || wd == time.Sunday {
			return 2
		}
		if h >= 8 && h < 18 {
			return 6 + int(6*math.Sin(math.Pi*float64(t.Sub(t.Truncate(24*time.Hour)).Hours()-8)/10))
		}
		return 1
	}
	for d := range 7 {
		day := start.AddDate(0, 0, d)
		n := 2 + rng.Intn(3)
		if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
			n = rng.Intn(2)
		}
		for range n {
			at := day.Add(time.Duration(8*60+rng.Intn(12*60)) * time.Minute)
			w.Jobs = append(w.Jobs, Job{Arrival: at, GPUs: 1 + rng.Intn(2), Duration: time.Duration(60+rng.Intn(180)) * time.Minute})
		}
	}
	slices.SortFunc(w.Jobs, func(a, b Job) int { return a.Arrival.Compare(b.Arrival) })
	return w
}
