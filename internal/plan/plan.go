package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// Action is what a step does. It is the API's worker step, so that the plan, the
// worker status and the events speak one vocabulary: a worker's step is the first action
// the plan has for it.
type Action = gpupoolv1.Step

// Actions, in the order they happen on a host.
const (
	// Drain cordons the VM's node and evicts its pods.
	Drain = gpupoolv1.StepDrainRequired
	// Suspend parks a VM by suspending it; it frees its GPU.
	Suspend = gpupoolv1.StepParkRequired
	// PowerOff parks a VM, or stops it to change its profile (discarding a suspended
	// state); it frees its GPU.
	PowerOff = gpupoolv1.StepPowerOffRequired
	// Reconfigure replaces the VM's vGPU device with one of Step.Profile.
	Reconfigure = gpupoolv1.StepReconfigureRequired
	// PowerOn powers on or resumes the VM; vSphere places its vGPU.
	PowerOn = gpupoolv1.StepPowerOnRequired
	// WaitNodeReady waits for the VM's node to register and become Ready.
	WaitNodeReady = gpupoolv1.StepWaitNodeReady
	// Relabel sets the layout's labels and taints on the node.
	Relabel = gpupoolv1.StepRelabelRequired
	// Uncordon makes the node schedulable again.
	Uncordon = gpupoolv1.StepUncordonRequired
)

// phases is the order of the steps on a host, written once: the steps of a GPU phase
// (drain, park, reconfigure, power on) all finish before the steps of the next start.
// Parking comes before power-ons because it frees the GPUs they need. The node phases
// (wait, relabel, uncordon) are per worker: a node that is Ready goes on without waiting
// for its siblings, and labels come before uncordon so that workloads land on a finished
// layout. The two ways to park (Suspend, PowerOff) share a phase.
var phases = [][]Action{{Drain}, {Suspend, PowerOff}, {Reconfigure}, {PowerOn}, {WaitNodeReady}, {Relabel}, {Uncordon}}

// phaseIndex and stepIndex are phases read by action, built once.
var phaseIndex, stepIndex = func() (map[Action]int, map[Action]int) {
	ph, st := map[Action]int{}, map[Action]int{}
	for i, p := range phases {
		for _, a := range p {
			ph[a], st[a] = i, len(st)
		}
	}
	return ph, st
}()

// phaseOf is the phase of an action in phases; an action not in phases counts as the
// last phase.
func phaseOf(a Action) int {
	if i, ok := phaseIndex[a]; ok {
		return i
	}
	return len(phases) - 1
}

// StepOrder is the position of a worker step among all the steps of phases, in order
// (Suspend before PowerOff within their phase), or -1 for a step that is not one
// (StepNone). It orders workers by how far a switch has brought them.
func StepOrder(a Action) int {
	if i, ok := stepIndex[a]; ok {
		return i
	}
	return -1
}

// lastGPUPhase is the phase of PowerOn: phases up to it change GPUs and are ordered per
// host; the phases after it are per worker.
var lastGPUPhase = phaseOf(PowerOn)

// Input is the observed state a plan starts from.
type Input struct {
	Spec *gpupoolv1.GPUPoolProfileSpec
	// Layout is the wanted layout, usually Desired's.
	Layout string
	// Inventory is the observed vSphere state.
	Inventory *inventory.Inventory
	// Nodes are the pool VMs' nodes, by VM name. An entry under the VM's inventory path
	// serves when there is none under its name, as layouts may name VMs either way. A VM
	// without an entry has no node.
	Nodes map[string]NodeState
	// InFlight is the action of each VM's vSphere task in flight (Suspend, PowerOff,
	// Reconfigure, PowerOn), by the VM's name or inventory path: the plan counts what
	// those tasks are about to change (see settled).
	InFlight map[string]Action
	// Held are VMs the controller found must not be acted on, by Problem.VM (the VM's
	// inventory name), such as a VM whose node it cannot tell (ReasonAmbiguousNode). The
	// plan holds them as its own (Plan.Held), unless the layout leaves them parked.
	Held []Problem
}

