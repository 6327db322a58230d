package execute

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// execute does one due step of one worker, but a drain (act runs drains together),
// without blocking and says when to look again.
// Progress that cannot be re-observed (task intents and ids, step start times, when the
// guest was asked to shut down) goes into the worker's status. (The controller may leave
// a task's id and a step's start unwritten for a few seconds: an intent finds its task
// again, and a step begun again after a crash only starts its timeouts later;
// controllers/statusdefer.go.)
func (r *run) execute(ctx context.Context, step plan.Step) (time.Duration, error) {
	ws := r.worker(step.VM)
	if backingOff(ws, r.Now) {
		r.sayMoved(ws, step)
		return ws.NextRetryTime.Sub(r.Now), nil
	}
	if ws.StepStartTime == nil {
		ws.StepStartTime = ptrTime(r.Now)
	}
	vm, ok := r.World.VM(step.VM)
	if !ok {
		return RequeueBlocked, nil
	}
	// Nothing new starts for a worker until its last vSphere task has finished
	// (checkTasks looked at it at the start of this pass).
	if ws.Task != nil {
		return RequeueTask, nil
	}

	node := r.World.Nodes[step.VM]
	switch step.Action {
	case plan.Suspend:
		if !r.markParked(ctx, step.VM, node, step.Action) {
			return RequeueBlocked, nil
		}
		queued := len(r.queued)
		wait, err := r.startTask(ws, vm, vsphere.OpSuspend, func(ctx context.Context) (string, error) { return r.VSphere.Suspend(ctx, vm.Ref) })
		if len(r.queued) > queued {
			q := &r.queued[queued]
			q.mark = r.markLater(step.VM, node)
			q.writes = q.mark != nil
		}
		return wait, err
	case plan.PowerOff:
		if !r.markParked(ctx, step.VM, node, step.Action) {
			return RequeueBlocked, nil
		}
		if vm.PowerState == inventory.Suspended {
			r.Events.VM(ws.VM, corev1.EventTypeWarning, "SuspendedStateDiscarded", fmt.Sprintf("powering off suspended VM %s to change its vGPU profile: its suspended memory state is lost (spec.discardSuspendedState)", ws.VM))
		}
		return r.powerOff(ctx, ws, vm)
	case plan.Reconfigure:
		return r.startTask(ws, vm, vsphere.OpReconfigure, func(ctx context.Context) (string, error) {
			return r.VSphere.SetProfile(ctx, vm.Ref, step.Profile, step.VGPUs)
		})
	case plan.PowerOn:
		host, err := powerOnHost(r.World.Inventory, vm, step)
		if err != nil {
			return r.failed(ws, "PowerOn not started", err.Error()), nil
		}
		return r.startTask(ws, vm, vsphere.OpPowerOn, func(ctx context.Context) (string, error) { return r.VSphere.PowerOn(ctx, vm.Ref, host) })
	case plan.WaitNodeReady:
		return r.waitNodeReady(step, ws, node), nil
	case plan.Relabel, plan.Uncordon:
		// As patchNodesTogether, which runs them but when it has no budget left.
		if !r.Budget.NodeWrite() {
			return 0, ErrCapped
		}
		if step.Action == plan.Relabel {
			return r.relabel(ctx, step.VM, node, r.uncordonWithRelabel(step.VM))
		}
		return r.uncordonStep(ctx, step.VM, node)
	}
	return 0, fmt.Errorf("unknown action %q", step.Action)
}

