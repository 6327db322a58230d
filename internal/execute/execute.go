// Package execute runs the due steps of a pool's plan for one pass of the pool
// controller: it drains, parks, reconfigures, powers on, waits for, relabels and
// uncordons, through the small interfaces below (Nodes, Drainer, Events and a
// vsphere.Client), and returns what happened as an Outcome. The evictions of its drains
// may run past the pass (Evictions): a later pass reads what a node's round found. It
// decides nothing the plan did not: the controller observes (world.World), decides
// (plan.Plan) and reads the Outcome (conditions, phase, the abort of a transition).
//
// The executor writes the workers' status (status.workers) of the pool it is given:
// progress that cannot be re-observed (task intents and ids, step start times, when the
// guest was asked to shut down, retries). It writes nothing else of the pool.
package execute

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// Requeue intervals a step asks for. A step never waits: it starts work, records it and
// says when to look again.
const (
	RequeueTask      = 2 * time.Second
	RequeueDrain     = 10 * time.Second
	RequeueNodeReady = 5 * time.Second
	RequeueStep      = time.Second
	RequeueBlocked   = time.Minute
)

// MaxConcurrentWrites bounds how many nodes are cordoned, evicted from or patched at the
// same time in one pass: enough that a pass over hundreds of nodes takes about as long
// as its slowest write, few enough not to flood the API server.
const MaxConcurrentWrites = 16