// NodeState is the observed state of a VM's Kubernetes node, as the controller sees it.
type NodeState struct {
	// Name of the node.
	Name string
	// Exists: the node object exists.
	Exists bool
	// Ready: the node is ready for work. The controller reports it only when the node's
	// Ready condition is True and it advertises its GPUs (and the labels and conditions
	// spec.readiness names), so a node waits at WaitNodeReady until it can take GPU pods.
	Ready bool
	// Cordoned: the node is unschedulable and gpupool may uncordon it. The controller
	// reports a node an admin cordoned before gpupool touched it as not Cordoned, so the
	// plan leaves the admin's cordon alone.
	Cordoned bool
	// Drained: cordoned, and no pods left that a drain would evict.
	Drained bool
	// Labelled: the node carries the wanted layout's labels and taints.
	Labelled bool
	// WaitExpired: the controller has waited spec.nodeReadyTimeout for this node to
	// become Ready and reports it. Its wait step no longer holds the transition or the
	// host's maxParallel slot; the worker's other node steps go on where they can.
	WaitExpired bool
}

// Plan is what takes the pool from the observed state to a layout.
type Plan struct {
	// Layout is the layout the plan makes.
	Layout string
	// Hosts are the hosts with steps, by name.
	Hosts []HostPlan
	// Problems say why the layout cannot be reached; when set, there are no steps.
	Problems []Problem
	// Held are the VMs that must not be acted on now (their Problem names the VM): a
	// running VM whose node cannot be found, a suspended VM whose state a profile change
	// would discard, the VMs the controller holds (Input.Held). They get no steps; the other VMs go on, and the plan is not done.
	Held []Problem
}

// HostPlan is the steps on one ESXi host. Hosts are independent: vGPUs are placed on
// the GPUs of the host their VM is registered on.
type HostPlan struct {
	Host string
	// Steps are in order: all steps of an action's phase before the next phase, and
	// power-ons in the order vSphere's placement accepts.
	Steps []Step
	// Later are the power-ons (and their node steps) that would not fit the GPUs as they
	// are now, because the VMs that free them still run. They are never due; a later Build
	// that observes the freed GPUs turns them into Steps. Previews show them.
	Later []Step
}

// Step is one action on one VM or its node.
type Step struct {
	VM     string
	Host   string
	Action Action
	// Profile is the vGPU profile concerned: the one the VM runs when it is drained or
	// parked, the one it gets when it is reconfigured or powered on.
	Profile string
	// VGPUs is how many vGPUs of Profile a Reconfigure gives the VM (workers[].vgpus).
	VGPUs int
	// Reason says why, for the preview, events and the worker status message.
	Reason string
	// Overdue marks a WaitNodeReady step whose node has not become Ready within
	// spec.nodeReadyTimeout (NodeState.WaitExpired). It is never due, it does not keep
	// the plan from being done, and it does not hold the worker's later steps.
	Overdue bool
}

