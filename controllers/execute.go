package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// execute does one due step of one worker without blocking and says when to look again.
// Progress that cannot be re-observed (task references, step start times, what a node
// looked like before) goes into the worker's status.
func (r *GPUPoolProfileReconciler) execute(ctx context.Context, s *scope, step plan.Step) (time.Duration, error) {
	ws := s.worker(step.VM)
	if ws.NextRetryTime != nil && s.now.Before(ws.NextRetryTime.Time) {
		return ws.NextRetryTime.Sub(s.now), nil
	}
	if ws.StepStartTime == nil {
		ws.StepStartTime = ptrTime(s.now)
	}
	id := step.VM
	if specID, ok := s.specID[step.VM]; ok {
		id = specID // an inventory path, when the spec gives one, names the VM exactly
	}
	vm, ok := s.inv.FindVM(id)
	if !ok {
		return requeueBlocked, nil
	}

	// Nothing new starts for a worker until its last vSphere task has finished
	// (checkTasks looked at it at the start of this pass).
	if ws.Task != nil && ws.Task.ID != "" {
		return requeueTask, nil
	}

	node := s.nodes[step.VM]
	switch step.Action {
	case plan.Drain:
		return r.drain(ctx, s, ws, node)
	case plan.Suspend:
		snapshot(ws, node)
		if err := r.markParked(ctx, s, node); err != nil {
			return 0, err
		}
		return r.startTask(ctx, s, ws, "Suspend", func() (string, error) { return s.vc.Suspend(ctx, vm.Ref) })
	case plan.PowerOff:
		snapshot(ws, node)
		if err := r.markParked(ctx, s, node); err != nil {
			return 0, err
		}
		return r.powerOff(ctx, s, ws, vm.Ref, vm.PowerState == "poweredOn")
	case plan.Reconfigure:
		return r.startTask(ctx, s, ws, "Reconfigure", func() (string, error) { return s.vc.SetProfile(ctx, vm.Ref, step.Profile) })
	case plan.PowerOn:
		return r.startTask(ctx, s, ws, "PowerOn", func() (string, error) { return s.vc.PowerOn(ctx, vm.Ref) })
	case plan.WaitNodeReady:
		return r.waitNodeReady(s, ws, node), nil
	case plan.Relabel:
		return r.relabel(ctx, s, ws, step.VM, node)
	case plan.Uncordon:
		if node == nil {
			return requeueNodeReady, nil
		}
		if err := r.patchNode(ctx, node, uncordon); err != nil {
			return 0, err
		}
		r.event(s, corev1.EventTypeNormal, "Uncordoned", "uncordoned node %s", node.Name)
		return requeueStep, nil
	}
	return 0, fmt.Errorf("unknown action %q", step.Action)
}

// checkTasks looks at every worker's vSphere task in flight, before anything is planned,
// so that a finished task is recorded even when its VM no longer needs a step.
func (r *GPUPoolProfileReconciler) checkTasks(ctx context.Context, s *scope) time.Duration {
	var after time.Duration
	for i := range s.pool.Status.Workers {
		ws := &s.pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID == "" {
			continue
		}
		if wait := r.checkTask(ctx, s, ws); wait > 0 && (after == 0 || wait < after) {
			after = wait
		}
	}
	return after
}

