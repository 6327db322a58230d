package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// execute does one due step of one worker, but a drain (act runs drains together),
// without blocking and says when to look again.
// Progress that cannot be re-observed (task intents and ids, step start times, when the
// guest was asked to shut down) goes into the worker's status.
func (r *GPUPoolProfileReconciler) execute(ctx context.Context, s *scope, step plan.Step) (time.Duration, error) {
	ws := s.worker(step.VM)
	if ws.NextRetryTime != nil && s.now.Before(ws.NextRetryTime.Time) {
		sayMoved(s, ws, step)
		return ws.NextRetryTime.Sub(s.now), nil
	}
	if ws.StepStartTime == nil {
		ws.StepStartTime = ptrTime(s.now)
	}
	vm, ok := s.w.VM(step.VM)
	if !ok {
		return requeueBlocked, nil
	}
	// Nothing new starts for a worker until its last vSphere task has finished
	// (checkTasks looked at it at the start of this pass).
	if ws.Task != nil {
		return requeueTask, nil
	}

	node := s.w.Nodes[step.VM]
	switch step.Action {
	case plan.Suspend:
		if !r.markParked(ctx, s, step.VM, node) {
			return requeueBlocked, nil
		}
		return r.startTask(ctx, s, ws, vm, vsphere.OpSuspend, func() (string, error) { return s.vc.Suspend(ctx, vm.Ref) })
	case plan.PowerOff:
		if !r.markParked(ctx, s, step.VM, node) {
			return requeueBlocked, nil
		}
		if vm.PowerState == inventory.Suspended {
			r.vmEvent(s, ws.VM, corev1.EventTypeWarning, "SuspendedStateDiscarded", "powering off suspended VM %s to change its vGPU profile: its suspended memory state is lost (spec.discardSuspendedState)", ws.VM)
		}
		return r.powerOff(ctx, s, ws, vm)
	case plan.Reconfigure:
		return r.startTask(ctx, s, ws, vm, vsphere.OpReconfigure, func() (string, error) { return s.vc.SetProfile(ctx, vm.Ref, step.Profile, step.VGPUs) })
	case plan.PowerOn:
		host, err := powerOnHost(s.w.Inventory, vm, step)
		if err != nil {
			return r.failed(s, ws, "PowerOn not started", err.Error()), nil
		}
		return r.startTask(ctx, s, ws, vm, vsphere.OpPowerOn, func() (string, error) { return s.vc.PowerOn(ctx, vm.Ref, host) })
	case plan.WaitNodeReady:
		return r.waitNodeReady(s, step, ws, node), nil
	case plan.Relabel, plan.Uncordon:
		// As patchNodesTogether, which runs them but when it has no budget left.
		if !s.budget.nodeWrite() {
			return 0, errCapped
		}
		if step.Action == plan.Relabel {
			return r.relabel(ctx, s, step.VM, node)
		}
		return r.uncordonStep(ctx, s, node)
	}
	return 0, fmt.Errorf("unknown action %q", step.Action)
}

// powerOff shuts the guest down and powers the VM off hard only when the guest cannot
// be asked (VMware Tools is not running, the VM is suspended) or has not shut down
// within spec.guestShutdownTimeout. Any other error asking the guest is retried with a
// backoff: a transient error is no reason to pull the plug.
func (r *GPUPoolProfileReconciler) powerOff(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, vm *inventory.VM) (time.Duration, error) {
	hard := func() (string, error) { return s.vc.PowerOff(ctx, vm.Ref) }
	if vm.PowerState != inventory.PoweredOn {
		return r.startTask(ctx, s, ws, vm, vsphere.OpPowerOff, hard)
	}
	timeout := guestShutdownTimeout(s.pool)
	if t := ws.GuestShutdownTime; t != nil {
		if waited := s.now.Sub(t.Time); waited < timeout {
			ws.Message = fmt.Sprintf("waiting for the guest to shut down (%s of %s)", waited.Round(time.Second), timeout)
			return min(requeueTask, timeout-waited), nil
		}
		r.vmEvent(s, ws.VM, corev1.EventTypeWarning, "GuestShutdownTimedOut", "the guest of VM %s did not shut down within %s; powering off", ws.VM, timeout)
		return r.startTask(ctx, s, ws, vm, vsphere.OpPowerOff, hard)
	}
	err := s.vc.ShutdownGuest(ctx, vm.Ref)
	switch {
	case errors.Is(err, vsphere.ErrToolsUnavailable) || errors.Is(err, vsphere.ErrInvalidPowerState):
		r.vmEvent(s, ws.VM, corev1.EventTypeNormal, "GuestShutdownUnavailable", "the guest of VM %s cannot be asked to shut down (%v); powering off", ws.VM, err)
		return r.startTask(ctx, s, ws, vm, vsphere.OpPowerOff, hard)
	case err != nil:
		return r.failed(s, ws, "asking the guest to shut down", err.Error()), nil
	}
	ws.GuestShutdownTime = ptrTime(s.now)
	ws.Message = "asked the guest to shut down"
	r.vmEvent(s, ws.VM, corev1.EventTypeNormal, "GuestShutdownRequested", "asked the guest of VM %s to shut down", ws.VM)
	return requeueTask, nil
}

