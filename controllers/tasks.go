package controllers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// checkTasks follows the pool's vSphere tasks (execute.Follower.Check) before the pass
// reads the inventory, so that the read shows the effect of every task recorded as
// ended; it counts those in s.tasks.ended. Their events wait for observe to match the
// VMs' nodes (laterEvents). The answers to the starts asked past the last passes are
// taken here (peek: left for the next pass, as a preview writes nothing).
func (r *GPUPoolProfileReconciler) checkTasks(ctx context.Context, s *scope, peek bool) time.Duration {
	f := &execute.Follower{Pool: s.pool, Now: s.now, VSphere: s.vc, Events: laterEvents{r, s}, Starts: r.starts, Peek: peek}
	after := f.Check(ctx)
	s.tasks.ended += f.Ended
	s.facts.stepErrors = append(s.facts.stepErrors, f.StepErrors...)
	return after
}

// persist writes the status now, with optimistic locking: an intent is only acted on
// once it is stored, and never over a pool somebody else changed meanwhile.
//
// Note: the patch is applied to a copy, because the client decodes the answer into the
// object it is given, and the pass holds pointers into s.pool's worker list.
func (r *GPUPoolProfileReconciler) persist(ctx context.Context, s *scope) error {
	obj := s.pool.DeepCopy()
	err := r.Client.Status().Patch(ctx, obj, poolStatusPatch(s.stored, true))
	r.wrote(obj, err)
	if err != nil {
		return err
	}
	s.persisted, s.stored = obj, obj
	s.pool.ResourceVersion = obj.ResourceVersion
	// Everything the pass decided so far is stored: a change after this write waits from
	// now (leaveUnwritten), not from the oldest change the write just stored.
	s.unwrittenSince = time.Time{}
	return nil
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