// Build plans the way from the observed state in to in.Layout.
//
// The plan starts from what is observed now and is thrown away after use: the controller
// builds it on every reconcile, runs what Due returns, and builds it again once it has
// observed the effect. So a step that is done is simply no longer in the plan, a step
// that failed is in it again, and a change of the wanted layout mid-way is just another
// plan. Per host, in order:
//
//  1. Drain the nodes of running VMs that leave the layout or change profile, unless
//     their node is missing or drained already.
//  2. Park the VMs that leave (Suspend or PowerOff, per spec.parking; a VM that is not
//     running stays as it is) and power off those that change profile (which discards
//     a suspended state).
//  3. Reconfigure the VMs that change profile.
//  4. Power on the layout's VMs that are not running, in an order vSphere's placement
//     accepts, and only those that fit the GPUs as they are now (see HostPlan.Later).
//  5. Wait for their nodes to be Ready.
//  6. Relabel the layout's nodes that lack its labels.
//  7. Uncordon the layout's nodes that are cordoned (or will be, by step 1).
//
// A VM that runs with its profile and whose node is Ready, labelled and schedulable gets
// no step. A layout VM whose node does not register or become Ready keeps a
// WaitNodeReady step, so the plan is not done; the controller reports that against
// spec.nodeReadyTimeout. When Check finds problems the plan has no steps and carries them.
func Build(in Input) (*Plan, error) {
	if in.Spec == nil {
		return nil, errors.New("plan: no spec")
	}
	if in.Inventory == nil {
		return nil, errors.New("plan: no inventory")
	}
	nodes := in.Nodes
	if nodes == nil {
		nodes = map[string]NodeState{}
	}
	inv, starting := settled(in.Inventory, in.InFlight)
	a := analyse(in.Spec, in.Layout, inv, nodes, in.Held)
	a.starting = starting
	p := &Plan{Layout: in.Layout, Held: a.held}
	if len(a.problems) > 0 {
		p.Problems = a.problems
		return p, nil
	}
	for _, ha := range a.hosts {
		hp := a.planHost(ha, in.Nodes)
		if len(hp.Steps)+len(hp.Later) > 0 {
			p.Hosts = append(p.Hosts, hp)
		}
	}
	return p, nil
}

// planHost lists the steps on one host: each member's steps, in the phases' order and
// the power-ons in the order found for the GPUs.
func (a *analysis) planHost(ha *hostAnalysis, nodes map[string]NodeState) HostPlan {
	hp := HostPlan{Host: ha.host.Name}
	rank, now := a.powerOnsNow(ha)
	for _, m := range ha.members {
		if m.held || (m.target != nil && m.target != ha.host) || (m.target == nil && m.vm.Host != ha.host.Name) {
			continue
		}
		a.planMember(&hp, m, a.nodeOf(nodes, m.vm), now[m.vm])
	}
	for _, steps := range [][]Step{hp.Steps, hp.Later} {
		slices.SortStableFunc(steps, func(x, y Step) int {
			c := cmp.Compare(phaseOf(x.Action), phaseOf(y.Action))
			if c == 0 && x.Action == PowerOn {
				c = cmp.Compare(rank[x.VM], rank[y.VM])
			}
			return c
		})
	}
	return hp
}

// powerOnsNow ranks the host's power-ons in the order found for the GPUs as they will
// be, and says which of them to power on now: only what fits the GPUs as they are, the
// first VM that does not fit yet waiting with all after it.
func (a *analysis) powerOnsNow(ha *hostAnalysis) (map[string]int, map[*inventory.VM]bool) {
	rank := map[string]int{}
	now := map[*inventory.VM]bool{}
	occs := ha.nowStates() // what runs now, under every consistent split
	// Where a power-on in flight lands is not known until it ends: nothing else is
	// powered on on its host before then (see settled).
	fits := !a.starting[ha.host.Name]
	for i, m := range ha.order {
		rank[m.vm.Name] = i
		if fits {
			if occs, fits = placeEvery(ha.host, occs, m.offer, m.count); fits {
				now[m.vm] = true
			}
		}
	}
	return rank, now
}

// memberSteps writes one member's steps into a host plan: into Steps, or into Later
// once its power-on has to wait for the GPUs.
type memberSteps struct {
	m      *member
	noNode bool
	steps  *[]Step
	// drained says that a Drain was added, so that the node is uncordoned at the end.
	drained bool
}

func (w *memberSteps) add(action Action, profile, format string, args ...any) {
	if w.noNode && phaseOf(action) > lastGPUPhase {
		return // no node to wait for, label or uncordon
	}
	vm := w.m.vm
	s := Step{VM: vm.Name, Host: vm.Host, Action: action, Profile: profile, Reason: fmt.Sprintf(format, args...)}
	if action == Reconfigure {
		s.VGPUs = w.m.count
	}
	if w.m.target != nil {
		// The VM's own host is unavailable: its steps are the target's, and the
		// power-on names the target (PowerOnVM_Task's host argument).
		s.Host = w.m.target.Name
	}
	*w.steps = append(*w.steps, s)
}

