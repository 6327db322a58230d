package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// A vSphere operation happens once per step whatever fails in between, because a task
// is started in three moves:
//
//  1. the intent (operation, no task id, the VM's recent tasks) is written to status
//     (one write for all the tasks a pass starts), and only if that write succeeds
//  2. vCenter is asked to start the task, and
//  3. the task id is recorded (by the status patch at the end of the pass).
//
// A pass that finds an intent without a task id (the process died, or the last status
// patch failed, between 1 and 3) asks vCenter for a recent task of that operation on the
// VM that was not there at 1, and adopts it. Only when there is none is the step planned
// again from the VM's observed state.

// checkTasks looks at every worker's vSphere task in flight, before the pass reads the
// inventory (observe), so that a finished task is recorded even when its VM no longer
// needs a step, and so that the read shows the effect of every task recorded as ended:
// a task that ends after this check is still in flight for the pass. All tasks are
// read in one call. It counts the tasks that ended in s.tasks.ended and returns when to
// look again (0: nothing is in flight).
func (r *GPUPoolProfileReconciler) checkTasks(ctx context.Context, s *scope) time.Duration {
	after := r.resolveIntents(ctx, s)
	var ids []string
	for _, ws := range s.pool.Status.Workers {
		if ws.Task != nil && ws.Task.ID != "" {
			ids = append(ids, ws.Task.ID)
		}
	}
	if len(ids) == 0 {
		return after
	}
	infos, err := s.vc.Tasks(ctx, ids)
	for i := range s.pool.Status.Workers {
		ws := &s.pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID == "" {
			continue
		}
		if err != nil {
			ws.Message = fmt.Sprintf("cannot check %s task %s: %v", ws.Task.Operation, ws.Task.ID, err)
			after = soonest(after, requeueTask) // look again; never re-issue while the task may still run
			continue
		}
		info, found := infos[ws.Task.ID]
		if wait := r.recordTask(s, ws, info, found); wait > 0 {
			after = soonest(after, wait)
		} else {
			s.tasks.ended++
		}
	}
	return after
}

// resolveIntents looks for the task of every intent recorded without a task id
// (resolveIntent); an intent it cannot settle counts as in flight (requeueTask). Such
// intents are rare (the process died, or a status write failed, between recording an
// intent and its task id), and finding a VM's recent tasks needs the VM's reference, so
// only then is the inventory read here; observe reads it again after the tasks are
// checked.
func (r *GPUPoolProfileReconciler) resolveIntents(ctx context.Context, s *scope) time.Duration {
	var after time.Duration
	var inv *inventory.Inventory
	var readErr error
	for i := range s.pool.Status.Workers {
		ws := &s.pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID != "" {
			continue
		}
		if inv == nil && readErr == nil {
			inv, readErr = s.vc.Inventory(ctx, intentVMs(s.pool)...)
		}
		if readErr != nil { // read once: a slow vCenter is not asked again per intent
			ws.Message = fmt.Sprintf("cannot tell whether %s was started: %v", ws.Task.Operation, readErr)
			after = soonest(after, requeueTask)
			continue
		}
		if !r.resolveIntent(ctx, s, inv, ws) && ws.Task != nil {
			after = soonest(after, requeueTask)
		}
	}
	return after
}

// intentVMs names the VMs of the workers with an intent recorded without a task id.
func intentVMs(pool *gpupoolv1.GPUPoolProfile) []string {
	var out []string
	for _, w := range pool.Status.Workers {
		if w.Task != nil && w.Task.ID == "" {
			out = append(out, w.VM)
		}
	}
	return out
}

// resolveIntent finds the task of a recorded intent in vCenter, the VM looked up in inv.
// It reports true when the task was found (ws.Task.ID is set); otherwise the intent was
// cleared (no task was started) or kept (vCenter could not be asked).
func (r *GPUPoolProfileReconciler) resolveIntent(ctx context.Context, s *scope, inv *inventory.Inventory, ws *gpupoolv1.WorkerStatus) bool {
	t := ws.Task
	vm, ok := inv.FindVM(ws.VM)
	if !ok {
		ws.Message = fmt.Sprintf("%s was about to start, but VM %s is no longer in vCenter", t.Operation, ws.VM)
		ws.Task = nil
		return false
	}
	id, err := s.vc.FindTask(ctx, vm.Ref, vsphere.Op(t.Operation), t.KnownTasks)
	if err != nil {
		ws.Message = fmt.Sprintf("cannot tell whether %s was started: %v", t.Operation, err)
		return false
	}
	if id == "" {
		intentsResolved.WithLabelValues(s.pool.Name, "not-started").Inc()
		log.FromContext(ctx).Info("Intent found without a task; the step is planned again", "vm", ws.VM, "operation", t.Operation)
		ws.Task = nil
		return false
	}
	intentsResolved.WithLabelValues(s.pool.Name, "adopted").Inc()
	log.FromContext(ctx).Info("Adopted a task started before a crash or a lost status write", "vm", ws.VM, "operation", t.Operation, "task", id)
	t.ID = id
	return true
}

