package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpupool/gpupool/internal/plan"
)

// act runs the due steps. Drains run their evictions concurrently, after every node the
// plan will drain has been cordoned; the other steps run one by one, but the vSphere
// tasks they start are started together at the end (startQueued).
func (r *GPUPoolProfileReconciler) act(ctx context.Context, s *scope, p *plan.Plan) time.Duration {
	var after time.Duration
	note := func(step plan.Step, next time.Duration, err error) {
		if errors.Is(err, errCapped) {
			return // goes on in the next pass, which follows at once
		}
		if err != nil {
			ws := s.worker(step.VM)
			ws.Message = fmt.Sprintf("%s failed: %v", step.Action, err)
			s.facts.stepErrors = append(s.facts.stepErrors, fmt.Sprintf("%s of VM %s: %v", step.Action, step.VM, err))
			next = requeueDrain
		}
		after = soonest(after, next)
	}
	aborted := func() bool { t := s.pool.Status.Transition; return t != nil && t.AbortedTime != nil }
	var drains, others []plan.Step
	for _, step := range p.Due(int(max(s.pool.Spec.MaxParallel, 1))) {
		ws := s.worker(step.VM)
		switch {
		case step.Action != plan.Drain:
			others = append(others, step)
		case ws.NextRetryTime != nil && s.now.Before(ws.NextRetryTime.Time):
			note(step, ws.NextRetryTime.Sub(s.now), nil)
		default:
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(s.now)
			}
			drains = append(drains, step)
		}
	}
	// Nothing is evicted until every node to drain is cordoned (cordonAhead), even when
	// that takes more than one pass.
	cordoned := false
	if len(drains) > 0 {
		timed("act:cordon", func() { cordoned = r.cordonAhead(ctx, s, p) })
	}
	if cordoned {
		var outcomes []drainOutcome
		timed("act:evict", func() { outcomes = r.evictAll(ctx, s, drains) })
		for i, o := range outcomes {
			step := drains[i]
			wait, err := r.settleDrain(ctx, s, s.worker(step.VM), s.w.Nodes[step.VM], o)
			note(step, wait, err)
			if aborted() {
				return after
			}
		}
	}
	timed("act:node-steps", func() { others = r.patchNodesTogether(ctx, s, others, note) })
	timed("act:park", func() { r.parkAhead(ctx, s, others) })
	ran := false
	timed("act:steps", func() { ran = r.runSteps(ctx, s, others, note, aborted) })
	if ran {
		timed("act:start", func() { r.startQueued(ctx, s, note) })
	}
	return after
}

// runSteps executes the other due steps one by one; the vSphere tasks they queue are
// started after them (startQueued). It reports false when a step aborted the
// transition: then nothing queued was stored or started, and the steps are planned
// again.
func (r *GPUPoolProfileReconciler) runSteps(ctx context.Context, s *scope, steps []plan.Step, note func(plan.Step, time.Duration, error), aborted func() bool) bool {
	for _, step := range steps {
		queued := len(s.queued)
		wait, err := r.execute(ctx, s, step)
		for i := queued; i < len(s.queued); i++ {
			s.queued[i].step = step
		}
		note(step, wait, err)
		if aborted() {
			for _, q := range s.queued {
				if ws := findWorker(s.pool, q.worker); ws != nil {
					ws.Task = nil
				}
			}
			s.queued = nil
			return false
		}
	}
	return true
}

// patchNodesTogether runs the due steps that only patch their node (Relabel, Uncordon)
// concurrently (bounded): at the end of a transition every node of the new layout is
// relabelled and uncordoned at about the same time. They read the scope and change
// nothing in it, so their outcomes are noted one by one afterwards. It returns the other
// steps.
func (r *GPUPoolProfileReconciler) patchNodesTogether(ctx context.Context, s *scope, steps []plan.Step, note func(plan.Step, time.Duration, error)) []plan.Step {
	var nodeSteps, rest []plan.Step
	for _, step := range steps {
		ws := s.worker(step.VM)
		_, found := s.w.VM(step.VM)
		plain := found && ws.Task == nil && (ws.NextRetryTime == nil || !s.now.Before(ws.NextRetryTime.Time))
		if (step.Action == plan.Relabel || step.Action == plan.Uncordon) && plain {
			if !s.budget.nodeWrite() {
				continue // in the next pass
			}
			// As execute does for the steps it runs.
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(s.now)
			}
			nodeSteps = append(nodeSteps, step)
		} else {
			rest = append(rest, step)
		}
	}
	type outcome struct {
		after time.Duration
		err   error
	}
	out := make([]outcome, len(nodeSteps))
	forEach(len(nodeSteps), maxConcurrentDrains, func(i int) {
		step := nodeSteps[i]
		node := s.w.Nodes[step.VM]
		if step.Action == plan.Relabel {
			out[i].after, out[i].err = r.relabel(ctx, s, step.VM, node)
			return
		}
		out[i].after, out[i].err = r.uncordonStep(ctx, s, node)
	})
	for i, step := range nodeSteps {
		note(step, out[i].after, out[i].err)
	}
	return rest
}
