package execute

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/vsphere"
)

// Follower follows the vSphere tasks the executor started: it records in the workers'
// status the tasks that ended (Ended counts them) and resolves the intents stored
// without a task id. Events are about the workers' VMs (by spec id).
type Follower struct {
	Pool    *gpupoolv1.GPUPoolProfile
	Now     time.Time
	VSphere vsphere.Client
	Events  Events
	Ended   int
	// Starts holds the answers to the starts asked past the passes (nil: none are).
	Starts *Starts
	// Peek leaves those answers for the next pass: the pool is a copy that is not
	// written (a preview).
	Peek bool
	// StepErrors are the starts that failed before vCenter was asked (the node write
	// before a suspend: Starts.mark), for the pass's Degraded condition.
	StepErrors []string
}

// A vSphere operation happens once per step whatever fails in between, because a task
// is started in three moves (Run, then Check on the next pass):
//
//  1. the intent (operation, no task id, the VM's recent tasks) is written to status
//     (one write for all the tasks a pass starts), and only if that write succeeds
//  2. vCenter is asked to start the task, and
//  3. the task id is recorded (by the status patch at the end of the pass; with Starts,
//     by the next pass, which takes vCenter's answer first: takeStarts).
//
// A pass that finds an intent without a task id (the process died, or the last status
// patch failed, between 1 and 3) asks vCenter for a recent task of that operation on the
// VM that was not there at 1, and adopts it. Only when there is none is the step planned
// again from the VM's observed state. An intent whose start is still being asked past
// the pass is a task in flight: vCenter is not asked about it.

// Check looks at every worker's vSphere task in flight, before the pass reads the
// inventory (observe), so that a finished task is recorded even when its VM no longer
// needs a step, and so that the read shows the effect of every task recorded as ended:
// a task that ends after this check is still in flight for the pass. All tasks are
// read in one call. It counts the tasks that ended in f.Ended and returns when to
// look again (0: nothing is in flight).
func (f *Follower) Check(ctx context.Context) time.Duration {
	after, starting := f.takeStarts(ctx)
	after = Soonest(after, f.resolveIntents(ctx, starting))
	var ids []string
	for _, ws := range f.Pool.Status.Workers {
		if ws.Task != nil && ws.Task.ID != "" {
			ids = append(ids, ws.Task.ID)
		}
	}
	if len(ids) == 0 {
		return after
	}
	infos, err := f.VSphere.Tasks(ctx, ids)
	for i := range f.Pool.Status.Workers {
		ws := &f.Pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID == "" {
			continue
		}
		if err != nil {
			ws.Message = fmt.Sprintf("cannot check %s task %s: %v", ws.Task.Operation, ws.Task.ID, err)
			after = Soonest(after, RequeueTask) // look again; never re-issue while the task may still run
			continue
		}
		info, found := infos[ws.Task.ID]
		if wait := f.recordTask(ws, info, found); wait > 0 {
			after = Soonest(after, wait)
		} else {
			f.Ended++
		}
	}
	return after
}

// takeStarts records the answers to the starts asked past the last passes (Starts) on
// their workers' intents, as a pass that starts its tasks itself does (recordStart), and
// returns the workers whose start is still being asked: their tasks are in flight, and
// resolveIntents leaves them alone. A start answered "not asked" (cancelled, or queued
// too long) leaves nothing in vCenter: its intent is cleared and its step planned again.
// With Peek every intent without an answer counts as in flight: a preview cannot tell
// a start the manager is asking from one that never was.
func (f *Follower) takeStarts(ctx context.Context) (time.Duration, map[string]bool) {
	if f.Starts == nil && !f.Peek {
		return 0, nil
	}
	var after time.Duration
	starting := map[string]bool{}
	for i := range f.Pool.Status.Workers {
		ws := &f.Pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID != "" {
			continue
		}
		a, ended, inFlight := f.Starts.take(f.Pool.Name, ws.VM, vsphere.Op(ws.Task.Operation), ws.Task.StartTime.Time, f.Peek)
		switch {
		case ended && a.markErr != nil:
			ws.Message = fmt.Sprintf("%s was not asked of vCenter: marking its node parked failed (%v); planned again from what is observed", ws.Task.Operation, a.markErr)
			f.StepErrors = append(f.StepErrors, fmt.Sprintf("%s of VM %s not asked: %v", ws.Task.Operation, ws.VM, a.markErr))
			ws.Task = nil
			after = Soonest(after, RequeueBlocked) // as a park whose node write fails in a pass
		case ended && a.notAsked && a.afterDrains:
			ws.Message = fmt.Sprintf("%s was not asked of vCenter: the drains it waited for did not end within %s of the last pass that planned the switch, pods blocked one, its node's pods could not be watched, the VM was held, or the pool was paused, edited, switched, aborted or deleted; planned again from what is observed", ws.Task.Operation, StartTimeout)
			ws.Task = nil
			after = Soonest(after, RequeueStep)
		case ended && a.notAsked:
			ws.Message = fmt.Sprintf("%s was not asked of vCenter (the pool was paused or deleted, its transition aborted, or the start waited too long): planned again from what is observed", ws.Task.Operation)
			ws.Task = nil
			after = Soonest(after, RequeueStep)
		case ended:
			if wait := recordStart(ctx, f.Pool.Name, f.Now, f.Events, ws, a.id, a.err); ws.Task != nil {
				after = Soonest(after, wait)
			}
		case inFlight || f.Peek:
			starting[ws.VM] = true
			if !a.ahead {
				ws.Message = fmt.Sprintf("%s starting", ws.Task.Operation)
			}
			wait := RequeueTask
			if a.ahead && a.afterDrains {
				wait = RequeueDrain // waits for its drains, whose end wakes the pool (Starts)
			}
			after = Soonest(after, wait)
		}
	}
	return after, starting
}