// recordTask records what a check of the worker's task found. A finished task is
// cleared; a failure is recorded with a backoff before the step is retried. It returns
// when to look again, or 0 when the task is over.
func (r *GPUPoolProfileReconciler) recordTask(s *scope, ws *gpupoolv1.WorkerStatus, info vsphere.TaskInfo, found bool) time.Duration {
	t := ws.Task
	if !found {
		// vCenter forgot the task (a restart, a long outage): the VM's state, observed on
		// every pass, tells whether the step is done; the plan retries it if not.
		ws.Message = fmt.Sprintf("%s task %s is no longer known to vCenter; re-observing the VM", t.Operation, t.ID)
		ws.Task = nil
		return 0
	}
	switch info.State {
	case vsphere.TaskSuccess:
		s.laterVMEvent(ws.VM, corev1.EventTypeNormal, t.Operation+"Succeeded", "%s of VM %s finished (task %s)", t.Operation, ws.VM, t.ID)
		ws.Task = nil
		ws.Attempts, ws.NextRetryTime = 0, nil
		return 0
	case vsphere.TaskError:
		vsphereTaskErrors.WithLabelValues(s.pool.Name, t.Operation).Inc()
		r.failed(s, ws, fmt.Sprintf("%s failed", t.Operation), info.Error)
		s.laterVMEvent(ws.VM, corev1.EventTypeWarning, t.Operation+"Failed", "%s of VM %s failed: %s", t.Operation, ws.VM, info.Error)
		ws.Task = nil
		return 0
	default:
		ws.Message = fmt.Sprintf("%s in progress (task %s)", t.Operation, t.ID)
		return requeueTask
	}
}

// failed records a failed attempt of the worker's step and when it may be retried.
func (r *GPUPoolProfileReconciler) failed(s *scope, ws *gpupoolv1.WorkerStatus, what, why string) time.Duration {
	ws.Attempts++
	wait := backoff(ws.Attempts)
	ws.NextRetryTime = ptrTime(s.now.Add(wait))
	ws.Message = fmt.Sprintf("%s (attempt %d, retry in %s): %s", what, ws.Attempts, wait, why)
	return wait
}

// startTask records the intent to start a vSphere operation on a VM and queues the
// start; act starts the queued tasks of the pass together (startQueued), once all their
// intents are stored in one status write: see the comment at the top of this file.
func (r *GPUPoolProfileReconciler) startTask(_ context.Context, s *scope, ws *gpupoolv1.WorkerStatus, vm *inventory.VM, op vsphere.Op, start func() (string, error)) (time.Duration, error) {
	if ws.Task != nil {
		return requeueTask, nil
	}
	ws.Task = &gpupoolv1.TaskReference{Operation: string(op), StartTime: metav1.NewTime(s.now), KnownTasks: vm.RecentTasks}
	s.queued = append(s.queued, queuedStart{worker: ws.VM, host: vm.Host, op: op, start: start})
	return requeueTask, nil
}

// queuedStart is a vSphere task whose intent the pass recorded and that startQueued
// starts.
type queuedStart struct {
	step plan.Step // the step that started it (act sets it)
	// worker is the worker's status key: a later step of the pass may add a worker
	// status, which would leave a pointer into the list stale.
	worker string
	host   string
	op     vsphere.Op
	start  func() (string, error)
	id     string
	err    error
}

// maxConcurrentStarts bounds the task starts (groups of startGroups) run at once.
const maxConcurrentStarts = 16

