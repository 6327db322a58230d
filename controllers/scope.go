package controllers

import (
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// scope is what one reconcile works on: the pool, what was observed of its world, and
// the facts the pass established. Conditions and the phase are computed once, from the
// facts, when the pass ends (summarize).
type scope struct {
	pool *gpupoolv1.GPUPoolProfile
	// persisted is the pool as last written to the API server, the base of the next
	// status patch.
	persisted *gpupoolv1.GPUPoolProfile
	now       time.Time
	decision  plan.Decision
	// kueue is what the pass read of Kueue (spec.kueue), read once by the first of the
	// demand and the checks that needs it.
	kueue kueueView
	// demandRecheck is when demand's timers or guards run out next (zero: none), a time
	// to look again even if nothing else changes.
	demandRecheck time.Time
	// wanted is the layout the decision wants (nil when the spec does not have it), set
	// before observe: readiness is judged against it.
	wanted *gpupoolv1.Layout
	// layout is the layout the pass makes, wanted or the fallback (decide), set once the
	// plan is built; what relabel steps label for.
	layout *gpupoolv1.Layout
	// plan is the plan decide built to layout.
	plan *plan.Plan

	vc vsphere.Client
	// tasks is what the tasks phase found of the pool's vSphere tasks, before observe.
	tasks taskLook
	// w is the world observe read (empty before): nothing changes it afterwards
	// (world.World); the executor reads it through &s.w.
	w world.World
	// nodeStates are what the planner reads of the nodes (nodeStates, derived in
	// decide); labelledFor re-derives Labelled for another layout.
	nodeStates map[string]plan.NodeState
	// nextPlan is the plan of the next scheduled switch to another layout (planNext);
	// nil when none is scheduled.
	nextPlan *plan.Plan
	// aborted: the pass keeps an aborted switch; workers' recorded steps are stale
	// (recordWorkers did not run), so node states come from what was observed.
	aborted bool
	// vmEvents are the events of tasks that ended, kept until the VMs' nodes are known
	// (flushVMEvents).
	vmEvents []vmEventNote
	// queued are the tasks whose intents this pass recorded, for act to start together.
	queued []queuedStart
	// parkedAhead is what parkAhead found parking the nodes of the pass's due steps,
	// by VM (nil: parked).
	parkedAhead map[string]error
	// budget is what the pass may still write (nil: no cap).
	budget *passBudget

	facts facts
}

// facts are what a pass found out; summarize turns them into conditions and a phase.
type facts struct {
	paused bool
	// invalidSpec: the schedule cannot be evaluated.
	invalidSpec string
	// credentials: the Secret may not or cannot be read, or vCenter refused it (a person
	// must act); credentialsReason is the Stalled reason, ReasonCredentials when empty.
	credentials, credentialsReason string
	// conflict: an older pool claims some of this pool's VMs.
	conflict string
	// vcenter: vCenter could not be reached or read; retried.
	vcenter string
	// observed: vSphere and the nodes were observed this pass.
	observed bool
	// problems say why the wanted layout cannot be reached.
	problems []plan.Problem
	// held are the VMs that must not be acted on (no node, state at risk, Machine
	// unreadable).
	held []plan.Problem
	// fallback is the layout brought back because the wanted one cannot be completed.
	fallback string
	// done: nothing is left to do for the layout being made (wanted or fallback).
	done bool
	// settling: the wanted layout looked infeasible while vSphere tasks were in flight or
	// had just ended; the pass waits rather than believe a read taken between two states.
	settling bool
	// drainBlocked and stepErrors name what kept steps from going on this pass.
	drainBlocked []string
	stepErrors   []string
	// nodeWaits say what the nodes waited for this pass lack to be ready for work.
	nodeWaits []string
	// deleting: the pool is being deleted and waits for its tasks in flight (the message).
	deleting string
	// pausedTasks names the tasks in flight a paused pool still follows until they end.
	pausedTasks []string
}

// worker returns the status entry of the VM a plan step names.
func (s *scope) worker(name string) *gpupoolv1.WorkerStatus {
	return workerStatus(s.pool, s.w.ID(name))
}

// hold records that a VM must not be acted on now.
func (s *scope) hold(vm, reason, msg string) {
	s.facts.held = append(s.facts.held, plan.Problem{Reason: reason, Message: msg, VM: vm})
}

// taskLook is what the tasks phase found: a task of the pool was still running when the
// pass looked (inFlight), and how many ended at that look.
type taskLook struct {
	inFlight bool
	ended    int
}