// Nodes writes the pool's nodes and shields their Cluster API Machines.
type Nodes interface {
	// Patch applies change to the node without overwriting what others set meanwhile;
	// the node is refreshed from the API server's answer, and left as it was when the
	// patch fails.
	Patch(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error
	// Protect shields the node's Machine before its VM goes down; a *HoldError when it
	// must not go down now.
	Protect(ctx context.Context, n *corev1.Node) error
	// Release gives the node's Machine back to Cluster API once the node serves again.
	Release(ctx context.Context, n *corev1.Node) error
	// Current is node name as it is now (the manager's cache), the caller's to change and
	// Patch; an error when it cannot be read (gone: NotFound). The writes that wait past
	// their pass (a suspend's after its drains) read their node when they go rather than
	// hold a copy of it for minutes each.
	Current(ctx context.Context, name string) (*corev1.Node, error)
}

// Drainer evicts a node's pods (internal/drain). Drain reads the node's name and its
// Ready condition, nothing else (handOut gives it no more).
type Drainer interface {
	Drain(ctx context.Context, n *corev1.Node, d gpupoolv1.DrainSpec, started, now time.Time, b drain.Budget) (drain.Result, error)
	ForceDelete(ctx context.Context, node string, d gpupoolv1.DrainSpec) (int, error)
}

// Events records what the steps did, for people.
type Events interface {
	// VM is about the VM of a worker (by spec id): on its node when it has one.
	VM(vm, typ, reason, note string)
	// Node is about one node of the pool.
	Node(n *corev1.Node, typ, reason, note string)
	// Pool is on the pool, related to node n, in a series of its own per n.
	Pool(n *corev1.Node, typ, reason, note string)
}

// HoldError says that a VM must not be acted on now, and why (Reason: the Stalled
// reason). Nodes.Protect returns it when the node's Machine cannot be protected.
type HoldError struct {
	Reason string
	Err    error
}

func (e *HoldError) Error() string { return e.Err.Error() }
func (e *HoldError) Unwrap() error { return e.Err }

// Executor runs one pass's steps. Its fields are what it acts through; Persist stores
// the pool's status (the task intents) before a task starts in the pass (without
// Starts), and Timed records the time a part of the run took (nil: not recorded).
type Executor struct {
	Nodes   Nodes
	Drainer Drainer
	Events  Events
	VSphere vsphere.Client
	Persist func(context.Context) error
	Timed   func(part string, start time.Time)
	// Evictions, when set, runs the drains' evictions past the pass (evictBehind); nil
	// evicts inside the pass and settles each drain in it (the tests that run passes by
	// hand).
	Evictions *Evictions
	// Starts, when set, asks vCenter to start the pass's tasks past the pass, once the
	// pass's own status write has stored their intents (Outcome.Starts); nil stores
	// them with Persist and starts them inside the pass (the tests that run passes by
	// hand).
	Starts *Starts
	// Drains, when set with Starts, tells when the pods of a node are gone but those a
	// drain leaves alone (drain.Gone). The suspends that drains ending in the pass make
	// due are then asked as soon as it says so for each of their nodes (afterdrains.go);
	// not when it cannot tell (a node whose pods are not watched). nil: each suspend
	// waits for a pass that observes its node drained.
	Drains DrainWatch
}

// Input is what one run acts on: the pool (whose workers' status it writes), the time
// of the pass, the plan and the layout it makes, the world the plan was made from, the
// writes the pass may still make (nil: no cap), and the pass's marks.
type Input struct {
	Pool   *gpupoolv1.GPUPoolProfile
	Now    time.Time
	Plan   *plan.Plan
	Layout *gpupoolv1.Layout
	World  *world.World
	Budget *Budget
	// Marks, when set, puts on n, the node of VM vm (by inventory name), the marks the
	// pass publishes for it (its state label and their owner): a step that patches a
	// node carries them in its own patch, so that the pass does not patch the node a
	// second time for them. done says that the patch does the worker's last step (a
	// relabel, an uncordon): the marks are then those of a worker with no step left,
	// which the next pass publishes. It is called from the run's concurrent writes, and
	// past the pass by the suspends' node writes (Outcome.MarksLater), possibly while the
	// next pass runs: it must only read what nothing changes once the run has begun.
	Marks func(vm string, done bool, n *corev1.Node)
	// ReadyOnceRelabelled tells whether the node of VM vm (by inventory name), ready for
	// work, stays so once it carries the layout's labels and taints: its relabel then
	// uncordons it too, when the plan uncordons it next (nil: never, each in its pass).
	ReadyOnceRelabelled func(vm string) bool
	// Claim, when set, is asked before the run relabels or uncordons the node of VM vm
	// (by inventory name): skip says that this node step was made, or is being made,
	// outside the pass since it read the node (the controller's ready follower), and the
	// run leaves it; done, that that write did the worker's last step (Outcome.Done).
	// nil: the run makes every node step.
	Claim func(vm string) (skip, done bool)
	// Planned, when set with Executor.Starts, is the input the plan was built from: the
	// run also plans the power-ons that its parks and those in flight make due, and has
	// them asked once those parks end (ahead.go). nil: each power-on waits for a pass
	// that observes its GPUs free.
	Planned *plan.Input
}

// Outcome is what a run did that the pass's summary needs: when to come back (0: no
// requeue asked), what kept steps from going on, what nodes waited for, the VMs held,
// Abort, the reason to abort the transition (a drain timed out and
// spec.drain.onTimeout is Abort): the run stopped there, and the controller aborts; and
// Done, the VMs (by inventory name) whose last step's node patch went through, with the
// marks of a worker with no step left (Input.Marks).
type Outcome struct {
	After        time.Duration
	StepErrors   []string
	DrainBlocked []string
	NodeWaits    []string
	Held         []plan.Problem
	Abort        string
	Done         map[string]bool
	// MarksLater are the VMs (by inventory name) whose node's parked marks, with the
	// pass's marks, the start of their suspend writes past the pass (markLater): the
	// pass leaves their state labels to that write. nil: none.
	MarksLater map[string]bool
	// Starts are the task starts the run queued with Executor.Starts set: their intents
	// are on the pool's workers, and the controller hands them out (Handout.Hand) once
	// its status write of the pass has stored them; nil: none.
	Starts *Handout
}

// run is one Run's state.
type run struct {
	*Executor
	Input
	out Outcome
	// queued are the tasks whose intents the run recorded, started (or handed to
	// Starts) together at the end.
	queued []queuedStart
	// parkedAhead is what parkAhead found parking the nodes of the due steps, by VM
	// (nil: parked).
	parkedAhead map[string]error
	// uncordons are the VMs whose node the plan uncordons (uncordonWithRelabel).
	uncordons map[string]bool
	// drainsEnding are the VMs whose drain's first round the pass hands out, or whose
	// round it settled with nothing left to evict: their nodes' pods are only
	// terminating, or gone (startAfterDrains). settled are the VMs whose drain's round
	// the pass settled: their worker's message says what the drain waits for.
	drainsEnding []string
	settled      map[string]bool
	// protectLater: the suspends being queued (startAfterDrains) protect their
	// Machines in their starts, once their drains ended, not in the pass.
	protectLater bool
	// doneMu guards out.Done, which concurrent node steps add to (finished).
	doneMu sync.Mutex
}

// Run runs the plan's due steps. Drains run their evictions concurrently, after every
// node the plan will drain has been cordoned, and past the pass when e.Evictions is set
// (evictBehind); the other steps run one by one, but the
// vSphere tasks they start are started together at the end (startQueued), past the pass
// when e.Starts is set (once the pass's status write has stored their intents:
// Outcome.Starts). A failing
// step is reported and never stops the others; a drain that aborts the transition stops
// the run.
func (e *Executor) Run(ctx context.Context, in Input) Outcome {
	r := &run{Executor: e, Input: in, uncordons: uncordonsOf(in.Plan)}
	var drains, others []plan.Step
	for _, step := range in.Plan.Due(int(max(in.Pool.Spec.MaxParallel, 1))) {
		ws := r.worker(step.VM)
		switch {
		case step.Action != plan.Drain:
			others = append(others, step)
		case backingOff(ws, in.Now):
			r.note(step, ws.NextRetryTime.Sub(in.Now), nil)
		default:
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(in.Now)
			}
			drains = append(drains, step)
		}
	}
	if r.Evictions != nil {
		r.Evictions.keepOnly(in.Pool.Name, drainingNodes(in.Plan, in.World))
	}
	if r.drain(ctx, drains) {
		return r.out
	}
	r.timed("act:node-steps", func() { others = r.patchNodesTogether(ctx, others) })
	r.timed("act:park", func() { r.parkAhead(ctx, others) })
	r.timed("act:steps", func() { r.runSteps(ctx, others) })
	r.timed("act:after-drains", func() {
		r.openDrainedGates()
		r.startAfterDrains(ctx)
	})
	r.timed("act:ahead", r.startAhead)
	r.timed("act:start", func() { r.startQueued(ctx) })
	return r.out
}

