package controllers

import (
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/requests"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// scope is what one pass works on. Each phase hands on what it established through the
// fields it sets, named below by phase, and nothing after that phase changes them; what
// the pass found out (facts) is turned into conditions and the phase once, when the pass
// ends (summarize). The executor gets its Input from here and gives back an Outcome
// (act), and the world observe read is one value (world.World).
type scope struct {
	// Set by Reconcile for the whole pass: the pool (its status is what the pass
	// writes), the pool as the last pass left it (persisted: what it decided, written or
	// not; persist moves it), the pass's time and the writes it may still make (nil: no cap).
	pool      *gpupoolv1.GPUPoolProfile
	persisted *gpupoolv1.GPUPoolProfile
	// stored is the pool as stored on the API server, the base of the status write:
	// persisted, unless the last passes left their write (statusdefer.go), then since
	// unwrittenSince.
	stored         *gpupoolv1.GPUPoolProfile
	unwrittenSince time.Time
	now            time.Time
	// landed are the marks the pool's last batch wrote (stateBatches), for
	// publishMarks; set by waitStates.
	landed map[string]landedState
	// statesRefused is the error of the pool's last batch when none of its writes went
	// through (the budget then counts no progress for the next batch).
	statesRefused error
	budget        *execute.Budget

	// desire: the decision, the layout it wants (nil when the spec does not have it:
	// readiness is judged against it), and when demand's timers or guards run out next
	// (zero: none), a time to look again even if nothing else changes.
	// requests: what the pool's GPUPoolRequests mean now (the zero Result: none, or
	// they could not be read).
	requests requests.Result

	decision      plan.Decision
	wanted        *gpupoolv1.Layout
	demandRecheck time.Time
	// demandIn is what demand decided on (with the timers it returned), for the count of
	// a layout by count that demand sizes (sizeCount); nil without spec.demand.
	demandIn *plan.DemandInput

	// connect: the vCenter session.
	vc vsphere.Client
	// tasks: what the tasks phase found of the pool's vSphere tasks, before observe, and
	// the events of the tasks that ended, kept until observe has matched the VMs' nodes
	// (flushVMEvents).
	tasks    taskLook
	vmEvents []vmEventNote
	// observe: the world (empty before), read again only to confirm a shortfall; what
	// the layouts by count resolved to on it (s.pool.Spec is then the resolved spec).
	w           world.World
	conversions plan.SpecResolution
	// decide: what the planner read of the nodes (labelledFor re-derives Labelled for
	// another layout), the plan and the layout it makes (wanted or the fallback: what
	// relabel steps label for). keep-aborted sets layout to wanted and nodeStates too.
	nodeStates map[string]plan.NodeState
	plan       *plan.Plan
	layout     *gpupoolv1.Layout
	// planned is the input of the plan when it makes the wanted layout with no problem
	// (execute.Input.Planned: the power-ons ahead of parks); nil otherwise.
	planned *plan.Input
	// keep-aborted: the pass keeps an aborted switch (the workers' recorded steps are
	// stale, so node states come from what was observed).
	aborted bool
	// decide or keep-aborted (planNext): the plan of the next scheduled switch to
	// another layout; nil when none is scheduled.
	nextPlan *plan.Plan
	// act: the task starts whose intents the pass recorded, handed out (past the pass)
	// once the pass's status write has stored them; nil: none.
	starts *execute.Handout
	// marksLater are the VMs whose node's marks the start of their suspend writes, past
	// the pass (execute.Outcome.MarksLater): the pass's state labels and warnings leave
	// those nodes to it.
	marksLater map[string]bool
	// Reconcile: the pass's number for the ready follower (readyFollow.begin); act: the
	// node steps the pass leaves to it (readyArms), armed when the pass ends.
	readySeq uint64
	arms     []readyArm
	// times are what the pass's phases took (nil in a preview's scope).
	times *passTimes

	facts facts
}

// facts are what a pass found out; summarize turns them into conditions and a phase.
type facts struct {
	paused bool
	// pausedBy names the Pause request that pauses the pool ("": spec.paused, if any).
	pausedBy string
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
	// settling: the wanted layout looked infeasible, or its choice of GPUs to convert
	// moved, while vSphere tasks were in flight or had just ended; the pass waits rather
	// than believe a read taken between two states.
	settling bool
	// reportStands: the pass settles with the layout reported infeasible on earlier quiet
	// reads; without problems of its own to report (problems), the report is kept as
	// the last pass wrote it.
	reportStands bool
	// choiceMoved names the layout by count the pass makes when its choice of GPUs moved
	// from the last pass's, or has no last one, on a read taken while tasks were in
	// flight or had just ended (holdMovedChoices).
	choiceMoved []string
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
	return execute.Worker(s.pool, s.w.ID(name))
}

// taskLook is what the tasks phase found: a task of the pool was still running when the
// pass looked (inFlight), and how many ended at that look.
type taskLook struct {
	inFlight bool
	ended    int
}

// vmEventNote is an event laterEvents keeps.
type vmEventNote struct{ vm, typ, reason, msg string }

// outcome is what one phase of a pass returns: when to come back (0: this phase asks
// for no requeue) and whether the pass ends with this phase.
type outcome struct {
	after time.Duration
	stop  bool
}
