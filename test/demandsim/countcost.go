package demandsim

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpupool/gpupool/internal/plan"
)

// What the count model observes and what its transitions cost (see count.go).

// snapshot is the world at one instant as a transition to night with some count sees
// it: what DecideCount's Disruption answers from, copied so that a Step kept for the
// property tests answers the same later.
type snapshot struct {
	physical int
	// conv is the GPUs converted in the layout the pool has or is switching to (0: day).
	conv int
	// pods are the inference pods on each physical GPU that layout leaves to inference,
	// fewest first: converting GPUs evicts those on the ones it picks.
	pods []int
	// jobs are the running training jobs, the first released first.
	jobs []runJob
	dnd  bool
}

type runJob struct {
	index, gpus int
	near        bool
}

func (s *countSim) snapshot(t time.Time) snapshot {
	layout, conv := s.target()
	if layout != Night {
		conv = 0
	}
	sn := snapshot{physical: s.w.PhysicalGPUs, conv: conv, dnd: s.w.DoNotDisrupt != nil && s.w.DoNotDisrupt(t)}
	for _, g := range s.pickable() {
		sn.pods = append(sn.pods, s.gpus[g].pods)
	}
	slices.Sort(sn.pods)
	for i, j := range s.jobs {
		if j.running {
			sn.jobs = append(sn.jobs, runJob{index: i, gpus: j.GPUs, near: j.nearCompletion()})
		}
	}
	// Releasing GPUs stops the jobs that started last: they lose the least work. Ties
	// (and restarts in the same minute) go by index, so the order is deterministic.
	slices.SortFunc(sn.jobs, func(a, b runJob) int {
		if c := s.jobs[b.index].started.Compare(s.jobs[a.index].started); c != 0 {
			return c
		}
		return b.index - a.index
	})
	return sn
}

// cost is what making night with n GPUs converted evicts from here (DecideCount's
// Disruption). Converting more GPUs evicts the inference pods on the ones it converts,
// those fewest pods run on (countplace.go). Converting fewer evicts the training jobs
// that no longer fit in n GPUs, one pod a job as Run counts them: the jobs are packed,
// so releasing idle GPUs evicts none.
func (sn snapshot) cost(n int) (plan.StepCost, error) {
	if n < 1 || n > sn.physical {
		return plan.StepCost{}, fmt.Errorf("no choice of %d GPUs to convert of %d", n, sn.physical)
	}
	var c plan.StepCost
	for _, p := range sn.pods[:max(0, min(n-sn.conv, len(sn.pods)))] {
		c.Evictions += p
	}
	if sn.dnd {
		c.DoNotDisrupt = c.Evictions
	}
	for _, j := range sn.releasedJobs(n) {
		c.Evictions++
		if j.near {
			c.NearCompletion++
		}
	}
	return c, nil
}

// released are the indexes of the jobs a transition to n GPUs converted stops.
func (sn snapshot) released(n int) []int {
	var out []int
	for _, j := range sn.releasedJobs(n) {
		out = append(out, j.index)
	}
	return out
}

func (sn snapshot) releasedJobs(n int) []runJob {
	total := 0
	for _, j := range sn.jobs {
		total += j.gpus
	}
	var out []runJob
	for _, j := range sn.jobs {
		if total <= n {
			break
		}
		out, total = append(out, j), total-j.gpus
	}
	return out
}

// observe is what a reconciler sees of the world, as observe for Run, with two changes
// of a layout by count: pods waiting for night's converted GPUs are its demand even
// while night is active (internal/demand/pods.go: they size its count), and what
// bringing night in would evict is what it evicts at the count a switch would make it
// with (the reconciler resolves a sized layout not made at DecideCount's estimate).
func (s *countSim) observe(t time.Time, inf, running int) (map[string]plan.LayoutDemand, error) {
	queued, pending, runningNames, near := training(t, s.jobs)
	_, infGPUs, _ := s.capacity()
	settled := s.inFlight == ""
	night := plan.LayoutDemand{RunningGPUs: int64(running), PendingGPUs: queued, Pending: pending}
	day := plan.LayoutDemand{}
	if settled && s.active == Day {
		day.RunningGPUs = int64(inf)
	}
	if served := s.perPhys * infGPUs; inf > served {
		day.PendingGPUs, day.Pending = int64(inf-served), []string{"pod serve/inference"}
	}
	if settled && s.active == Night {
		day.Evictions, day.NearCompletion = len(runningNames), near
	}
	obs := map[string]plan.LayoutDemand{Day: day, Night: night}
	if !settled || s.active != Day {
		return obs, nil
	}
	sn := s.snapshot(t)
	est, err := plan.DecideCount(s.spec, t, plan.CountInput{Demand: s.demandInput(obs), Layout: Night, PerGPU: 1, Estimate: true, Disruption: sn.cost})
	if err != nil {
		return nil, err
	}
	if c, err := sn.cost(est.Count); err == nil {
		night.Evictions = c.Evictions
		if c.DoNotDisrupt > 0 {
			night.DoNotDisrupt = []string{"pod serve/inference-0"}
		}
	}
	obs[Night] = night
	return obs, nil
}