func guestShutdownTimeout(p *gpupoolv1.GPUPoolProfile) time.Duration {
	if t := p.Spec.GuestShutdownTimeout; t != nil {
		return t.Duration
	}
	return 2 * time.Minute
}

// markParked labels and taints a node as parked and shields its Cluster API Machine
// before its VM goes down. It reports false when the VM must not be parked now: its
// Machine cannot be read, or the Machine its annotations name is not the node's, so it
// could not be protected (the VM is held and Stalled says why); a failed node patch is
// reported as a step error the same way.
func (r *GPUPoolProfileReconciler) markParked(ctx context.Context, s *scope, vm string, node *corev1.Node) bool {
	if node == nil {
		return true
	}
	err, ahead := s.parkedAhead[vm]
	switch {
	case ahead:
	case !nodes.HasMeta(node, nodes.ParkedMeta(s.pool.Name)) && !s.budget.nodeWrite():
		err = errCapped
	default:
		err = r.parkNode(ctx, s.pool.Name, node, s.budget)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, errCapped):
		// Parked in the next pass, which follows at once.
	case errors.Is(err, errMachineUnreadable):
		s.hold(vm, ReasonMachineUnreadable, fmt.Sprintf("VM %s is not parked: %v", vm, err))
	case errors.Is(err, errMachineNotTrusted):
		s.hold(vm, ReasonMachineNotTrusted, fmt.Sprintf("VM %s is not parked: %v", vm, err))
	default:
		s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
	}
	return false
}

// parkNode protects the node's Machine and marks the node parked by the pool; the node
// write was taken from b unless the node is marked already. It changes nothing in the
// scope, so that parkAhead may run it for many nodes at once.
func (r *GPUPoolProfileReconciler) parkNode(ctx context.Context, pool string, node *corev1.Node, b *passBudget) error {
	marked := nodes.HasMeta(node, nodes.ParkedMeta(pool))
	if err := r.protectMachine(ctx, node); err != nil {
		if !marked {
			b.nodeUnwritten()
		}
		if errors.Is(err, errMachineUnreadable) || errors.Is(err, errMachineNotTrusted) {
			return err
		}
		return fmt.Errorf("protecting the Machine of node %s: %w", node.Name, err)
	}
	if marked {
		return nil
	}
	err := r.patchNode(ctx, node, func(n *corev1.Node) { nodes.ApplyMeta(n, nodes.ParkedMeta(pool)) })
	b.nodeWritten(err)
	return err
}

// parkAhead runs parkNode for the nodes of the due steps that will park their VM
// (bounded, concurrently), so that a pass parking hundreds of VMs does not patch their
// nodes one after the other; markParked then reads the outcome.
func (r *GPUPoolProfileReconciler) parkAhead(ctx context.Context, s *scope, steps []plan.Step) {
	var vms []string
	for _, st := range steps {
		ws := s.worker(st.VM)
		if _, ok := s.w.VM(st.VM); !ok {
			continue
		}
		if (st.Action != plan.Suspend && st.Action != plan.PowerOff) || s.w.Nodes[st.VM] == nil || ws.Task != nil ||
			(ws.NextRetryTime != nil && s.now.Before(ws.NextRetryTime.Time)) {
			continue
		}
		vms = append(vms, st.VM)
	}
	if len(vms) < 2 {
		return
	}
	errs := make([]error, len(vms))
	for i, vm := range vms {
		if !nodes.HasMeta(s.w.Nodes[vm], nodes.ParkedMeta(s.pool.Name)) && !s.budget.nodeWrite() {
			errs[i] = errCapped
		}
	}
	forEach(len(vms), maxConcurrentDrains, func(i int) {
		if errs[i] == nil {
			errs[i] = r.parkNode(ctx, s.pool.Name, s.w.Nodes[vms[i]], s.budget)
		}
	})
	s.parkedAhead = make(map[string]error, len(vms))
	for i, vm := range vms {
		s.parkedAhead[vm] = errs[i]
	}
}