// powerOff shuts the guest down and powers the VM off hard only when the guest cannot
// be asked (VMware Tools is not running, the VM is suspended) or has not shut down
// within spec.guestShutdownTimeout. Any other error asking the guest is retried with a
// backoff: a transient error is no reason to pull the plug.
func (r *run) powerOff(ctx context.Context, ws *gpupoolv1.WorkerStatus, vm *inventory.VM) (time.Duration, error) {
	hard := func(ctx context.Context) (string, error) { return r.VSphere.PowerOff(ctx, vm.Ref) }
	if vm.PowerState != inventory.PoweredOn {
		return r.startTask(ws, vm, vsphere.OpPowerOff, hard)
	}
	timeout := guestShutdownTimeout(r.Pool)
	if t := ws.GuestShutdownTime; t != nil {
		if waited := r.Now.Sub(t.Time); waited < timeout {
			ws.Message = fmt.Sprintf("waiting for the guest to shut down (powered off hard at %s if it has not, guestShutdownTimeout %s)", deadline(t.Time, timeout), timeout)
			return min(RequeueTask, timeout-waited), nil
		}
		r.Events.VM(ws.VM, corev1.EventTypeWarning, "GuestShutdownTimedOut", fmt.Sprintf("the guest of VM %s did not shut down within %s; powering off", ws.VM, timeout))
		return r.startTask(ws, vm, vsphere.OpPowerOff, hard)
	}
	err := r.VSphere.ShutdownGuest(ctx, vm.Ref)
	switch {
	case errors.Is(err, vsphere.ErrToolsUnavailable) || errors.Is(err, vsphere.ErrInvalidPowerState):
		r.Events.VM(ws.VM, corev1.EventTypeNormal, "GuestShutdownUnavailable", fmt.Sprintf("the guest of VM %s cannot be asked to shut down (%v); powering off", ws.VM, err))
		return r.startTask(ws, vm, vsphere.OpPowerOff, hard)
	case err != nil:
		return r.failed(ws, "asking the guest to shut down", err.Error()), nil
	}
	ws.GuestShutdownTime = ptrTime(r.Now)
	ws.Message = "asked the guest to shut down"
	r.Events.VM(ws.VM, corev1.EventTypeNormal, "GuestShutdownRequested", fmt.Sprintf("asked the guest of VM %s to shut down", ws.VM))
	return RequeueTask, nil
}

func guestShutdownTimeout(p *gpupoolv1.GPUPoolProfile) time.Duration {
	if t := p.Spec.GuestShutdownTimeout; t != nil {
		return t.Duration
	}
	return 2 * time.Minute
}

// markParked labels and taints a node as parked and shields its Cluster API Machine
// before its VM goes down; the marks of a suspend's node are left to the start of its
// task (marksLater), which writes them just before it asks, and reports a failed write
// through the next pass (Follower.StepErrors). It reports false when the VM must not be
// parked now: its Machine cannot be read, or the Machine its annotations name is not
// the node's, so it could not be protected (the VM is held and Stalled says why); a
// failed node patch in the pass is reported as a step error the same way.
func (r *run) markParked(ctx context.Context, vm string, node *corev1.Node, action plan.Action) bool {
	if node == nil {
		return true
	}
	var held *HoldError
	err, ahead := r.parkedAhead[vm]
	switch {
	case ahead:
	case !nodes.HasMeta(node, nodes.ParkedMeta(r.Pool.Name)) && !r.marksLater(action) && !r.Budget.NodeWrite():
		err = ErrCapped
	default:
		err = r.parkNode(ctx, vm, node, r.marksLater(action))
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrCapped):
		// Parked in the next pass, which follows at once.
	case errors.As(err, &held):
		r.hold(vm, held.Reason, fmt.Sprintf("VM %s is not parked: %v", vm, err))
	default:
		r.out.StepErrors = append(r.out.StepErrors, err.Error())
	}
	return false
}

// parkNode protects the Machine of the node of vm and marks the node parked by the pool
// (with the pass's marks); the node write was taken from the budget unless the node is
// marked already. The marks of a suspend's node are left to the start of its task
// (later: markLater), which writes them before it asks vCenter, past the pass, paced by
// Starts (MaxConcurrentWrites of a pool at once), not by the pass's budget: the pass that
// spent its node writes on a thousand cordons still hands out the suspends its drains
// make due. It changes nothing in the run, so that parkAhead may run it for many nodes at
// once.
func (r *run) parkNode(ctx context.Context, vm string, node *corev1.Node, later bool) error {
	marked := nodes.HasMeta(node, nodes.ParkedMeta(r.Pool.Name))
	if later && r.protectLater {
		return nil // the start protects the Machine, then marks the node (startAfterDrains)
	}
	if err := r.Nodes.Protect(ctx, node); err != nil {
		if !marked && !later {
			r.Budget.NodeUnwritten()
		}
		if held := (*HoldError)(nil); errors.As(err, &held) {
			return err
		}
		return fmt.Errorf("protecting the Machine of node %s: %w", node.Name, err)
	}
	switch {
	case marked:
		return nil
	case later:
		// The start's answer tells a failure (Starts.mark), its VM is then not parked,
		// and the next pass plans it again a minute later, as after a park whose node
		// write failed in the pass.
		return nil
	}
	err := r.Nodes.Patch(ctx, node, r.withMarks(vm, false, func(n *corev1.Node) { nodes.ApplyMeta(n, nodes.ParkedMeta(r.Pool.Name)) }))
	r.Budget.NodeWritten(err)
	return err
}