// checkTask looks at the worker's task in flight without waiting. A finished task is
// cleared; a failure is recorded with a backoff before the step is retried. It returns
// when to look again, or 0 when the task is over.
func (r *GPUPoolProfileReconciler) checkTask(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus) time.Duration {
	t := ws.Task
	info, err := s.vc.Task(ctx, t.ID)
	if errors.Is(err, vsphere.ErrTaskNotFound) {
		// vCenter forgot the task (a restart, a long outage): the VM's state, observed on
		// every pass, tells whether the step is done; the plan retries it if not.
		ws.Message = fmt.Sprintf("%s task %s is no longer known to vCenter; re-observing the VM", t.Operation, t.ID)
		ws.Task = nil
		return 0
	}
	if err != nil {
		ws.Message = fmt.Sprintf("cannot check %s task %s: %v", t.Operation, t.ID, err)
		return requeueTask // look again; never re-issue while the task may still run
	}
	switch info.State {
	case vsphere.TaskSuccess:
		r.event(s, corev1.EventTypeNormal, t.Operation+"Succeeded", "%s of VM %s finished (task %s)", t.Operation, ws.VM, t.ID)
		ws.Task = nil
		return 0
	case vsphere.TaskError:
		vsphereTaskErrors.WithLabelValues(s.pool.Name, t.Operation).Inc()
		ws.Attempts++
		wait := backoff(ws.Attempts)
		ws.NextRetryTime = ptrTime(s.now.Add(wait))
		ws.Message = fmt.Sprintf("%s failed (attempt %d, retry in %s): %s", t.Operation, ws.Attempts, wait, info.Error)
		ws.Task = nil
		condTrue(s.pool, gpupoolv1.ConditionDegraded, ReasonTaskFailed, fmt.Sprintf("VM %s: %s", ws.VM, ws.Message))
		r.event(s, corev1.EventTypeWarning, t.Operation+"Failed", "%s of VM %s failed: %s", t.Operation, ws.VM, info.Error)
		return 0
	default:
		ws.Message = fmt.Sprintf("%s in progress (task %s)", t.Operation, t.ID)
		return requeueTask
	}
}

// startTask starts a vSphere operation and records its task. An empty task id means the
// VM was already in the target state.
func (r *GPUPoolProfileReconciler) startTask(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, op string, start func() (string, error)) (time.Duration, error) {
	id, err := start()
	if err != nil {
		vsphereTaskErrors.WithLabelValues(s.pool.Name, op).Inc()
		ws.Attempts++
		wait := backoff(ws.Attempts)
		ws.NextRetryTime = ptrTime(s.now.Add(wait))
		ws.Message = fmt.Sprintf("%s could not start (attempt %d, retry in %s): %v", op, ws.Attempts, wait, err)
		condTrue(s.pool, gpupoolv1.ConditionDegraded, ReasonTaskFailed, fmt.Sprintf("VM %s: %s", ws.VM, ws.Message))
		r.event(s, corev1.EventTypeWarning, op+"Failed", "%s of VM %s could not start: %v", op, ws.VM, err)
		return wait, nil
	}
	if id == "" {
		return requeueStep, nil
	}
	ws.Task = &gpupoolv1.TaskReference{ID: id, Operation: op, StartTime: metav1.NewTime(s.now)}
	ws.Message = fmt.Sprintf("%s started (task %s)", op, id)
	log.FromContext(ctx).Info("Started vSphere task", "vm", ws.VM, "operation", op, "task", id)
	r.event(s, corev1.EventTypeNormal, op+"Started", "%s of VM %s started (task %s)", op, ws.VM, id)
	return requeueTask, nil
}

// powerOff shuts the guest down first and powers off hard after guestShutdownWait, or
// at once when the guest cannot be asked (VMware Tools not running, VM suspended).
func (r *GPUPoolProfileReconciler) powerOff(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, ref string, running bool) (time.Duration, error) {
	hard := func() (string, error) { return s.vc.PowerOff(ctx, ref) }
	if !running {
		return r.startTask(ctx, s, ws, "PowerOff", hard)
	}
	if !strings.HasPrefix(ws.Message, "guest shutdown requested") {
		if err := s.vc.ShutdownGuest(ctx, ref); err != nil {
			r.event(s, corev1.EventTypeNormal, "GuestShutdownUnavailable", "guest shutdown of VM %s not possible (%v); powering off", ws.VM, err)
			return r.startTask(ctx, s, ws, "PowerOff", hard)
		}
		ws.StepStartTime = ptrTime(s.now)
		ws.Message = "guest shutdown requested at " + s.now.UTC().Format(time.RFC3339)
		r.event(s, corev1.EventTypeNormal, "GuestShutdownRequested", "asked the guest of VM %s to shut down", ws.VM)
		return requeueTask, nil
	}
	if s.now.Sub(ws.StepStartTime.Time) < guestShutdownWait {
		return requeueTask, nil
	}
	return r.startTask(ctx, s, ws, "PowerOff", hard)
}