func (r *GPUPoolProfileReconciler) waitNodeReady(s *scope, step plan.Step, ws *gpupoolv1.WorkerStatus, node *corev1.Node) time.Duration {
	timeout := nodeReadyTimeout(s.pool)
	name := "(no node yet)"
	if node != nil {
		name = node.Name
	}
	waited := s.now.Sub(ws.StepStartTime.Time)
	what := "to become Ready"
	if node != nil {
		what = "to be ready for work: " + nodes.WaitingFor(s.w.Gaps[step.VM])
		if gaps := s.w.Gaps[step.VM]; len(gaps) > 0 {
			s.facts.nodeWaits = append(s.facts.nodeWaits, fmt.Sprintf("node %s waits for %s", name, strings.Join(gaps, ", ")))
		}
	}
	ws.Message = fmt.Sprintf("waiting for node %s %s (%s of %s)", name, what, waited.Round(time.Second), timeout)
	return max(min(requeueNodeReady, timeout-waited), requeueStep)
}

func (r *GPUPoolProfileReconciler) uncordonStep(ctx context.Context, s *scope, node *corev1.Node) (time.Duration, error) {
	if node == nil {
		s.budget.nodeUnwritten()
		return requeueNodeReady, nil
	}
	err := r.patchNode(ctx, node, nodes.Uncordon)
	s.budget.nodeWritten(err)
	if err != nil {
		return 0, err
	}
	r.nodeEvent(s, node, corev1.EventTypeNormal, "Uncordoned", "uncordoned node %s", node.Name)
	return requeueStep, nil
}

func (r *GPUPoolProfileReconciler) relabel(ctx context.Context, s *scope, vm string, node *corev1.Node) (time.Duration, error) {
	m, ok := s.w.MetaFor(s.pool.Name, s.layout, vm)
	if node == nil || !ok {
		s.budget.nodeUnwritten()
		return requeueNodeReady, nil
	}
	err := r.patchNode(ctx, node, func(n *corev1.Node) { nodes.ApplyMeta(n, m) })
	s.budget.nodeWritten(err)
	if err != nil {
		return 0, err
	}
	if err := r.releaseMachine(ctx, node); err != nil {
		return 0, err
	}
	r.nodeEvent(s, node, corev1.EventTypeNormal, "Relabelled", "node %s labelled for layout %s", node.Name, s.layout.Name)
	return requeueStep, nil
}

// patchNode applies change to a node with a merge patch that carries the node's
// resourceVersion, so that a taint or label another controller set meanwhile is never
// overwritten: on a conflict the node is read again and the change applied again.
func (r *GPUPoolProfileReconciler) patchNode(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	const attempts = 5
	for i := 0; ; i++ {
		before := n.DeepCopy()
		change(n)
		err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || i == attempts-1 {
			return fmt.Errorf("patching node %s: %w", n.Name, err)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			return fmt.Errorf("reading node %s again after a conflict: %w", n.Name, err)
		}
	}
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
func sayMoved(s *scope, ws *gpupoolv1.WorkerStatus, step plan.Step) {
	vm, ok := s.w.VM(step.VM)
	refused := strings.HasPrefix(ws.Message, "PowerOn failed") || strings.HasPrefix(ws.Message, "PowerOn could not start")
	if step.Action != plan.PowerOn || !ok || step.Host == "" || step.Host == vm.Host || !refused {
		return
	}
	why := "is unavailable"
	if h, ok := s.w.Inventory.FindHost(vm.Host); ok && h.Unavailable() != "" {
		why = h.Unavailable()
	}
	ws.Message = fmt.Sprintf("the power-on was moved to host %s (VM %s's host %s %s) and vCenter refused it there: %s",
		step.Host, vm.Name, vm.Host, why, ws.Message)
}