// marksLater tells whether the parked marks of the node of a due park step are written
// by the start of its task, past the pass, rather than in the pass (parkNode): a
// suspend whose start Starts asks. The pass then ends without waiting for hundreds of
// node writes, and each VM goes down as soon as its own node is marked (issue 37: a
// pass's parks waited for all their nodes' writes, then for its status write, before
// the first suspend was asked). A power-off stays in the pass: it asks the guest first.
func (r *run) marksLater(action plan.Action) bool {
	return r.Starts != nil && action == plan.Suspend
}

// markLater is the node write the start of the suspend of vm makes before it asks
// vCenter (queuedStart.mark): the parked marks, with the pass's own, on the node as it
// is when the write is made (Nodes.Current; Nodes.Patch reads it again on a conflict);
// nil when the node, as the pass read it, carries them already or there is no node.
// The node is left out of the pass's state labels (Outcome.MarksLater): this write
// carries its label.
func (r *run) markLater(vm string, node *corev1.Node) func(context.Context) error {
	pool := r.Pool.Name
	if node == nil || !r.marksLater(plan.Suspend) || nodes.HasMeta(node, nodes.ParkedMeta(pool)) {
		return nil
	}
	if r.out.MarksLater == nil {
		r.out.MarksLater = map[string]bool{}
	}
	r.out.MarksLater[vm] = true
	name, change, write := node.Name, r.withMarks(vm, false, func(n *corev1.Node) { nodes.ApplyMeta(n, nodes.ParkedMeta(pool)) }), r.Nodes
	return func(ctx context.Context) error {
		n, err := write.Current(ctx, name)
		if err != nil {
			return err
		}
		return write.Patch(ctx, n, change)
	}
}

// parkAhead runs parkNode for the nodes of the due steps that will park their VM
// (bounded, concurrently), so that a pass parking hundreds of VMs does not patch their
// nodes one after the other; markParked then reads the outcome.
func (r *run) parkAhead(ctx context.Context, steps []plan.Step) {
	var vms []string
	var later []bool
	for _, st := range steps {
		ws := r.worker(st.VM)
		if _, ok := r.World.VM(st.VM); !ok {
			continue
		}
		if (st.Action != plan.Suspend && st.Action != plan.PowerOff) || r.World.Nodes[st.VM] == nil || ws.Task != nil ||
			backingOff(ws, r.Now) {
			continue
		}
		vms, later = append(vms, st.VM), append(later, r.marksLater(st.Action))
	}
	if len(vms) < 2 {
		return
	}
	errs := make([]error, len(vms))
	for i, vm := range vms {
		if !nodes.HasMeta(r.World.Nodes[vm], nodes.ParkedMeta(r.Pool.Name)) && !later[i] && !r.Budget.NodeWrite() {
			errs[i] = ErrCapped
		}
	}
	ForEach(len(vms), MaxConcurrentWrites, func(i int) {
		if errs[i] == nil {
			errs[i] = r.parkNode(ctx, vms[i], r.World.Nodes[vms[i]], later[i])
		}
	})
	r.parkedAhead = make(map[string]error, len(vms))
	for i, vm := range vms {
		r.parkedAhead[vm] = errs[i]
	}
}