// startQueued stores the intents of the tasks the pass queued in one status write and,
// only if that succeeds, asks vCenter to start them, concurrently but for the
// power-ons of one host (startGroups). A pass that
// starts a task for every VM of a large pool thus costs one status write, not one per
// VM. It reports, per queued start, its step and when to look again or the error.
func (r *GPUPoolProfileReconciler) startQueued(ctx context.Context, s *scope, note func(step plan.Step, after time.Duration, err error)) {
	queued := s.queued
	s.queued = nil
	if len(queued) == 0 {
		return
	}
	if err := r.persist(ctx, s); err != nil {
		for _, q := range queued {
			if ws := findWorker(s.pool, q.worker); ws != nil {
				ws.Task = nil
			}
			note(q.step, 0, fmt.Errorf("recording the intent to %s: %w", q.op, err))
		}
		return
	}
	groups := startGroups(queued)
	forEach(len(groups), maxConcurrentStarts, func(g int) {
		for _, i := range groups[g] {
			queued[i].id, queued[i].err = queued[i].start()
		}
	})
	for _, q := range queued {
		note(q.step, r.started(ctx, s, q), nil)
	}
}

// startGroups groups the queued starts that must go one after the other: the power-ons
// of one host, in the plan's order, which placement may need (vSphere places a vGPU at
// power-on). A park or a reconfigure takes no GPU, so each is a group of its own: a pass
// that parks the twenty VMs of a host does not wait for twenty calls in a row. A
// power-on never needs a park of the same pass: the plan frees GPUs only when it sees
// the parked VM off.
func startGroups(queued []queuedStart) [][]int {
	var groups [][]int
	hostGroup := map[string]int{}
	for i, q := range queued {
		if q.op != vsphere.OpPowerOn {
			groups = append(groups, []int{i})
			continue
		}
		// The host the VM is powered on on: the plan's when it moves the power-on off
		// the VM's own (powerOnHost).
		host := cmp.Or(q.step.Host, q.host)
		g, ok := hostGroup[host]
		if !ok {
			g = len(groups)
			hostGroup[host] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// started records what vCenter answered to one start. An empty task id means the VM was
// already in the target state.
func (r *GPUPoolProfileReconciler) started(ctx context.Context, s *scope, q queuedStart) time.Duration {
	ws, op := findWorker(s.pool, q.worker), string(q.op)
	if ws == nil || ws.Task == nil {
		return requeueStep // cannot happen: nothing removes a worker or its intent within a pass
	}
	if q.err != nil {
		// Note: the intent stays. The call may have failed after vCenter queued the task
		// (a deadline, a reset connection); the next pass asks vCenter (resolveIntent)
		// before the step is planned again.
		vsphereTaskErrors.WithLabelValues(s.pool.Name, op).Inc()
		wait := r.failed(s, ws, op+" could not start", q.err.Error())
		r.vmEvent(s, ws.VM, corev1.EventTypeWarning, op+"Failed", "%s of VM %s could not start: %v", op, ws.VM, q.err)
		return wait
	}
	if q.id == "" {
		ws.Task = nil
		return requeueStep
	}
	ws.Task.ID = q.id
	ws.Message = fmt.Sprintf("%s started (task %s)", op, q.id)
	log.FromContext(ctx).Info("Started vSphere task", "vm", ws.VM, "operation", op, "task", q.id)
	r.vmEvent(s, ws.VM, corev1.EventTypeNormal, op+"Started", "%s of VM %s started (task %s)", op, ws.VM, q.id)
	return requeueTask
}

// persist writes the status now, with optimistic locking: an intent is only acted on
// once it is stored, and never over a pool somebody else changed meanwhile.
//
// Note: the patch is applied to a copy, because the client decodes the answer into the
// object it is given, and the pass holds pointers into s.pool's worker list.
func (r *GPUPoolProfileReconciler) persist(ctx context.Context, s *scope) error {
	obj := s.pool.DeepCopy()
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(s.persisted, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	s.persisted = obj
	s.pool.ResourceVersion = obj.ResourceVersion
	return nil
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

// taskActions maps the operations recorded in TaskReference.Operation to the plan's
// actions.
var taskActions = map[vsphere.Op]plan.Action{
	vsphere.OpSuspend: plan.Suspend, vsphere.OpPowerOff: plan.PowerOff, vsphere.OpReconfigure: plan.Reconfigure, vsphere.OpPowerOn: plan.PowerOn,
}

// plannedInFlight is the action of every worker's vSphere task in flight (an intent
// without a task id too: the task may have started), by VM, for plan.Input.InFlight.
func plannedInFlight(pool *gpupoolv1.GPUPoolProfile) map[string]plan.Action {
	var out map[string]plan.Action
	for _, w := range pool.Status.Workers {
		if w.Task == nil {
			continue
		}
		if a, ok := taskActions[vsphere.Op(w.Task.Operation)]; ok {
			if out == nil {
				out = map[string]plan.Action{}
			}
			out[w.VM] = a
		}
	}
	return out
}