// drain cordons the node and evicts its pods, without waiting for them to go.
func (r *GPUPoolProfileReconciler) drain(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, node *corev1.Node) (time.Duration, error) {
	if node == nil {
		return requeueStep, nil
	}
	snapshot(ws, node)
	if !node.Spec.Unschedulable || node.Labels[LabelPool] != s.pool.Name {
		if err := r.patchNode(ctx, node, func(n *corev1.Node) {
			cordon(n)
			// The pool label lets deletion find every node gpupool touched.
			setManagedLabel(n, LabelPool, s.pool.Name)
		}); err != nil {
			return 0, err
		}
		r.event(s, corev1.EventTypeNormal, "Cordoned", "cordoned node %s to drain it", node.Name)
	}
	d := s.pool.Spec.Drain
	res, err := r.drainPods(ctx, node.Name, d)
	if err != nil {
		return 0, err
	}
	ws.Message = "draining node " + node.Name + ": " + res.message()
	if res.Done {
		r.event(s, corev1.EventTypeNormal, "Drained", "node %s drained", node.Name)
		return requeueStep, nil
	}
	timeout := 10 * time.Minute
	if d.Timeout != nil {
		timeout = d.Timeout.Duration
	}
	elapsed := s.now.Sub(ws.StepStartTime.Time)
	if elapsed < timeout {
		if len(res.Blocked) > 0 {
			condTrue(s.pool, gpupoolv1.ConditionProgressing, ReasonDrainBlocked, fmt.Sprintf("node %s: %s (timeout in %s)", node.Name, res.message(), (timeout-elapsed).Round(time.Second)))
		}
		return min(requeueDrain, timeout-elapsed), nil
	}
	if d.OnTimeout == gpupoolv1.DrainForce {
		n, err := r.forceDelete(ctx, node.Name, d)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			r.event(s, corev1.EventTypeWarning, "DrainForced", "drain of node %s timed out after %s; deleted %d pod(s) (%s)", node.Name, timeout, n, res.message())
		}
		return requeueDrain, nil
	}
	return 0, r.abort(ctx, s, fmt.Sprintf("drain of node %s timed out after %s: %s", node.Name, timeout, res.message()))
}

// abort stops the transition after a drain timeout: the nodes gpupool cordoned for it
// are uncordoned, the VMs keep running, and Degraded says why.
func (r *GPUPoolProfileReconciler) abort(ctx context.Context, s *scope, why string) error {
	for vm, n := range s.nodes {
		v, ok := s.inv.FindVM(vm)
		if !ok || v.PowerState != "poweredOn" || !cordonedByUs(n) {
			continue
		}
		if err := r.patchNode(ctx, n, uncordon); err != nil {
			return err
		}
	}
	t := s.pool.Status.Transition
	t.AbortedTime = ptrTime(s.now)
	t.Generation = s.pool.Generation // retried when the spec changes from now on
	t.Message = fmt.Sprintf("transition %s to %s aborted: %s; the VMs keep running and the nodes gpupool cordoned were uncordoned. Fix the blocking pods or set spec.drain.onTimeout: Force; a spec change retries", t.ID, t.To, why)
	transitionsTotal.WithLabelValues(s.pool.Name, "aborted").Inc()
	condTrue(s.pool, gpupoolv1.ConditionDegraded, ReasonDrainAborted, t.Message)
	condFalse(s.pool, gpupoolv1.ConditionProgressing, ReasonDrainAborted, t.Message)
	s.pool.Status.Phase = gpupoolv1.PhaseBlocked
	r.emit(s.pool, corev1.EventTypeWarning, "TransitionAborted", "%s", t.Message)
	for i := range s.pool.Status.Workers {
		w := &s.pool.Status.Workers[i]
		if w.Step == gpupoolv1.StepDrainRequired {
			w.Step, w.StepStartTime = gpupoolv1.StepNone, nil
		}
	}
	return nil
}

