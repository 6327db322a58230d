package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
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
	// kueue is what the pass's demand read of Kueue (spec.kueue); the quota and the
	// checks are the Kueue controller's (KueueReconciler), which reads its own.
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

	vc  vsphere.Client
	inv *inventory.Inventory
	// index finds VMs of inv by name or path without scanning it (set with inv).
	index *inventory.VMIndex
	// vms are the pool's VMs by the name or path the spec gives them, resolved once per
	// pass; specID maps a VM's inventory name back to that spec id (status key).
	vms    map[string]*inventory.VM
	specID map[string]string
	// allNodes are the cluster's nodes as observe listed them; nodes are the pool VMs'
	// nodes among them, by the VM's inventory name, as plan steps name VMs.
	allNodes []corev1.Node
	nodes    map[string]*corev1.Node
	// nodeHolds hold the VMs whose node cannot be told (matchNodes), for every plan
	// (plan.Input.Held); unsureNodes are the nodes they name, which are nobody's for now.
	nodeHolds   []plan.Problem
	unsureNodes map[string]bool
	// nodeStates are what the planner reads of them (nodeStates, derived in decide);
	// labelledFor re-derives Labelled for another layout.
	nodeStates map[string]plan.NodeState
	// gaps are what each node (by VM name) lacks to be ready for work (nodes.ReadinessGaps),
	// and drained whether a cordoned one has nothing left to evict (observeNodes).
	gaps    map[string][]string
	drained map[string]bool
	// tasksInFlight: a task of the pool was still running when the pass looked
	// (checkTasks); tasksEnded: how many ended at that look. Either way a shortfall seen
	// by the pass is not believed (decide).
	tasksInFlight bool
	tasksEnded    int
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
	// layouts indexes each layout's workers once per pass (layoutWorkers).
	layouts map[*gpupoolv1.Layout]*layoutIndex

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
	if id, ok := s.specID[name]; ok {
		return workerStatus(s.pool, id)
	}
	return workerStatus(s.pool, name)
}

// vm returns the inventory VM a plan step names.
func (s *scope) vm(name string) (*inventory.VM, bool) {
	if id, ok := s.specID[name]; ok {
		vm, found := s.vms[id]
		return vm, found
	}
	return nil, false
}

// hold records that a VM must not be acted on now.
func (s *scope) hold(vm, reason, msg string) {
	s.facts.held = append(s.facts.held, plan.Problem{Reason: reason, Message: msg, VM: vm})
}

// layoutIndex is where each worker of a layout is in its list: the first worker by spec
// id, and the first by the inventory name of the VM it resolved to (s.vms).
type layoutIndex struct {
	byID, byName map[string]int
}

// layoutWorkers indexes a layout's workers the first time a pass asks, so that looking
// a worker up for every node of a large pool does not scan the layout each time. It
// depends on s.vms, which observe sets once (and resets the index).
func (s *scope) layoutWorkers(l *gpupoolv1.Layout) *layoutIndex {
	if x, ok := s.layouts[l]; ok {
		return x
	}
	x := &layoutIndex{byID: make(map[string]int, len(l.Workers)), byName: make(map[string]int, len(l.Workers))}
	for i, w := range l.Workers {
		if _, seen := x.byID[w.VM]; !seen {
			x.byID[w.VM] = i
		}
		if v, ok := s.vms[w.VM]; ok {
			if _, seen := x.byName[v.Name]; !seen {
				x.byName[v.Name] = i
			}
		}
	}
	if s.layouts == nil {
		s.layouts = map[*gpupoolv1.Layout]*layoutIndex{}
	}
	s.layouts[l] = x
	return x
}