func (r *run) waitNodeReady(step plan.Step, ws *gpupoolv1.WorkerStatus, node *corev1.Node) time.Duration {
	timeout := NodeReadyTimeout(r.Pool)
	name := "(no node yet)"
	if node != nil {
		name = node.Name
	}
	waited := r.Now.Sub(ws.StepStartTime.Time)
	what := "to become Ready"
	if node != nil {
		what = "to be ready for work: " + nodes.WaitingFor(r.World.Gaps[step.VM])
		if gaps := r.World.Gaps[step.VM]; len(gaps) > 0 {
			r.out.NodeWaits = append(r.out.NodeWaits, fmt.Sprintf("node %s waits for %s", name, strings.Join(gaps, ", ")))
		}
	}
	ws.Message = fmt.Sprintf("waiting for node %s %s (until %s, nodeReadyTimeout %s)", name, what, deadline(ws.StepStartTime.Time, timeout), timeout)
	return max(min(RequeueNodeReady, timeout-waited), RequeueStep)
}

func (r *run) uncordonStep(ctx context.Context, vm string, node *corev1.Node) (time.Duration, error) {
	if node == nil {
		r.Budget.NodeUnwritten()
		return RequeueNodeReady, nil
	}
	if r.madeElsewhere(vm) {
		return RequeueStep, nil
	}
	err := r.Nodes.Patch(ctx, node, r.withMarks(vm, true, nodes.Uncordon))
	r.Budget.NodeWritten(err)
	if err != nil {
		return 0, err
	}
	r.finished(vm)
	r.Events.Node(node, corev1.EventTypeNormal, "Uncordoned", fmt.Sprintf("uncordoned node %s", node.Name))
	return RequeueStep, nil
}

// relabel gives the node of vm the layout's labels and taints and, when uncordon says so
// (uncordonWithRelabel), uncordons it in the same patch: the node becomes schedulable
// with its labels, in one write rather than one per step.
func (r *run) relabel(ctx context.Context, vm string, node *corev1.Node, uncordon bool) (time.Duration, error) {
	m, ok := r.World.MetaFor(r.Pool.Name, r.Layout, vm)
	if node == nil || !ok {
		r.Budget.NodeUnwritten()
		return RequeueNodeReady, nil
	}
	if r.madeElsewhere(vm) {
		return RequeueStep, nil
	}
	// The uncordon is the only step that may follow a relabel: the patch does the
	// worker's last step unless the plan still uncordons the node afterwards.
	last := uncordon || !r.uncordons[vm]
	err := r.Nodes.Patch(ctx, node, r.withMarks(vm, last, func(n *corev1.Node) {
		nodes.ApplyMeta(n, m)
		if uncordon {
			nodes.Uncordon(n)
		}
	}))
	r.Budget.NodeWritten(err)
	if err != nil {
		return 0, err
	}
	if last {
		r.finished(vm)
	}
	if err := r.Nodes.Release(ctx, node); err != nil {
		return 0, err
	}
	r.Events.Node(node, corev1.EventTypeNormal, "Relabelled", fmt.Sprintf("node %s labelled for layout %s", node.Name, r.Layout.Name))
	if uncordon {
		r.Events.Node(node, corev1.EventTypeNormal, "Uncordoned", fmt.Sprintf("uncordoned node %s", node.Name))
	}
	return RequeueStep, nil
}

// madeElsewhere tells whether the node step of vm was made outside the pass since it
// read the node (Input.Claim): the run then leaves it, gives back the write it counted,
// and records the worker done when that write did its last step.
func (r *run) madeElsewhere(vm string) bool {
	if r.Claim == nil {
		return false
	}
	skip, done := r.Claim(vm)
	if !skip {
		return false
	}
	r.Budget.NodeUnwritten()
	if done {
		r.finished(vm)
	}
	return true
}

// uncordonWithRelabel tells whether the relabel of the node of vm uncordons it in the
// same patch: the plan uncordons it next, and the node is still ready for work once it
// carries the layout's labels (Input.ReadyOnceRelabelled). Both steps only patch the
// node and the uncordon is the worker's last: the plan's order stands, the node is
// never schedulable without the layout's labels. A node whose readiness the labels
// change (a layout's gpuReplicas) is uncordoned by a later pass, once it is judged with
// them.
func (r *run) uncordonWithRelabel(vm string) bool {
	return r.uncordons[vm] && r.ReadyOnceRelabelled != nil && r.ReadyOnceRelabelled(vm)
}