func (w *memberSteps) drain(node NodeState, why string) {
	if w.m.vm.PowerState == inventory.PoweredOn && node.Exists && !node.Drained {
		w.add(Drain, w.m.vm.Profile, "%s", why)
		w.drained = true
	}
}

// planMember adds the steps of one VM by its fate: a VM that leaves is drained and
// parked; one that changes profile is drained, powered off and reconfigured, then comes
// back as one that arrives, which is powered on (now, or later when the GPUs are not
// free yet) and waited for; one that stays is waited for; every one with a node then
// gets the layout's labels and is uncordoned.
func (a *analysis) planMember(hp *HostPlan, m *member, node NodeState, powerOnNow bool) {
	layout := a.layout.Name
	vm := m.vm
	w := &memberSteps{m: m, noNode: a.noNode[vm], steps: &hp.Steps}
	switch m.fate {
	case parked:
		return
	case leaves:
		w.drain(node, "leaves layout "+layout)
		if suspending(a.spec) {
			w.add(Suspend, vm.Profile, "parked: not in layout %s", layout)
		} else {
			w.add(PowerOff, vm.Profile, "parked: not in layout %s", layout)
		}
		return
	case reprofiles:
		change := fmt.Sprintf("profile %s -> %s", vm.Describe(), vgpus(m.count, m.want))
		w.drain(node, change)
		switch vm.PowerState {
		case inventory.PoweredOn:
			w.add(PowerOff, vm.Profile, "%s needs the VM powered off", change)
		case inventory.Suspended:
			w.add(PowerOff, vm.Profile, "%s discards the suspended state", change)
		}
		w.add(Reconfigure, m.want, "%s", change)
	}

	if m.fate == stays {
		if !node.Exists || !node.Ready {
			w.add(WaitNodeReady, vm.Profile, "%s", nodeWait(node))
			if node.WaitExpired && len(*w.steps) > 0 {
				(*w.steps)[len(*w.steps)-1].Overdue = true
			}
		}
		if !node.Exists {
			return // nothing to label or uncordon
		}
	} else {
		if !powerOnNow {
			w.steps = &hp.Later
		}
		a.powerOn(w, node)
	}
	if !node.Labelled {
		w.add(Relabel, m.want, "node lacks layout %s's labels and taints", layout)
	}
	switch {
	case w.drained:
		w.add(Uncordon, m.want, "node cordoned by the drain")
	case node.Cordoned:
		w.add(Uncordon, m.want, "node cordoned")
	}
}

// powerOn adds the power-on (a resume for a suspended VM that arrives; on the target
// when the VM's own host is unavailable) and the wait for the node.
func (a *analysis) powerOn(w *memberSteps, node NodeState) {
	m, layout := w.m, a.layout.Name
	verb := "power on"
	if m.vm.PowerState == inventory.Suspended && m.fate == arrives {
		verb = "resume"
	}
	if m.target != nil {
		home, _ := a.findHost(m.vm.Host)
		w.add(PowerOn, m.want, "%s on host %s for layout %s: its host %s %s", verb, m.target.Name, layout, m.vm.Host, home.Unavailable())
	} else {
		w.add(PowerOn, m.want, "%s for layout %s", verb, layout)
	}
	w.add(WaitNodeReady, m.want, "%s", nodeWait(NodeState{Exists: node.Exists}))
}

// nodeOf returns the node of vm, found by the VM's name or else its inventory path.
func nodeOf(nodes map[string]NodeState, vm *inventory.VM) NodeState {
	if n, ok := nodes[vm.Name]; ok || vm.Path == "" {
		return n
	}
	return nodes[vm.Path]
}

func nodeWait(n NodeState) string {
	if !n.Exists {
		return "node not registered yet"
	}
	return "node not Ready yet"
}

