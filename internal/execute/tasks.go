package execute

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// A vSphere operation happens once per step whatever fails in between: the intent of
// every task the run queues is stored (one status write for all of them: the pass's
// own with Starts, Persist without) before vCenter is asked to start it, and the
// controller resolves an intent stored without a task id on its next pass
// (docs/operations.md, "Exactly once").

// Backoff of a failed step: from baseBackoff, doubling, to maxBackoff.
const (
	baseBackoff = 5 * time.Second
	maxBackoff  = 5 * time.Minute
)

// Failed records a failed attempt of the worker's step at now and when it may be
// retried; it returns the wait.
func Failed(ws *gpupoolv1.WorkerStatus, now time.Time, what, why string) time.Duration {
	ws.Attempts++
	wait := backoff(ws.Attempts)
	ws.NextRetryTime = ptrTime(now.Add(wait))
	ws.Message = fmt.Sprintf("%s (attempt %d, retry in %s): %s", what, ws.Attempts, wait, why)
	return wait
}

func (r *run) failed(ws *gpupoolv1.WorkerStatus, what, why string) time.Duration {
	return Failed(ws, r.Now, what, why)
}

// startTask records the intent to start a vSphere operation on a VM and queues the
// start; act starts the queued tasks of the pass together (startQueued), once all their
// intents are stored in one status write: see the comment at the top of this file.
func (r *run) startTask(ws *gpupoolv1.WorkerStatus, vm *inventory.VM, op vsphere.Op, start func(context.Context) (string, error)) (time.Duration, error) {
	if ws.Task != nil {
		return RequeueTask, nil
	}
	ws.Task = &gpupoolv1.TaskReference{Operation: string(op), StartTime: metav1.NewTime(r.Now), KnownTasks: vm.RecentTasks}
	r.queued = append(r.queued, queuedStart{worker: ws.VM, host: vm.Host, op: op, at: r.Now, start: start})
	return RequeueTask, nil
}

// queuedStart is a vSphere task whose intent the pass recorded and that startQueued
// starts.
type queuedStart struct {
	step plan.Step // the step that started it (runSteps sets it)
	// worker is the worker's status key: a later step of the pass may add a worker
	// status, which would leave a pointer into the list stale.
	worker string
	host   string
	op     vsphere.Op
	// at is the intent's time (TaskReference.StartTime).
	at    time.Time
	start func(context.Context) (string, error)
	id    string
	err   error
	// after are the parks a power-on ahead waits for (ahead.go), and watch follows
	// their tasks; nil for any other start.
	after []prereq
	watch func(ctx context.Context, ids []string, ended func(id string, ok bool)) error
	// plannedFor is the pool's generation and the layout a power-on ahead was planned
	// for (CancelAhead).
	plannedFor aheadPlan
	// mark, when set, is the node write to make before the start is asked, past the
	// pass (Starts.mark): the parked marks of a suspend's node (markLater). nil: none.
	mark func(context.Context) error
	// writes: mark writes the node (its parked marks), rather than only protect its
	// Machine (protectThen, for a node its cordon marked parked): a later pass leaves
	// the node's state label to that write (Starts.PendingMarks).
	writes bool
	// gate, when set, is the drains a suspend after drains waits for (afterdrains.go):
	// it is asked only once they ended (Starts.awaitDrains), or a pass observed the
	// drains of gateVMs ended (Starts.OpenGates).
	gate    *drainGate
	gateVMs []string
}

// powerOnHost is the host a queued power-on powers the VM on: the plan's when it moves
// the power-on off the VM's own (powerOnHost).
func (q queuedStart) powerOnHost() string { return cmp.Or(q.step.Host, q.host) }

// MaxConcurrentStarts bounds a pool's task starts asked at once, each start in a slot of
// its own (startSlots).
const MaxConcurrentStarts = 16

