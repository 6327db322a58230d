package execute

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// Record refreshes every worker's observed fields and its step: the first action
// the plan has for it. Entries of VMs removed from the spec are kept while gpupool still
// has a task or a node of theirs to finish (the controller's releaseRemoved drops them). held are the VMs the pass holds besides
// the plan's own; ev tells when a drain ends.
func Record(pool *gpupoolv1.GPUPoolProfile, p *plan.Plan, w *world.World, held []plan.Problem, ev Events) {
	next := map[string]plan.Step{}
	for _, h := range p.Hosts {
		for _, st := range slices.Concat(h.Steps, h.Later) {
			if _, seen := next[st.VM]; !seen {
				next[st.VM] = st
			}
		}
	}
	holds := map[string]plan.Problem{}
	for _, h := range slices.Concat(p.Held, held) {
		holds[h.VM] = h
	}
	inSpec := map[string]bool{}
	keep := pool.Status.Workers[:0:0]
	for _, id := range world.PoolVMs(&pool.Spec) {
		inSpec[id] = true
		ws := *Worker(pool, id)
		name := id
		if v, ok := w.VMs[id]; ok {
			name = v.Name
			ws.Host, ws.GPU, ws.Profile, ws.PowerState = v.Host, strings.Join(v.GPUs, ","), v.Profile, string(v.PowerState)
			if ws.GPU == "" {
				ws.GPU = v.GPU
			}
		} else {
			ws.Host, ws.GPU, ws.Profile, ws.PowerState = "", "", "", ""
			ws.Message = "VM not found in vCenter"
		}
		ws.Node = ""
		if n, ok := w.Nodes[name]; ok {
			ws.Node = n.Name
		}
		st, pending := next[name]
		switch {
		case holds[name].Reason != "":
			ws.Step, ws.StepStartTime, ws.Attempts, ws.NextRetryTime = gpupoolv1.StepNone, nil, 0, nil
			ws.Message = holds[name].Message
		case !pending:
			ws.Step, ws.StepStartTime, ws.Attempts, ws.NextRetryTime = gpupoolv1.StepNone, nil, 0, nil
			if ws.Task == nil {
				ws.Message = ""
			}
		case st.Action != ws.Step:
			if n, ok := w.Nodes[name]; ok && ws.Step == gpupoolv1.StepDrainRequired {
				// Note: the drain ends here, when the plan moves on from it, whether the
				// last eviction was seen in a drain pass or only by the planner (a node
				// with nothing left to evict gets no drain step).
				ev.Node(n, corev1.EventTypeNormal, "Drained", "node "+n.Name+" drained")
			}
			ws.Step, ws.StepStartTime, ws.Attempts, ws.NextRetryTime = st.Action, nil, 0, nil
			ws.GuestShutdownTime = nil
			ws.Message = st.Reason
		}
		keep = append(keep, ws)
	}
	for _, ws := range pool.Status.Workers {
		if !inSpec[ws.VM] && (ws.Task != nil || ws.Node != "") {
			ws.Step = gpupoolv1.StepNone
			ws.Message = "removed from the spec: gpupool finishes its task and releases its node"
			keep = append(keep, ws)
		}
	}
	pool.Status.Workers = keep
}

// ForgetDrains takes the workers back from a drain the pool no longer makes (an
// aborted transition): nothing is drained until a new plan asks again.
func ForgetDrains(pool *gpupoolv1.GPUPoolProfile) {
	for i := range pool.Status.Workers {
		w := &pool.Status.Workers[i]
		if w.Step == gpupoolv1.StepDrainRequired {
			w.Step, w.StepStartTime = gpupoolv1.StepNone, nil
		}
	}
}

// Restore puts back on pool the status a pass decided and the controller left unwritten
// (controllers/statusdefer.go), so that the next pass goes on from it: its workers are
// what this package wrote then, not decided again. It copies decided, so that nothing of
// the pass aliases what the controller remembered.
func Restore(pool *gpupoolv1.GPUPoolProfile, decided *gpupoolv1.GPUPoolProfileStatus) {
	decided.DeepCopyInto(&pool.Status)
}