// resolveIntents looks for the task of every intent recorded without a task id
// (resolveIntent); an intent it cannot settle counts as in flight (requeueTask). Such
// intents are rare (the process died, or a status write failed, between recording an
// intent and its task id), and finding a VM's recent tasks needs the VM's reference, so
// only then is the inventory read here; observe reads it again after the tasks are
// checked.
func (f *Follower) resolveIntents(ctx context.Context, starting map[string]bool) time.Duration {
	var after time.Duration
	var inv *inventory.Inventory
	var readErr error
	for i := range f.Pool.Status.Workers {
		ws := &f.Pool.Status.Workers[i]
		if ws.Task == nil || ws.Task.ID != "" || starting[ws.VM] {
			continue
		}
		if inv == nil && readErr == nil {
			inv, readErr = f.VSphere.Inventory(ctx, intentVMs(f.Pool, starting)...)
		}
		if readErr != nil { // read once: a slow vCenter is not asked again per intent
			ws.Message = fmt.Sprintf("cannot tell whether %s was started: %v", ws.Task.Operation, readErr)
			after = Soonest(after, RequeueTask)
			continue
		}
		if !f.resolveIntent(ctx, inv, ws) && ws.Task != nil {
			after = Soonest(after, RequeueTask)
		}
	}
	return after
}

// intentVMs names the VMs of the workers with an intent recorded without a task id, but
// those whose start is in flight (starting).
func intentVMs(pool *gpupoolv1.GPUPoolProfile, starting map[string]bool) []string {
	var out []string
	for _, w := range pool.Status.Workers {
		if w.Task != nil && w.Task.ID == "" && !starting[w.VM] {
			out = append(out, w.VM)
		}
	}
	return out
}

// resolveIntent finds the task of a recorded intent in vCenter, the VM looked up in inv.
// It reports true when the task was found (ws.Task.ID is set); otherwise the intent was
// cleared (no task was started) or kept (vCenter could not be asked).
func (f *Follower) resolveIntent(ctx context.Context, inv *inventory.Inventory, ws *gpupoolv1.WorkerStatus) bool {
	t := ws.Task
	vm, ok := inv.FindVM(ws.VM)
	if !ok {
		ws.Message = fmt.Sprintf("%s was about to start, but VM %s is no longer in vCenter", t.Operation, ws.VM)
		ws.Task = nil
		return false
	}
	id, err := f.VSphere.FindTask(ctx, vm.Ref, vsphere.Op(t.Operation), t.KnownTasks)
	if err != nil {
		ws.Message = fmt.Sprintf("cannot tell whether %s was started: %v", t.Operation, err)
		return false
	}
	if id == "" {
		IntentsResolved.WithLabelValues(f.Pool.Name, "not-started").Inc()
		log.FromContext(ctx).Info("Intent found without a task; the step is planned again", "vm", ws.VM, "operation", t.Operation)
		ws.Task = nil
		return false
	}
	IntentsResolved.WithLabelValues(f.Pool.Name, "adopted").Inc()
	log.FromContext(ctx).Info("Adopted a task started before a crash or a lost status write", "vm", ws.VM, "operation", t.Operation, "task", id)
	t.ID = id
	return true
}

// recordTask records what a check of the worker's task found. A finished task is
// cleared; a failure is recorded with a backoff before the step is retried. It returns
// when to look again, or 0 when the task is over.
func (f *Follower) recordTask(ws *gpupoolv1.WorkerStatus, info vsphere.TaskInfo, found bool) time.Duration {
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
		f.Events.VM(ws.VM, corev1.EventTypeNormal, t.Operation+"Succeeded", fmt.Sprintf("%s of VM %s finished (task %s)", t.Operation, ws.VM, t.ID))
		ws.Task = nil
		ws.Attempts, ws.NextRetryTime = 0, nil
		return 0
	case vsphere.TaskError:
		TaskErrors.WithLabelValues(f.Pool.Name, t.Operation).Inc()
		Failed(ws, f.Now, fmt.Sprintf("%s failed", t.Operation), info.Error)
		f.Events.VM(ws.VM, corev1.EventTypeWarning, t.Operation+"Failed", fmt.Sprintf("%s of VM %s failed: %s", t.Operation, ws.VM, info.Error))
		ws.Task = nil
		return 0
	default:
		ws.Message = fmt.Sprintf("%s in progress (task %s)", t.Operation, t.ID)
		return RequeueTask
	}
}