// uncordonsOf are the VMs whose node the plan uncordons (by inventory name).
func uncordonsOf(p *plan.Plan) map[string]bool {
	out := map[string]bool{}
	for _, hp := range p.Hosts {
		for _, st := range hp.Steps {
			if st.Action == plan.Uncordon {
				out[st.VM] = true
			}
		}
	}
	return out
}

// powerOnHost is the ref of the host a power-on step names when it is not the VM's own
// (the plan moves the power-on of a powered-off VM off an unavailable host), else "".
// A host the step names that the inventory does not hold is an error, never "": that
// would power the VM on on the unavailable host the plan moved it away from.
func powerOnHost(inv *inventory.Inventory, vm *inventory.VM, step plan.Step) (string, error) {
	if step.Host == "" || step.Host == vm.Host {
		return "", nil
	}
	h, ok := inv.FindHost(step.Host)
	if !ok || h.Ref == "" {
		return "", fmt.Errorf("the plan moves the power-on of VM %s from host %s to host %s, which is not in the inventory", vm.Name, vm.Host, step.Host)
	}
	return h.Ref, nil
}

// sayMoved makes the message of a worker whose moved power-on failed say so: the
// power-on was moved off the VM's unavailable host to the step's host, and vCenter
// refused it there (a host argument of PowerOnVM_Task must be compatible with the VM:
// its datastores and networks reachable). The failure itself (ws.Message, written by
// failed) keeps the fault; the step is retried with the backoff.
func (r *run) sayMoved(ws *gpupoolv1.WorkerStatus, step plan.Step) {
	vm, ok := r.World.VM(step.VM)
	refused := strings.HasPrefix(ws.Message, "PowerOn failed") || strings.HasPrefix(ws.Message, "PowerOn could not start")
	if step.Action != plan.PowerOn || !ok || step.Host == "" || step.Host == vm.Host || !refused {
		return
	}
	why := "is unavailable"
	if h, ok := r.World.Inventory.FindHost(vm.Host); ok && h.Unavailable() != "" {
		why = h.Unavailable()
	}
	ws.Message = fmt.Sprintf("the power-on was moved to host %s (VM %s's host %s %s) and vCenter refused it there: %s",
		step.Host, vm.Name, vm.Host, why, ws.Message)
}

// patchNodesTogether runs the due steps that only patch their node (Relabel, with the
// Uncordon that follows it in the same patch, and Uncordon) concurrently (bounded): at
// the end of a transition every node of the new layout is relabelled and uncordoned at
// about the same time. They read the run's input and change nothing in it, so their
// outcomes are noted one by one afterwards. It returns the other steps.
func (r *run) patchNodesTogether(ctx context.Context, steps []plan.Step) []plan.Step {
	var nodeSteps, rest []plan.Step
	var uncordon []bool // per node step: a relabel that uncordons too
	for _, step := range steps {
		ws := r.worker(step.VM)
		_, found := r.World.VM(step.VM)
		plain := found && ws.Task == nil && !backingOff(ws, r.Now)
		if (step.Action == plan.Relabel || step.Action == plan.Uncordon) && plain {
			if !r.Budget.NodeWrite() {
				continue // in the next pass
			}
			// As execute does for the steps it runs.
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(r.Now)
			}
			nodeSteps = append(nodeSteps, step)
			uncordon = append(uncordon, step.Action == plan.Relabel && r.uncordonWithRelabel(step.VM))
		} else {
			rest = append(rest, step)
		}
	}
	type outcome struct {
		after time.Duration
		err   error
	}
	out := make([]outcome, len(nodeSteps))
	ForEach(len(nodeSteps), MaxConcurrentWrites, func(i int) {
		step := nodeSteps[i]
		node := r.World.Nodes[step.VM]
		if step.Action == plan.Relabel {
			out[i].after, out[i].err = r.relabel(ctx, step.VM, node, uncordon[i])
			return
		}
		out[i].after, out[i].err = r.uncordonStep(ctx, step.VM, node)
	})
	for i, step := range nodeSteps {
		r.note(step, out[i].after, out[i].err)
	}
	return rest
}