// drain cordons every node the plan will drain, then evicts from the due ones (nothing
// is evicted until every node to drain is cordoned, even when that takes more than one
// pass). It reports true when a drain aborted the transition.
func (r *run) drain(ctx context.Context, drains []plan.Step) bool {
	if len(drains) == 0 {
		return false
	}
	cordoned := false
	r.timed("act:cordon", func() { cordoned = r.cordonAhead(ctx, drains) })
	if !cordoned {
		return false
	}
	if r.Evictions != nil {
		aborted := false
		r.timed("act:evict", func() { aborted = r.evictBehind(ctx, drains) })
		return aborted
	}
	var outcomes []drainOutcome
	r.timed("act:evict", func() { outcomes = r.evictAll(ctx, drains) })
	for i, o := range outcomes {
		step := drains[i]
		wait, err := r.settleDrain(ctx, r.worker(step.VM), r.World.Nodes[step.VM], o)
		r.note(step, wait, err)
		if r.out.Abort != "" {
			return true
		}
	}
	return false
}

// note records a step's outcome: a failure in the worker's message and the step errors,
// and when to look again.
func (r *run) note(step plan.Step, next time.Duration, err error) {
	if errors.Is(err, ErrCapped) {
		return // goes on in the next pass, which follows at once
	}
	if err != nil {
		ws := r.worker(step.VM)
		ws.Message = fmt.Sprintf("%s failed: %v", step.Action, err)
		r.out.StepErrors = append(r.out.StepErrors, fmt.Sprintf("%s of VM %s: %v", step.Action, step.VM, err))
		next = RequeueDrain
	}
	r.out.After = Soonest(r.out.After, next)
}

// hold records that a VM must not be acted on now.
func (r *run) hold(vm, reason, msg string) {
	r.out.Held = append(r.out.Held, plan.Problem{Reason: reason, Message: msg, VM: vm})
}

// runSteps executes the other due steps one by one; the vSphere tasks they queue are
// started after them (startQueued).
func (r *run) runSteps(ctx context.Context, steps []plan.Step) {
	for _, step := range steps {
		queued := len(r.queued)
		wait, err := r.execute(ctx, step)
		for i := queued; i < len(r.queued); i++ {
			r.queued[i].step = step
		}
		r.note(step, wait, err)
	}
}

// worker returns the status entry of the VM a plan step names.
func (r *run) worker(name string) *gpupoolv1.WorkerStatus {
	return Worker(r.Pool, r.World.ID(name))
}

// withMarks is a step's change of the node of vm, with the pass's marks; done: the
// change does the worker's last step (Input.Marks).
func (r *run) withMarks(vm string, done bool, change func(*corev1.Node)) func(*corev1.Node) {
	if r.Marks == nil {
		return change
	}
	return func(n *corev1.Node) {
		change(n)
		r.Marks(vm, done, n)
	}
}

// finished records that the node patch of vm's last step went through (Outcome.Done).
func (r *run) finished(vm string) {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	if r.out.Done == nil {
		r.out.Done = map[string]bool{}
	}
	r.out.Done[vm] = true
}

func (r *run) timed(part string, f func()) {
	start := time.Now()
	f()
	if r.Timed != nil {
		r.Timed(part, start)
	}
}

// Soonest merges requeue delays: the lowest that is not zero (zero: no requeue asked),
// as Cluster API's LowestNonZeroResult does.
func Soonest(ds ...time.Duration) time.Duration {
	var out time.Duration
	for _, d := range ds {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}
