package execute

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// countingNodes applies the executor's node patches to the node in memory and counts them.
type countingNodes struct {
	mu      sync.Mutex
	patches map[string]int
}

func (c *countingNodes) Patch(_ context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.patches[n.Name]++
	change(n)
	return nil
}

func (c *countingNodes) Protect(context.Context, *corev1.Node) error { return nil }

// Current: countingNodes serves the executor's writes in a pass only.
func (c *countingNodes) Current(_ context.Context, name string) (*corev1.Node, error) {
	return nil, fmt.Errorf("countingNodes: no node %s to read", name)
}
func (c *countingNodes) Release(context.Context, *corev1.Node) error { return nil }

type noEvents struct{}

func (noEvents) VM(_, _, _, _ string)                      {}
func (noEvents) Node(*corev1.Node, string, string, string) {}
func (noEvents) Pool(*corev1.Node, string, string, string) {}

// TestNodeStepsPatchOnce: a relabel whose worker the plan uncordons next relabels and
// uncordons the node in one patch, and a node step's patch carries the pass's marks for
// a worker with no step left (Input.Marks, Outcome.Done); a relabel without an uncordon
// after it is one patch too. A node that is not ready for work once relabelled
// (Input.ReadyOnceRelabelled) is relabelled only, and stays cordoned for a later pass.
func TestNodeStepsPatchOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cordoned   bool
		steps      []plan.Action
		notReady   bool // once relabelled
		stillSteps bool // the patch leaves the worker a step
	}{
		{"relabel and uncordon", true, []plan.Action{plan.Relabel, plan.Uncordon}, false, false},
		{"relabel alone", false, []plan.Action{plan.Relabel}, false, false},
		{"uncordon alone", true, []plan.Action{plan.Uncordon}, false, false},
		{"relabel of a node not ready once relabelled", true, []plan.Action{plan.Relabel, plan.Uncordon}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := gpupoolv1.GPUPoolProfileSpec{MaxParallel: 1, Layouts: []gpupoolv1.Layout{
				{Name: "day", Workers: []gpupoolv1.Worker{{VM: "a", Profile: "grid_p100-4q"}}}}}
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec}
			inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "esx-01"}},
				VMs: []inventory.VM{{Name: "a", Host: "esx-01", Profile: "grid_p100-4q", PowerState: inventory.PoweredOn}}}
			w := world.Resolve(&pool.Spec, inv)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
			if tc.cordoned {
				nodes.Cordon(node)
			}
			w.Nodes = map[string]*corev1.Node{"a": node}
			p := &plan.Plan{Layout: "day", Hosts: []plan.HostPlan{{Host: "esx-01"}}}
			for _, a := range tc.steps {
				p.Hosts[0].Steps = append(p.Hosts[0].Steps, plan.Step{Action: a, VM: "a", Profile: "grid_p100-4q"})
			}
			c := &countingNodes{patches: map[string]int{}}
			var marked []bool
			e := &Executor{Nodes: c, Events: noEvents{}}
			out := e.Run(context.Background(), Input{Pool: pool, Now: time.Now(), Plan: p, Layout: &pool.Spec.Layouts[0], World: w,
				Marks: func(vm string, done bool, n *corev1.Node) {
					marked = append(marked, done)
					nodes.SetState(n, "ready", "p")
				},
				ReadyOnceRelabelled: func(string) bool { return !tc.notReady }})
			if got := c.patches["node-a"]; got != 1 {
				t.Errorf("node patched %d times, want 1", got)
			}
			if node.Spec.Unschedulable != tc.stillSteps {
				t.Errorf("node cordoned: %v, want %v", node.Spec.Unschedulable, tc.stillSteps)
			}
			_, relabelled := node.Labels[gpupoolv1.LabelLayout]
			if wantRelabel := tc.steps[0] == plan.Relabel; relabelled != wantRelabel {
				t.Errorf("node relabelled: %v, want %v (labels %v)", relabelled, wantRelabel, node.Labels)
			}
			if len(marked) != 1 || marked[0] == tc.stillSteps || node.Labels[gpupoolv1.LabelState] != "ready" || node.Annotations[gpupoolv1.AnnotationMarkedBy] != "p" {
				t.Errorf("marks (done) %v, labels %v, annotations %v: want the marks in the step's patch, done %v", marked, node.Labels, node.Annotations, !tc.stillSteps)
			}
			if out.Done["a"] == tc.stillSteps {
				t.Errorf("Outcome.Done = %v, want a: %v", out.Done, !tc.stillSteps)
			}
		})
	}
}
