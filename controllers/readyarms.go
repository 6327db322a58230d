package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// The reconciler's side of the ready follower (readyfollow.go): what a pass arms, and
// the follower's reads and writes.

// readyArms are the workers of the pass's plan the follower may finish: those whose due
// step is a wait for their node (not overdue), or their power-on followed by that wait,
// with only Relabel and Uncordon after it, whose node exists, with no task but a
// power-on's (its node counts only once seen not Ready: afterPowerOn), no retry, hold or
// failure, and no draining-soon warning to carry (warn).
// None for a layout with gpuReplicas (its node is judged again once relabelled: the
// plan waits for it after the relabel) and none for an aborted switch.
func readyArms(s *scope, p *plan.Plan, warn map[string]time.Time) []readyArm {
	if p == nil || s.layout == nil || s.layout.GPUReplicas != nil || (s.wanted != nil && s.wanted.GPUReplicas != nil) || s.aborted {
		return nil
	}
	due := map[string]bool{}
	for _, st := range p.Due(int(max(s.pool.Spec.MaxParallel, 1))) {
		if (st.Action == plan.WaitNodeReady && !st.Overdue) || st.Action == plan.PowerOn {
			due[st.VM] = true
		}
	}
	facts := stateFacts(s)
	var out []readyArm
	for _, hp := range p.Hosts {
		steps := map[string][]plan.Action{}
		var vms []string
		for _, st := range hp.Steps {
			if due[st.VM] {
				if steps[st.VM] == nil {
					vms = append(vms, st.VM)
				}
				steps[st.VM] = append(steps[st.VM], st.Action)
			}
		}
		for _, vm := range vms {
			if a, ok := readyArmOf(s, vm, steps[vm], facts[vm], warn); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

// readyArmOf is the arm of one worker whose steps (in the plan's order) start with its
// due wait, if the follower may finish it (readyArms).
func readyArmOf(s *scope, vm string, steps []plan.Action, f nodes.StateFacts, warn map[string]time.Time) (readyArm, bool) {
	n := s.w.Nodes[vm]
	ws := s.worker(vm)
	_, warned := warn[vm]
	// A power-on due now, or in flight (asked, or ahead of the parks on its host and
	// asked once they end: execute's ahead.go), is what the node waits for.
	poweringOn := ws != nil && ws.Task != nil && ws.Task.Operation == string(vsphere.OpPowerOn)
	afterPowerOn := len(steps) > 0 && steps[0] == plan.PowerOn
	if afterPowerOn {
		steps = steps[1:]
	}
	afterPowerOn = afterPowerOn || poweringOn
	task := ws != nil && ws.Task != nil && !poweringOn
	if n == nil || ws == nil || task || ws.NextRetryTime != nil || f.Failed || f.Aborted || warned ||
		len(steps) < 2 || steps[0] != plan.WaitNodeReady {
		return readyArm{}, false
	}
	// The node is then ready and its VM runs; its step is what follows the wait.
	f.PoweredOn, f.NodeReady, f.Step = true, true, gpupoolv1.StepWaitNodeReady
	a := readyArm{pool: s.pool.Name, gen: s.pool.Generation, vm: vm, node: n.Name, layout: s.layout.Name,
		readiness: s.pool.Spec.Readiness, want: gpusWanted(&s.w, s.pool, s.wanted, vm, n),
		done: stateAfter(f, true), pending: stateAfter(f, false), afterPowerOn: afterPowerOn,
		readNotReady: afterPowerOn && !nodes.Ready(n)}
	for _, act := range steps[1:] {
		switch act {
		case plan.Relabel:
			m, ok := s.w.MetaFor(s.pool.Name, s.layout, vm)
			if !ok {
				return readyArm{}, false
			}
			a.relabel, a.meta = true, m
		case plan.Uncordon:
			a.uncordon = true
		default:
			return readyArm{}, false
		}
	}
	return a, true
}

func (r *GPUPoolProfileReconciler) readyPool(ctx context.Context, name string) (*gpupoolv1.GPUPoolProfile, error) {
	var p gpupoolv1.GPUPoolProfile
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &p)
	return &p, err
}

func (r *GPUPoolProfileReconciler) readyNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &n)
	return &n, err
}

// writeReady makes the follower's step as a pass's relabel and uncordon make theirs
// (internal/execute): the patch, then the Machine released and the events. The patch
// carries the node's state label and takes its warning off, so it takes over the pool's
// batch's write of marks to the node not yet started (takeNode) rather than wait for its
// turn.
func (r *GPUPoolProfileReconciler) writeReady(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, n *corev1.Node, a readyArm, st nodeStep) error {
	r.states.takeNode(n.Name, pool.Name)
	if err := r.patchNodeNow(ctx, n, st.change); err != nil {
		return err
	}
	if a.relabel {
		r.nodeEvent(pool, n, corev1.EventTypeNormal, "Relabelled", "node %s labelled for layout %s", n.Name, a.layout)
		if err := r.releaseMachine(ctx, n); err != nil {
			r.nodeEvent(pool, n, corev1.EventTypeWarning, "MachineNotReleased", "releasing the Machine of node %s: %v", n.Name, err)
		}
	}
	if st.uncordon {
		r.nodeEvent(pool, n, corev1.EventTypeNormal, "Uncordoned", "uncordoned node %s", n.Name)
	}
	return nil
}
