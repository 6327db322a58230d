package execute

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// blocked is what the drains of these tests find, whatever the time: pods blocked and
// held.
var blocked = drain.Result{Blocked: []string{"team/job-0: PodDisruptionBudget team/pdb allows 0 disruptions"},
	Holding: []string{"team/notebook-1 (gpupool.dev/do-not-disrupt)"}}

// wait is one kind of wait of TestWaitsSayWhenTheyEnd: the step, whether the VM has its
// node and what the node lacks, the VM's power state, whether its guest was asked to
// shut down, and drain.maxHold.
type wait struct {
	name    string
	action  plan.Action
	node    bool
	gaps    []string
	powered inventory.PowerState
	guest   bool
	maxHold *metav1.Duration
	// wait is how long the wait lasts: the passes run inside it.
	wait time.Duration
	// want are the deadlines the words must name.
	want []string
}

// TestWaitsSayWhenTheyEnd: a step that waits (a node not ready yet, with and without its
// node, ready but for a resource; a guest asked to shut down; a drain held by pods, with
// and without drain.maxHold) tells the same thing on every pass of its wait: the
// worker's status, the node waits and the blocked drains of the Outcome (the
// Progressing condition's words) name when the wait ends, never how long it has run.
// A message that counted the time changed every worker that waited on every pass, and
// had the pool's whole status written for it (at 64 hosts 300 KB every few seconds while
// 1,024 nodes came up).
func TestWaitsSayWhenTheyEnd(t *testing.T) {
	began := time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC)
	hold := &metav1.Duration{Duration: 5 * time.Minute}
	for _, tc := range []wait{
		{name: "node not registered", action: plan.WaitNodeReady, powered: inventory.PoweredOn, wait: 10 * time.Minute,
			want: []string{"2031-06-15T10:10:00Z"}},
		{name: "node not Ready", action: plan.WaitNodeReady, node: true, powered: inventory.PoweredOn, wait: 10 * time.Minute,
			want: []string{"2031-06-15T10:10:00Z"}},
		{name: "node waiting for a resource", action: plan.WaitNodeReady, node: true, gaps: []string{"nvidia.com/gpu (allocatable 0 of 1)"},
			powered: inventory.PoweredOn, wait: 10 * time.Minute, want: []string{"2031-06-15T10:10:00Z"}},
		{name: "guest shutting down", action: plan.PowerOff, powered: inventory.PoweredOn, guest: true, wait: 2 * time.Minute,
			want: []string{"2031-06-15T10:02:00Z"}}, // guestShutdownTimeout's default
		{name: "drain blocked", action: plan.Drain, node: true, powered: inventory.PoweredOn, wait: 10 * time.Minute,
			want: []string{"timeout at 2031-06-15T10:10:00Z"}},
		{name: "drain held before maxHold", action: plan.Drain, node: true, powered: inventory.PoweredOn, maxHold: hold, wait: 5 * time.Minute,
			want: []string{"drain.maxHold, 2031-06-15T10:05:00Z", "timeout at 2031-06-15T10:10:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first *gpupoolv1.WorkerStatus
			var firstOut Outcome
			// Passes at the wait's start, a second and a minute in, and a second before
			// its end: all tell the same. The first holds the time the wait began as
			// the pass that began it does, to the nanosecond; the others as read back
			// from the status, to the second.
			for _, at := range []time.Duration{0, time.Second, time.Minute, tc.wait - time.Second} {
				start, now := began, began.Add(at)
				if at == 0 {
					start = began.Add(700 * time.Millisecond)
					now = start
				}
				ws, out := runWait(t, tc, start, now)
				words := ws.Message + " | " + strings.Join(out.NodeWaits, "; ") + " | " + strings.Join(out.DrainBlocked, "; ")
				for _, w := range tc.want {
					if !strings.Contains(words, w) {
						t.Errorf("%s in: %q does not name %q", at, words, w)
					}
				}
				if ws.Message == "" {
					t.Errorf("%s in: no message", at)
				}
				if first == nil {
					first, firstOut = ws, out
					continue
				}
				if first.StepStartTime != nil {
					first.StepStartTime = &metav1.Time{Time: began} // as read back
				}
				if first.GuestShutdownTime != nil {
					first.GuestShutdownTime = &metav1.Time{Time: began}
				}
				if !reflect.DeepEqual(ws, first) {
					t.Errorf("%s in: worker %+v, want what the wait's first pass wrote, %+v", at, ws, first)
				}
				if !reflect.DeepEqual(out.NodeWaits, firstOut.NodeWaits) || !reflect.DeepEqual(out.DrainBlocked, firstOut.DrainBlocked) {
					t.Errorf("%s in: node waits %q, blocked drains %q; want %q, %q", at, out.NodeWaits, out.DrainBlocked, firstOut.NodeWaits, firstOut.DrainBlocked)
				}
			}
		})
	}
}

// runWait runs one pass of a one-VM pool whose only step is tc's, begun at began, at now.
func runWait(t *testing.T, tc wait, began, now time.Time) (*gpupoolv1.WorkerStatus, Outcome) {
	t.Helper()
	spec := gpupoolv1.GPUPoolProfileSpec{MaxParallel: 1, Drain: gpupoolv1.DrainSpec{MaxHold: tc.maxHold},
		Layouts: []gpupoolv1.Layout{{Name: "day", Workers: []gpupoolv1.Worker{{VM: "a", Profile: "grid_p100-4q"}}}}}
	ws := gpupoolv1.WorkerStatus{VM: "a", Step: tc.action, StepStartTime: &metav1.Time{Time: began}}
	if tc.guest {
		ws.GuestShutdownTime = &metav1.Time{Time: began}
	}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec,
		Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{ws}}}
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "esx-01"}},
		VMs: []inventory.VM{{Name: "a", Host: "esx-01", Profile: "grid_p100-4q", PowerState: tc.powered}}}
	w := world.Resolve(&pool.Spec, inv)
	w.Nodes = map[string]*corev1.Node{}
	if tc.node {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
		if tc.action == plan.Drain {
			nodes.Cordon(node) // cordoned by an earlier pass of the drain
		}
		w.Nodes["a"] = node
		if len(tc.gaps) > 0 {
			w.Gaps = map[string][]string{"a": tc.gaps}
		}
	}
	p := &plan.Plan{Layout: "day", Hosts: []plan.HostPlan{{Host: "esx-01",
		Steps: []plan.Step{{Action: tc.action, VM: "a", Host: "esx-01", Profile: "grid_p100-4q"}}}}}
	drains := newGatedDrainer(blocked, "node-a")
	close(drains.gates["node-a"]) // answers at once
	e := &Executor{Nodes: &countingNodes{patches: map[string]int{}}, Drainer: drains, Events: noEvents{}}
	out := e.Run(context.Background(), Input{Pool: pool, Now: now, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	if len(out.StepErrors) > 0 || out.Abort != "" {
		t.Fatalf("pass at %s: step errors %q, abort %q", now, out.StepErrors, out.Abort)
	}
	return &pool.Status.Workers[0], out
}