// Due returns the steps that may run now, on the first maxParallel hosts (by name) that
// have steps other than overdue waits:
//
//   - of the GPU phases (drain, park, reconfigure, power on), all steps of the host's
//     earliest; of the power-ons, only the run of one profile at the head of the
//     placement order, because the placement of a vGPU of another profile depends on
//     where those land;
//   - of the node phases (wait, relabel, uncordon), each worker's first step, whatever
//     its siblings do: a Ready node is relabelled and uncordoned while another node of
//     the host is still waiting. An overdue wait does not hold its worker's later steps.
//
// The controller runs them, and builds a new plan once it has observed their effect.
func (p *Plan) Due(maxParallel int) []Step {
	maxParallel = max(maxParallel, 1)
	var due []Step
	hosts := 0
	for _, hp := range p.Hosts {
		if !hp.busy() {
			continue
		}
		due = append(due, hp.due()...)
		if hosts++; hosts == maxParallel {
			break
		}
	}
	return due
}

// busy tells whether the host has work that may run now and so holds a maxParallel
// slot: a step that is not an overdue wait. Later steps wait for GPUs that no step of
// the host frees now, and hold no slot.
func (hp *HostPlan) busy() bool {
	for _, s := range hp.Steps {
		if !s.Overdue {
			return true
		}
	}
	return false
}

func (hp *HostPlan) due() []Step {
	var due []Step
	gpuPhase := -1
	for _, s := range hp.Steps {
		if ph := phaseOf(s.Action); ph <= lastGPUPhase {
			gpuPhase = ph
			break
		}
	}
	powerOnProfile, powerOnsEnd := "", false
	started := map[string]bool{} // workers whose first (not overdue) step was seen
	for _, s := range hp.Steps {
		first := !started[s.VM]
		if s.Overdue {
			continue
		}
		started[s.VM] = true
		ph := phaseOf(s.Action)
		switch {
		case ph <= lastGPUPhase:
			if ph != gpuPhase {
				continue
			}
			if s.Action == PowerOn {
				// Power-ons of one profile are interchangeable: vSphere places them the
				// same whatever order it takes them in, so the run of them at the head
				// of the order may start together. A VM of another profile waits for
				// them, since its placement depends on where they land.
				if powerOnsEnd || (powerOnProfile != "" && s.Profile != powerOnProfile) {
					powerOnsEnd = true
					continue
				}
				powerOnProfile = s.Profile
			}
			due = append(due, s)
		case first:
			due = append(due, s)
		}
	}
	return due
}

// Done tells whether the pool has the layout: no problems, no held VMs, and nothing left
// to do but wait for nodes that are overdue (the controller reports those).
func (p *Plan) Done() bool {
	if len(p.Problems)+len(p.Held) > 0 {
		return false
	}
	for _, hp := range p.Hosts {
		if hp.busy() || len(hp.Later) > 0 {
			return false
		}
	}
	return true
}

// String previews the plan for users, one line per step.
func (p *Plan) String() string {
	var b strings.Builder
	if len(p.Problems) > 0 {
		fmt.Fprintf(&b, "layout %s cannot be reached:\n", p.Layout)
		for _, pr := range p.Problems {
			fmt.Fprintf(&b, "  %s: %s\n", pr.Reason, pr.Message)
		}
		return b.String()
	}
	steps, hosts := 0, 0
	for _, hp := range p.Hosts {
		if n := len(hp.Steps) + len(hp.Later); n > 0 {
			steps += n
			hosts++
		}
	}
	if steps == 0 {
		fmt.Fprintf(&b, "layout %s: nothing to do\n", p.Layout)
		return b.String()
	}
	fmt.Fprintf(&b, "layout %s: %d %s on %d %s\n", p.Layout, steps, plural(steps, "step"), hosts, plural(hosts, "host"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, hp := range p.Hosts {
		for _, s := range hp.Steps {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", hp.Host, s.Action, s.VM, s.Profile, s.Reason)
		}
		for _, s := range hp.Later {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s (once GPUs are freed)\n", hp.Host, s.Action, s.VM, s.Profile, s.Reason)
		}
	}
	tw.Flush()
	return b.String()
}