// startQueued has the tasks the pass queued started once their intents are stored, and
// only then: with r.Starts, past the pass, after the pass's own status write has stored
// them (Outcome.Starts: the controller hands them out once that write succeeded); else
// in the pass, after one status write of their own (Persist). Either way a pass that
// starts a task for every VM of a large pool costs one status write for all the
// intents, not one per VM, and the manager's passes no second write at all. The starts
// go concurrently but for the power-ons of one host (startGroups). It reports, per
// queued start, its step and when to look again or the error.
func (r *run) startQueued(ctx context.Context) {
	queued := r.queued
	r.queued = nil
	if len(queued) == 0 {
		return
	}
	if r.Starts != nil {
		r.out.Starts = &Handout{starts: r.Starts, pool: r.Pool.Name, queued: queued, groups: startGroups(queued)}
		for _, q := range queued {
			if ws := FindWorker(r.Pool, q.worker); ws != nil && q.after == nil && q.gate == nil {
				ws.Message = fmt.Sprintf("%s starting", q.op)
			}
			r.note(q.step, RequeueTask, nil)
		}
		return
	}
	if err := r.Persist(ctx); err != nil {
		for _, q := range queued {
			if ws := FindWorker(r.Pool, q.worker); ws != nil {
				ws.Task = nil
			}
			r.note(q.step, 0, fmt.Errorf("recording the intent to %s: %w", q.op, err))
		}
		return
	}
	groups := startGroups(queued)
	ForEach(len(groups), MaxConcurrentStarts, func(g int) {
		for _, i := range groups[g] {
			queued[i].id, queued[i].err = queued[i].start(ctx)
		}
	})
	for _, q := range queued {
		ws := FindWorker(r.Pool, q.worker)
		if ws == nil || ws.Task == nil {
			r.note(q.step, RequeueStep, nil) // cannot happen: nothing removes a worker or its intent within a pass
			continue
		}
		r.note(q.step, recordStart(ctx, r.Pool.Name, r.Now, r.Events, ws, q.id, q.err), nil)
	}
}

// Handout is the task starts of a run whose intents are recorded on the pool's workers
// (Outcome.Starts), to hand to Starts once the pool's status with those intents is
// stored, and not before: a start handed out before its intent is stored could happen
// twice (a crash, or a failed write, then a pass that finds no intent plans the step
// again). When the write fails nothing is handed out: the intents are lost with the
// status, and the next pass plans from what it observes (or, when the write may have
// been made, resolves the intents it finds from vCenter, as after a crash).
type Handout struct {
	starts *Starts
	pool   string
	queued []queuedStart
	groups [][]int
}

// Hand asks vCenter for the starts past the pass (Starts); call it once, after the
// status write that stores their intents succeeded. A nil Handout hands nothing.
func (h *Handout) Hand() {
	if h != nil {
		h.starts.hand(h.pool, h.queued, h.groups)
	}
}

// Len is how many starts the handout holds.
func (h *Handout) Len() int {
	if h == nil {
		return 0
	}
	return len(h.queued)
}

// startGroups groups the queued starts that must go one after the other: the power-ons
// of one host, in the plan's order, which placement may need (vSphere places a vGPU at
// power-on). A park or a reconfigure takes no GPU, so each is a group of its own: a pass
// that parks the twenty VMs of a host does not wait for twenty calls in a row. A
// power-on never needs a park of the same pass, the plan frees GPUs only when it sees
// the parked VM off, but for the power-ons ahead of parks (ahead.go): those of a host
// are a group of their own, which waits for the parks, after the host's others.
func startGroups(queued []queuedStart) [][]int {
	var groups [][]int
	hostGroup := map[string]int{}
	for i, q := range queued {
		if q.op != vsphere.OpPowerOn {
			groups = append(groups, []int{i})
			continue
		}
		host := q.powerOnHost()
		if q.after != nil {
			host += "\x00ahead" // asked once its parks end: never with the host's others
		}
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

// recordStart records on the worker what vCenter answered to the start of its intent
// (id, err), at now, and returns when to look again. An empty task id means the VM was
// already in the target state.
func recordStart(ctx context.Context, pool string, now time.Time, ev Events, ws *gpupoolv1.WorkerStatus, id string, err error) time.Duration {
	op := ws.Task.Operation
	if err != nil {
		// Note: the intent stays. The call may have failed after vCenter queued the task
		// (a deadline, a reset connection); vCenter is asked (resolveIntent: on the next
		// pass, or right after this answer is taken) before the step is planned again.
		TaskErrors.WithLabelValues(pool, op).Inc()
		wait := Failed(ws, now, op+" could not start", err.Error())
		ev.VM(ws.VM, corev1.EventTypeWarning, op+"Failed", fmt.Sprintf("%s of VM %s could not start: %v", op, ws.VM, err))
		return wait
	}
	if id == "" {
		ws.Task = nil
		return RequeueStep
	}
	ws.Task.ID = id
	ws.Message = fmt.Sprintf("%s started (task %s)", op, id)
	log.FromContext(ctx).Info("Started vSphere task", "vm", ws.VM, "operation", op, "task", id)
	ev.VM(ws.VM, corev1.EventTypeNormal, op+"Started", fmt.Sprintf("%s of VM %s started (task %s)", op, ws.VM, id))
	return RequeueTask
}

// backoff is how long to wait before the n-th retry of a failed step.
func backoff(n int32) time.Duration {
	d := baseBackoff
	for i := int32(1); i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}
