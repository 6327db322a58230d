package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
)

// act hands the plan's due steps to the executor (internal/execute), with the nodes'
// state labels for the nodes its steps patch (stepMarks), and takes its Outcome into the
// pass's facts; the task starts it queued wait for the pass's status write (s.starts).
// It returns when to come back and the VMs whose last step it did
// (execute.Outcome.Done), for publishMarks. A drain that timed out with
// spec.drain.onTimeout Abort comes back as Outcome.Abort: the transition is aborted
// here, where transitions end.
func (r *GPUPoolProfileReconciler) act(ctx context.Context, s *scope, p *plan.Plan) (time.Duration, map[string]bool) {
	warn := drainWarningsOf(s, p)
	if r.ready != nil {
		// This plan's arms, before any node write of the pass: an arm of an older plan
		// must not fire on a node the pass drains or parks, nor a write of it land after.
		s.arms = readyArms(s, p, warn)
		r.ready.set(s.pool.Name, s.readySeq, s.arms)
		r.ready.settle(s.pool.Name)
	}
	out := r.executor(s).Run(ctx, execute.Input{Pool: s.pool, Now: s.now, Plan: p, Layout: s.layout, World: &s.w, Budget: s.budget,
		Marks: stepMarks(stateFacts(s), warn, s.pool.Name, s.now), ReadyOnceRelabelled: readyOnceRelabelled(s), Claim: r.claimNodeStep(s),
		Planned: s.planned})
	s.facts.stepErrors = append(s.facts.stepErrors, out.StepErrors...)
	s.facts.drainBlocked = append(s.facts.drainBlocked, out.DrainBlocked...)
	s.facts.nodeWaits = append(s.facts.nodeWaits, out.NodeWaits...)
	s.facts.held = append(s.facts.held, out.Held...)
	s.starts = out.Starts
	s.marksLater = out.MarksLater
	if out.Abort != "" {
		// An aborted switch leaves nothing armed for the layout it was making.
		s.arms = nil
		r.ready.set(s.pool.Name, s.readySeq, nil)
		r.ready.settle(s.pool.Name)
		r.abort(ctx, s, out.Abort)
	}
	return out.After, out.Done
}

// claimNodeStep is the executor's Claim: the ready follower's word on the node of a VM
// (nil without a follower: the tests that call Reconcile directly).
func (r *GPUPoolProfileReconciler) claimNodeStep(s *scope) func(vm string) (bool, bool) {
	if r.ready == nil {
		return nil
	}
	return func(vm string) (bool, bool) {
		n := s.w.Nodes[vm]
		if n == nil {
			return false, false
		}
		return r.ready.claim(s.pool.Name, n.Name, n.ResourceVersion, s.readySeq)
	}
}

// executor is the pass's executor: it acts through this reconciler's clients, on the
// pass's vCenter session, and tells its events on the pool's nodes.
func (r *GPUPoolProfileReconciler) executor(s *scope) *execute.Executor {
	var drains execute.DrainWatch
	if r.nodePods != nil {
		// The suspends after drains go once their nodes' pods are gone, as the pods'
		// watches show it (nil: the tests that call Reconcile directly, without them).
		drains = r.nodePods
	}
	return &execute.Executor{
		Nodes:   nodeWriter{r},
		Drainer: r.drainer(),
		Events:  passEvents{r, s},
		VSphere: s.vc,
		Persist: func(ctx context.Context) error { return r.persist(ctx, s) },
		Timed:   s.times.record,
		// nil (the tests that call Reconcile directly): evictions inside the pass.
		Evictions: r.evictions,
		// nil (the tests that call Reconcile directly): task starts inside the pass.
		Starts: r.starts,
		Drains: drains,
	}
}

// nodeWriter writes nodes and their Machines for the executor (execute.Nodes).
type nodeWriter struct{ r *GPUPoolProfileReconciler }

func (w nodeWriter) Patch(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	return w.r.patchNode(ctx, n, change)
}

// Protect shields the node's Machine; a Machine that cannot be read, or whose node is
// not this one, holds the VM (execute.HoldError) with the reason Stalled gives.
func (w nodeWriter) Protect(ctx context.Context, n *corev1.Node) error {
	err := w.r.protectMachine(ctx, n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errMachineUnreadable):
		return &execute.HoldError{Reason: ReasonMachineUnreadable, Err: err}
	case errors.Is(err, errMachineNotTrusted):
		return &execute.HoldError{Reason: ReasonMachineNotTrusted, Err: err}
	}
	return fmt.Errorf("protecting the Machine of node %s: %w", n.Name, err)
}

func (w nodeWriter) Release(ctx context.Context, n *corev1.Node) error {
	return w.r.releaseMachine(ctx, n)
}

// Current reads the node from the manager's cache: a copy of its own, as patchNodeNow
// needs (a conflict there reads it again from the API server).
func (w nodeWriter) Current(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	if err := w.r.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return &n, nil
}