// markParked labels and taints a node as parked and shields its Cluster API Machine
// before its VM goes down.
func (r *GPUPoolProfileReconciler) markParked(ctx context.Context, s *scope, node *corev1.Node) error {
	if node == nil {
		return nil
	}
	if err := r.protectMachine(ctx, node); err != nil {
		return err
	}
	if hasMeta(node, parkedMeta(s.pool.Name)) {
		return nil
	}
	return r.patchNode(ctx, node, func(n *corev1.Node) { applyMeta(n, parkedMeta(s.pool.Name)) })
}

func (r *GPUPoolProfileReconciler) waitNodeReady(s *scope, ws *gpupoolv1.WorkerStatus, node *corev1.Node) time.Duration {
	timeout := 10 * time.Minute
	if t := s.pool.Spec.NodeReadyTimeout; t != nil {
		timeout = t.Duration
	}
	name := "(no node yet)"
	if node != nil {
		name = node.Name
	}
	waited := s.now.Sub(ws.StepStartTime.Time)
	ws.Message = fmt.Sprintf("waiting for node %s to become Ready (%s of %s)", name, waited.Round(time.Second), timeout)
	if waited >= timeout {
		msg := fmt.Sprintf("VM %s is powered on but node %s is not Ready after %s", ws.VM, name, timeout)
		if c := findCondition(s.pool, gpupoolv1.ConditionDegraded); c == nil || c.Message != msg {
			r.emit(s.pool, corev1.EventTypeWarning, ReasonNodeNotReady, "%s", msg)
		}
		condTrue(s.pool, gpupoolv1.ConditionDegraded, ReasonNodeNotReady, msg)
		return requeueBlocked
	}
	return min(requeueNodeReady, timeout-waited)
}

func (r *GPUPoolProfileReconciler) relabel(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, vm string, node *corev1.Node) (time.Duration, error) {
	m, ok := s.wantedMeta(vm)
	if node == nil || !ok {
		return requeueNodeReady, nil
	}
	snapshot(ws, node)
	if err := r.patchNode(ctx, node, func(n *corev1.Node) { applyMeta(n, m) }); err != nil {
		return 0, err
	}
	if err := r.releaseMachine(ctx, node); err != nil {
		return 0, err
	}
	r.event(s, corev1.EventTypeNormal, "Relabelled", "node %s labelled for layout %s", node.Name, s.decision.Layout)
	return requeueStep, nil
}

// patchNode applies change to a node with a merge patch.
func (r *GPUPoolProfileReconciler) patchNode(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	before := n.DeepCopy()
	change(n)
	if err := r.Client.Patch(ctx, n, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patching node %s: %w", n.Name, err)
	}
	return nil
}

func (r *GPUPoolProfileReconciler) event(s *scope, typ, reason, format string, args ...any) {
	id := ""
	if t := s.pool.Status.Transition; t != nil {
		id = "[" + t.ID + "] "
	}
	r.emit(s.pool, typ, reason, id+format, args...)
}

// maxEventNote is the longest note the events.k8s.io API accepts.
const maxEventNote = 1024

// emit records an event on the pool; the reason doubles as the event's action. Notes are
// cut to what the events API accepts, or the API server would drop the event.
func (r *GPUPoolProfileReconciler) emit(pool *gpupoolv1.GPUPoolProfile, typ, reason, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	if len(note) > maxEventNote {
		note = note[:maxEventNote-len(" [...]")] + " [...]"
	}
	r.Recorder.Eventf(pool, nil, typ, reason, reason, "%s", note)
}

// snapshot records what a node looked like before gpupool first touched it: that cannot
// be re-observed once gpupool has cordoned it.
func snapshot(ws *gpupoolv1.WorkerStatus, node *corev1.Node) {
	if node != nil && ws.NodeBefore == nil {
		ws.NodeBefore = &gpupoolv1.NodeSnapshot{Unschedulable: node.Spec.Unschedulable}
	}
}

// backoff is how long to wait before the n-th retry of a failed step.
func backoff(n int32) time.Duration {
	d := baseBackoff
	for i := int32(1); i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
