package controllers

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// armScope is a pass over one VM, vm-1, of layout day on host h1, its node cordoned by
// gpupool, and the plan's steps for it.
func armScope(t *testing.T, actions []plan.Action, change func(*scope)) (*scope, *plan.Plan) {
	t.Helper()
	spec := gpupoolv1.GPUPoolProfileSpec{MaxParallel: 1, Layouts: []gpupoolv1.Layout{
		{Name: "day", Workers: []gpupoolv1.Worker{{VM: "vm-1", Profile: "grid_p100-4q"}}}}}
	inv := &inventory.Inventory{VMs: []inventory.VM{{Name: "vm-1", Host: "h1", PowerState: inventory.PoweredOn, Profile: "grid_p100-4q"}}}
	w := world.Resolve(&spec, inv)
	n := followNode("vm-1", false, 0)
	w.Match(&spec, []corev1.Node{*n})
	if w.Nodes["vm-1"] == nil {
		t.Fatal("the node is not matched to vm-1")
	}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}, Spec: spec,
		Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{{VM: "vm-1"}}}}
	s := &scope{pool: pool, w: *w, layout: &pool.Spec.Layouts[0], wanted: &pool.Spec.Layouts[0]}
	p := &plan.Plan{Hosts: []plan.HostPlan{{Host: "h1"}}}
	for _, a := range actions {
		p.Hosts[0].Steps = append(p.Hosts[0].Steps, plan.Step{VM: "vm-1", Host: "h1", Action: a, Profile: "grid_p100-4q"})
	}
	if change != nil {
		change(s)
	}
	return s, p
}

// TestReadyArms is which workers a pass arms, over the shapes a worker's steps take and
// what else keeps a step from being left to the follower: only a wait for the node, or a
// power-on then that wait, followed by nothing but a relabel and an uncordon, with no
// other task, retry, warning, gpuReplicas or abort.
func TestReadyArms(t *testing.T) {
	wait, relabel, uncordon := plan.WaitNodeReady, plan.Relabel, plan.Uncordon
	powerOn := plan.PowerOn
	task := func(op vsphere.Op) func(*scope) {
		return func(s *scope) { s.pool.Status.Workers[0].Task = &gpupoolv1.TaskReference{Operation: string(op)} }
	}
	cases := []struct {
		name    string
		actions []plan.Action
		change  func(*scope)
		warn    bool
		armed   bool
		after   bool // armed at the power-on
		relabel bool
		uncord  bool
	}{
		{name: "wait, relabel, uncordon", actions: []plan.Action{wait, relabel, uncordon}, armed: true, relabel: true, uncord: true},
		{name: "wait, relabel", actions: []plan.Action{wait, relabel}, armed: true, relabel: true},
		{name: "wait, uncordon", actions: []plan.Action{wait, uncordon}, armed: true, uncord: true},
		{name: "the wait alone", actions: []plan.Action{wait}},
		{name: "power-on, wait, relabel, uncordon", actions: []plan.Action{powerOn, wait, relabel, uncordon}, armed: true, after: true, relabel: true, uncord: true},
		{name: "power-on, its node still Ready from before", actions: []plan.Action{powerOn, wait, relabel}, change: func(s *scope) {
			s.w.Nodes["vm-1"].Status.Conditions[0].Status = corev1.ConditionTrue
		}, armed: true, after: true, relabel: true},
		{name: "power-on in flight", actions: []plan.Action{powerOn, wait, relabel}, change: task(vsphere.OpPowerOn), armed: true, after: true, relabel: true},
		{name: "power-on, the wait alone", actions: []plan.Action{powerOn, wait}},
		{name: "reconfigure first", actions: []plan.Action{plan.Reconfigure, powerOn, wait, relabel}},
		{name: "drain first", actions: []plan.Action{plan.Drain, plan.PowerOff, plan.Reconfigure, powerOn, wait, relabel}},
		{name: "relabel due", actions: []plan.Action{relabel, uncordon}},
		{name: "another task in flight", actions: []plan.Action{wait, relabel}, change: task(vsphere.OpSuspend)},
		{name: "its power-on in flight before the wait", actions: []plan.Action{wait, relabel}, change: task(vsphere.OpPowerOn), armed: true, after: true, relabel: true},
		{name: "a reconfigure in flight before the wait", actions: []plan.Action{wait, relabel}, change: task(vsphere.OpReconfigure)},
		{name: "backing off", actions: []plan.Action{wait, relabel}, change: func(s *scope) {
			s.pool.Status.Workers[0].NextRetryTime = &metav1.Time{Time: time.Unix(1, 0)}
		}},
		{name: "a draining-soon warning", actions: []plan.Action{wait, relabel}, warn: true},
		{name: "gpuReplicas", actions: []plan.Action{wait, relabel}, change: func(s *scope) { s.layout.GPUReplicas = new(int32) }},
		{name: "aborted", actions: []plan.Action{wait, relabel}, change: func(s *scope) { s.aborted = true }},
		{name: "an overdue wait", actions: []plan.Action{wait, relabel}, change: func(s *scope) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, p := armScope(t, tc.actions, tc.change)
			if tc.name == "an overdue wait" {
				p.Hosts[0].Steps[0].Overdue = true
			}
			var warn map[string]time.Time
			if tc.warn {
				warn = map[string]time.Time{"vm-1": time.Unix(2, 0)}
			}
			arms := readyArms(s, p, warn)
			if (len(arms) == 1) != tc.armed || len(arms) > 1 {
				t.Fatalf("arms %v, want armed %v", arms, tc.armed)
			}
			if !tc.armed {
				return
			}
			a := arms[0]
			if a.node != "vm-1" || a.gen != 3 || a.afterPowerOn != tc.after || a.relabel != tc.relabel || a.uncordon != tc.uncord {
				t.Errorf("arm %v: afterPowerOn %v relabel %v uncordon %v; want %v %v %v", a, a.afterPowerOn, a.relabel, a.uncordon, tc.after, tc.relabel, tc.uncord)
			}
			// The pass's own read counts as the node seen not Ready only for an arm at the
			// power-on, and only when it read the node not Ready.
			if want := tc.after && !nodes.Ready(s.w.Nodes["vm-1"]); a.readNotReady != want {
				t.Errorf("readNotReady %v, want %v", a.readNotReady, want)
			}
			if a.relabel && a.meta.Labels[gpupoolv1.LabelLayout] != "day" {
				t.Errorf("relabel meta %v", a.meta.Labels)
			}
			if a.done != gpupoolv1.StateReady || a.pending != gpupoolv1.StatePending {
				t.Errorf("states done %q pending %q", a.done, a.pending)
			}
			if !slices.Contains([]int64{1}, a.want.Count) {
				t.Errorf("GPUs wanted %v", a.want)
			}
		})
	}
}
