package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

// TestEmptyNodesParkedWithTheirCordon: day -> night on the one-host world with the
// manager's eviction rounds, task starts and pod watches, some day nodes with no pod. The
// pass that cordons marks those nodes parked in the same patch (nothing on them to
// drain), the others cordoned alone. When the switch goes on, every suspend is asked
// once, after its node carries the parked marks (the door checks it on the API server),
// and night is reached, each empty node written twice from the switch's start: its
// cordon, then its state label and its warning taken off in one patch once its VM is
// suspended. When a pod that must stay aborts the switch (drain.timeout), the
// empty nodes, whose VMs still run, are uncordoned with their day marks back: no parked
// label or taint is left on a node that serves, and nothing was asked of vCenter.
func TestEmptyNodesParkedWithTheirCordon(t *testing.T) {
	all := []string{"day-1", "day-2", "day-3", "day-4"}
	for _, c := range []struct {
		name, prefix string
		abort        bool
		empty        []string // day VMs whose node has no pod
	}{
		{"the switch goes on", "pwc-", false, []string{"day-3", "day-4"}},
		{"the switch aborts", "pwa-", true, []string{"day-2", "day-3", "day-4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			log := &nodeWriteLog{}
			log.reset()
			h.client = log.wrap
			door, starts := h.doorStarts(true)
			rec := h.withPodWatches()
			pool := h.dayNight()
			pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
			h.clock.SetTime(monday1000)
			h.create(pool)
			var pods []*corev1.Pod
			t.Cleanup(func() {
				for _, p := range pods {
					h.must(client.IgnoreNotFound(k8s.Patch(h.ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))))
				}
			})
			empty := map[string]bool{}
			for _, vm := range c.empty {
				empty[vm] = true
			}
			if c.abort {
				h.blockDrain("day-1") // a pod that must stay: the drain times out
			} else {
				for _, vm := range all {
					if !empty[vm] {
						p := h.addPod(pool.Name+"-"+vm, h.prefix+vm, map[string]string{"app": "infer"})
						h.must(k8s.Patch(h.ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["test.gpupool.dev/hold"]}}`))))
						pods = append(pods, p)
					}
				}
			}
			h.converge(pool.Name, "day", 30)
			// The day nodes' pod watches have listed (they start with the passes that see
			// the VMs run): only then can a pass tell a node has nothing to drain.
			for i := 0; ; i++ {
				known := 0
				for _, vm := range all {
					if _, ok := rec.nodePods.Drained(h.prefix + vm); ok {
						known++
					}
				}
				if known == len(all) {
					break
				}
				if i == 6000 { // 30 s: the watches list at once on an idle machine
					t.Fatalf("%d of the day nodes' pod watches listed", known)
				}
				time.Sleep(5 * time.Millisecond)
			}
			asked := door.counts()

			log.reset()
			h.clock.SetTime(monday1950)
			for range 30 { // the pass that cordons
				h.reconcile(pool.Name)
				rec.evictions.Wait()
				if h.node("day-1").Spec.Unschedulable {
					break
				}
				h.clock.Step(time.Second)
			}
			for _, vm := range all {
				n := h.node(vm)
				if !n.Spec.Unschedulable {
					t.Fatalf("node %s not cordoned by the switch's first passes", n.Name)
				}
				if got := nodes.HasMeta(n, nodes.ParkedMeta(pool.Name)); got != empty[vm] {
					t.Errorf("node %s: parked marks with its cordon %v, want %v (empty %v)", n.Name, got, empty[vm], empty[vm])
				}
			}
			if !c.abort {
				for _, p := range pods {
					h.must(client.IgnoreNotFound(k8s.Patch(h.ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))))
				}
				starts.Wait()
				h.converge(pool.Name, "night", 30)
				for vm, n := range door.counts() {
					if n-asked[vm] != 1 {
						t.Errorf("VM %s's operations asked %d times, want once", vm, n-asked[vm])
					}
				}
				if len(door.unstored) > 0 {
					t.Errorf("asked before its intent was stored or its node marked: %v", door.unstored)
				}
				for _, vm := range all {
					if n := h.node(vm); !nodes.HasMeta(n, nodes.ParkedMeta(pool.Name)) {
						t.Errorf("node %s at night without its parked marks: %v %v", n.Name, n.Labels, n.Spec.Taints)
					}
				}
				log.mu.Lock()
				defer log.mu.Unlock()
				for _, vm := range c.empty {
					if ws := log.writes[h.prefix+vm]; len(ws) != 2 {
						t.Errorf("empty node %s written %d times in the switch, want 2 (its cordon; its state and warning): %v", vm, len(ws), ws)
					}
				}
				return
			}
			var p *gpupoolv1.GPUPoolProfile
			for range 30 {
				res := h.reconcile(pool.Name)
				rec.evictions.Wait()
				starts.Wait()
				h.settle()
				if p = h.get(pool.Name); p.Status.Transition != nil && p.Status.Transition.AbortedTime != nil {
					break
				}
				h.clock.Step(min(res.RequeueAfter, 10*time.Second))
			}
			if p.Status.Transition == nil || p.Status.Transition.AbortedTime == nil {
				t.Fatalf("want an aborted transition, got phase %s transition %+v", p.Status.Phase, p.Status.Transition)
			}
			h.reconcile(pool.Name) // an aborted switch's pass: the nodes given back
			for _, vm := range all {
				n := h.node(vm)
				if n.Spec.Unschedulable {
					t.Errorf("node %s left cordoned after the abort", n.Name)
				}
				if n.Labels[LabelParked] != "" || n.Labels[LabelLayout] != "day" || n.Labels[LabelProfile] != "grid_p100-4q" || n.Labels[LabelState] != StateReady {
					t.Errorf("node %s's labels after the abort %v, want day's, state ready and no parked label", n.Name, n.Labels)
				}
				for _, tn := range n.Spec.Taints {
					if tn.Key == TaintParked {
						t.Errorf("node %s keeps the parked taint after the abort: %v", n.Name, n.Spec.Taints)
					}
				}
			}
			for vm, n := range door.counts() {
				if n != asked[vm] {
					t.Errorf("VM %s: an operation asked despite the abort", vm)
				}
			}
		})
	}
}

// TestUncordonRunningGivesTheLayoutBack: an aborted switch's pass uncordons the nodes of
// running VMs; a node that carries the parked marks while its VM runs gets its worker's
// marks of the active layout back in the same write, but when its guest was asked to
// shut down (a power-off's node is marked before), and when the VM is not a worker of
// the active layout (nothing to give back): those keep the parked marks.
func TestUncordonRunningGivesTheLayoutBack(t *testing.T) {
	spec := gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day", Parking: gpupoolv1.ParkingSuspend, Layouts: []gpupoolv1.Layout{
		{Name: "day", Workers: []gpupoolv1.Worker{{VM: "day-1", Profile: "grid_p100-4q"}, {VM: "day-2", Profile: "grid_p100-4q"}}},
		{Name: "night", Workers: []gpupoolv1.Worker{{VM: "night-1", Profile: "grid_p100-16q"}}},
	}}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: spec}
	pool.Status.ActiveLayout = "day"
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "esx-01"}}}
	var objs []client.Object
	for _, vm := range []string{"day-1", "day-2", "night-1", "day-3"} {
		inv.VMs = append(inv.VMs, inventory.VM{Name: vm, Ref: vm, Host: "esx-01", Profile: "grid_p100-4q", PowerState: inventory.PoweredOn})
	}
	w := world.Resolve(&pool.Spec, inv)
	w.Nodes = map[string]*corev1.Node{}
	for _, vm := range []string{"day-1", "day-2", "night-1"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + vm}}
		nodes.Cordon(n)
		nodes.ApplyMeta(n, nodes.ParkedMeta("pool"))
		w.Nodes[vm] = n
		objs = append(objs, n.DeepCopy())
	}
	pool.Status.Workers = []gpupoolv1.WorkerStatus{{VM: w.ID("day-1"), GuestShutdownTime: &metav1.Time{Time: monday1950}}}
	c := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(objs...).Build()
	for vm, n := range w.Nodes { // as the cache has them, with their resourceVersion
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(n), n); err != nil {
			t.Fatal(err)
		}
		w.Nodes[vm] = n
	}
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c}
	s := &scope{pool: pool, w: *w, budget: execute.NewBudget(10, 16)}
	r.uncordonRunning(t.Context(), s)
	if len(s.facts.stepErrors) > 0 {
		t.Errorf("step errors %v", s.facts.stepErrors)
	}
	for vm, want := range map[string]bool{"day-1": false, "day-2": true, "night-1": false} {
		var n corev1.Node
		if err := c.Get(t.Context(), client.ObjectKey{Name: "node-" + vm}, &n); err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable {
			t.Errorf("node of %s still cordoned", vm)
		}
		if parked := nodes.HasMeta(&n, nodes.ParkedMeta("pool")); parked == want || (n.Labels[LabelLayout] == "day") != want {
			t.Errorf("node of %s: labels %v taints %v, want the day layout's marks given back: %v", vm, n.Labels, n.Spec.Taints, want)
		}
	}
}
