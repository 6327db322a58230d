package execute

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// gatedDrainer is a Drainer whose drain of a node waits for that node's gate to open
// (or its round to be cancelled) and then reports result; it counts the drains asked
// per node and the most it ran at once.
type gatedDrainer struct {
	mu      sync.Mutex
	calls   map[string]int
	order   []string
	gates   map[string]chan struct{}
	result  drain.Result
	running atomic.Int32
	most    atomic.Int32
	// entered hears each drain as it starts, when set.
	entered chan string
	// ready is each node's readiness as its last drain was given it.
	ready map[string]bool
}

func newGatedDrainer(result drain.Result, nodes ...string) *gatedDrainer {
	g := &gatedDrainer{calls: map[string]int{}, gates: map[string]chan struct{}{}, result: result, ready: map[string]bool{}}
	for _, n := range nodes {
		g.gates[n] = make(chan struct{})
	}
	return g
}

func (g *gatedDrainer) Drain(ctx context.Context, n *corev1.Node, _ gpupoolv1.DrainSpec, _, _ time.Time, _ drain.Budget) (drain.Result, error) {
	g.mu.Lock()
	g.calls[n.Name]++
	g.order = append(g.order, n.Name)
	g.ready[n.Name] = nodes.Ready(n)
	gate := g.gates[n.Name]
	g.mu.Unlock()
	now := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		most := g.most.Load()
		if now <= most || g.most.CompareAndSwap(most, now) {
			break
		}
	}
	if g.entered != nil { // running, counted, and held by its gate
		g.entered <- n.Name
	}
	select {
	case <-gate:
		return g.result, nil
	case <-ctx.Done():
		return drain.Result{}, ctx.Err()
	}
}

func (g *gatedDrainer) ForceDelete(context.Context, string, gpupoolv1.DrainSpec) (int, error) {
	return 0, nil
}

func (g *gatedDrainer) called(node string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[node]
}

// drainWorld is a pool of VMs, one per host, each running with a node "node-<vm>"; the
// plan drains the VMs drains names and relabels the others.
func drainWorld(vms []string, drains map[string]bool) (*gpupoolv1.GPUPoolProfile, *world.World, *plan.Plan) {
	spec := gpupoolv1.GPUPoolProfileSpec{MaxParallel: int32(len(vms)), Layouts: []gpupoolv1.Layout{{Name: "day"}}} //nolint:gosec // a handful
	inv := &inventory.Inventory{}
	p := &plan.Plan{Layout: "day"}
	for i, vm := range vms {
		host := "esx-" + string(rune('a'+i))
		spec.Layouts[0].Workers = append(spec.Layouts[0].Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
		inv.Hosts = append(inv.Hosts, inventory.Host{Name: host})
		inv.VMs = append(inv.VMs, inventory.VM{Name: vm, Host: host, Profile: "grid_p100-4q", PowerState: inventory.PoweredOn})
		action := plan.Relabel
		if drains[vm] {
			action = plan.Drain
		}
		p.Hosts = append(p.Hosts, plan.HostPlan{Host: host, Steps: []plan.Step{{Action: action, VM: vm, Profile: "grid_p100-4q"}}})
	}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec}
	w := world.Resolve(&pool.Spec, inv)
	w.Nodes = map[string]*corev1.Node{}
	for _, vm := range vms {
		w.Nodes[vm] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + vm}}
	}
	return pool, w, p
}

// TestEvictionsOutliveThePass: with Evictions, a pass cordons the node to drain, hands
// its evictions to a round and goes on with the other VMs' steps without waiting for
// it; a pass while the round runs asks nothing more of the node; a round that asked for
// evictions does not wake the pool (the evicted pods' deletions will); the next pass
// settles what it found and, the pods still going, hands out the node's next round at
// once. Every node is evicted from by one round at a time.
func TestEvictionsOutliveThePass(t *testing.T) {
	pool, w, p := drainWorld([]string{"a", "b"}, map[string]bool{"a": true})
	// A drain reads its node's readiness (a node not Ready has its terminating pods
	// waited for differently): the round is given it.
	w.Nodes["a"].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	d := newGatedDrainer(drain.Result{Evicted: 2, Waiting: []string{"ns/x", "ns/y"}}, "node-a")
	woke := make(chan string, 4)
	ev := NewEvictions(context.Background(), func(pool string) { woke <- pool })
	nodes := &countingNodes{patches: map[string]int{}}
	e := &Executor{Nodes: nodes, Drainer: d, Events: noEvents{}, Evictions: ev}
	now := time.Date(2031, 3, 15, 7, 0, 0, 0, time.UTC)
	pass := func() Outcome {
		t.Helper()
		now = now.Add(time.Second)
		return e.Run(context.Background(), Input{Pool: pool, Now: now, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	}

	out := pass() // the round of node-a blocks on its gate: the pass does not
	if !w.Nodes["a"].Spec.Unschedulable || nodes.patches["node-b"] != 1 {
		t.Fatalf("first pass: node-a cordoned %v, node-b patched %d times: want the cordon and b's relabel in the pass that handed the round out",
			w.Nodes["a"].Spec.Unschedulable, nodes.patches["node-b"])
	}
	if out.After == 0 || len(out.StepErrors) > 0 || ev.InFlight("p") != 1 {
		t.Fatalf("first pass: %+v, %d rounds in flight; want a requeue, no error, one round", out, ev.InFlight("p"))
	}
	pass()
	if got := d.called("node-a"); got > 1 {
		t.Fatalf("a pass while the round runs drained node-a again (%d drains)", got)
	}
	close(d.gates["node-a"])
	ev.Wait()
	select {
	case pool := <-woke:
		t.Fatalf("a round that asked for evictions woke %q", pool)
	default:
	}
	pass() // settles the round and hands out the next
	ws := FindWorker(pool, w.ID("a"))
	if ws == nil || !strings.Contains(ws.Message, "draining node node-a: ") || !strings.Contains(ws.Message, "requested eviction of 2 pod(s)") {
		t.Fatalf("worker a after the settling pass: %+v, want what the round found", ws)
	}
	ev.Wait()
	if got := d.called("node-a"); got != 2 || ev.InFlight("p") != 1 {
		t.Errorf("after the settling pass: %d drains of node-a, %d rounds recorded; want 2 (the round, settled, then the next) and 1", got, ev.InFlight("p"))
	}
	if nodes.patches["node-a"] != 1 {
		t.Errorf("node-a patched %d times, want one cordon", nodes.patches["node-a"])
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ready["node-a"] {
		t.Error("the round's drain was given node-a not Ready; it is Ready")
	}
}

// TestEvictionsAbortCancelsTheRounds: a drain whose round found pods still blocking at
// drain.timeout aborts the transition in the pass that settles it, and the pool's other
// rounds are cancelled: nothing more is evicted for it, and nothing stays recorded. A
// round that found pods blocking wakes the pool (no pod event would).
func TestEvictionsAbortCancelsTheRounds(t *testing.T) {
	pool, w, p := drainWorld([]string{"a", "c"}, map[string]bool{"a": true, "c": true})
	d := newGatedDrainer(drain.Result{Blocked: []string{"ns/x (eviction refused: budget)"}}, "node-a", "node-c")
	woke := make(chan string, 4)
	ev := NewEvictions(context.Background(), func(pool string) { woke <- pool })
	e := &Executor{Nodes: &countingNodes{patches: map[string]int{}}, Drainer: d, Events: noEvents{}, Evictions: ev}
	now := time.Date(2031, 3, 15, 7, 0, 0, 0, time.UTC)
	in := Input{Pool: pool, Now: now, Plan: p, Layout: &pool.Spec.Layouts[0], World: w}
	e.Run(context.Background(), in)
	close(d.gates["node-a"])
	<-woke
	in.Now = now.Add(drainTimeout(pool.Spec.Drain))
	out := e.Run(context.Background(), in)
	if !strings.Contains(out.Abort, "drain of node node-a timed out") {
		t.Fatalf("Abort = %q, want node-a's drain timed out", out.Abort)
	}
	// Run returned: node-c's round, cancelled, has ended without its gate (what the
	// controller does next, the uncordons, comes after the pool's last eviction).
	if n, running := ev.InFlight("p"), d.running.Load(); n != 0 || running != 0 {
		t.Errorf("after the abort: %d rounds recorded, %d running; want none", n, running)
	}
	select {
	case pool := <-woke:
		t.Errorf("a cancelled round woke %q", pool)
	default:
	}
}

// TestEvictionsOfAnEarlierDrainAreNotNews: a round that ended for an earlier drain of a
// node (its step start differs: the node drained, came back and drains again) is not
// settled as the new drain's; the new drain gets a round of its own.
func TestEvictionsOfAnEarlierDrainAreNotNews(t *testing.T) {
	pool, w, p := drainWorld([]string{"a"}, map[string]bool{"a": true})
	d := newGatedDrainer(drain.Result{Evicted: 1, Waiting: []string{"ns/old"}}, "node-a")
	close(d.gates["node-a"])
	ev := NewEvictions(context.Background(), nil)
	e := &Executor{Nodes: &countingNodes{patches: map[string]int{}}, Drainer: d, Events: noEvents{}, Evictions: ev}
	now := time.Date(2031, 3, 15, 7, 0, 0, 0, time.UTC)
	e.Run(context.Background(), Input{Pool: pool, Now: now, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	ev.Wait()
	ws := Worker(pool, w.ID("a"))
	ws.StepStartTime = ptrTime(now.Add(time.Hour)) // a later drain of the node
	ws.Message = ""
	e.Run(context.Background(), Input{Pool: pool, Now: now.Add(time.Hour), Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	ev.Wait()
	if ws := FindWorker(pool, w.ID("a")); ws.Message != "" {
		t.Errorf("the later drain settled the earlier round: %q", ws.Message)
	}
	if got := d.called("node-a"); got != 2 {
		t.Errorf("%d drains of node-a, want 2 (a round for each drain)", got)
	}
}

// TestEvictionsLimitAPool: a pool runs at most Limit rounds at once, whatever the number
// of nodes it hands out; the others wait for a slot, and all of them run, in the order
// they were handed out (the plan's hosts, in order) when one runs at a time.
func TestEvictionsLimitAPool(t *testing.T) {
	for _, limit := range []int{1, 2, 3} {
		vms := []string{"a", "b", "c", "d", "e"}
		drains := map[string]bool{}
		var nodeNames []string
		for _, vm := range vms {
			drains[vm] = true
			nodeNames = append(nodeNames, "node-"+vm)
		}
		pool, w, p := drainWorld(vms, drains)
		d := newGatedDrainer(drain.Result{Done: true}, nodeNames...)
		d.entered = make(chan string, len(vms))
		ev := NewEvictions(context.Background(), nil)
		ev.Limit = limit
		e := &Executor{Nodes: &countingNodes{patches: map[string]int{}}, Drainer: d, Events: noEvents{}, Evictions: ev}
		e.Run(context.Background(), Input{Pool: pool, Now: time.Date(2031, 3, 15, 7, 0, 0, 0, time.UTC), Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
		for range limit { // limit rounds run, blocked on their gates
			<-d.entered
		}
		for _, n := range nodeNames {
			close(d.gates[n])
		}
		ev.Wait()
		if most := d.most.Load(); most != int32(limit) { //nolint:gosec // a handful
			t.Errorf("limit %d: %d rounds ran at once", limit, most)
		}
		for _, n := range nodeNames {
			if d.called(n) != 1 {
				t.Errorf("limit %d: %s drained %d times, want once", limit, n, d.called(n))
			}
		}
		if limit == 1 && !slices.Equal(d.order, nodeNames) {
			t.Errorf("limit 1: rounds ran in the order %v, want %v", d.order, nodeNames)
		}
	}
}

// TestRoundsWakeForWhatNoPodEventTells: a round's end wakes its pool exactly when what
// it found will not come as a pod event of the node: a drained node, an error, pods
// that block or hold the drain, evictions deferred; not for evictions asked or
// terminating pods waited for.
func TestRoundsWakeForWhatNoPodEventTells(t *testing.T) {
	for _, c := range []struct {
		name string
		o    drainOutcome
		want bool
	}{
		{"drained", drainOutcome{res: drain.Result{Done: true}}, true},
		{"evictions asked", drainOutcome{res: drain.Result{Evicted: 3, Waiting: []string{"ns/a", "ns/b", "ns/c"}}}, false},
		{"terminating pods", drainOutcome{res: drain.Result{Waiting: []string{"ns/a"}}}, false},
		{"held pods evicted at maxHold", drainOutcome{res: drain.Result{Evicted: 1, Waiting: []string{"ns/a"}, Overridden: map[string]int{"ns": 1}}}, false},
		{"listing failed", drainOutcome{err: context.DeadlineExceeded}, true},
		{"a budget refuses", drainOutcome{res: drain.Result{Blocked: []string{"ns/a (eviction refused)"}}}, true},
		{"a pod holds", drainOutcome{res: drain.Result{Holding: []string{"ns/a (do-not-disrupt)"}}}, true},
		{"evictions deferred", drainOutcome{res: drain.Result{Evicted: 1, Deferred: 2}}, true},
	} {
		if got := wakes(c.o); got != c.want {
			t.Errorf("%s: wakes = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestEvictionsStopWhenThePlanDrainsNoMore: a plan that no longer drains a node (the
// transition superseded or replanned) ends the node's round in the pass that sees it,
// running or queued, without waiting for the pool's other rounds; the rounds of nodes
// still drained go on.
func TestEvictionsStopWhenThePlanDrainsNoMore(t *testing.T) {
	pool, w, p := drainWorld([]string{"a", "c", "e"}, map[string]bool{"a": true, "c": true, "e": true})
	d := newGatedDrainer(drain.Result{Done: true}, "node-a", "node-c", "node-e")
	d.entered = make(chan string, 3)
	ev := NewEvictions(context.Background(), nil)
	ev.Limit = 2 // a and c run, e queues
	e := &Executor{Nodes: &countingNodes{patches: map[string]int{}}, Drainer: d, Events: noEvents{}, Evictions: ev}
	in := Input{Pool: pool, Now: time.Date(2031, 3, 15, 7, 0, 0, 0, time.UTC), Plan: p, Layout: &pool.Spec.Layouts[0], World: w}
	e.Run(context.Background(), in)
	<-d.entered
	<-d.entered
	// The next plan drains a only: c's running round and e's queued one end now, while
	// a's round still waits on its gate.
	next := &plan.Plan{Layout: "day", Hosts: []plan.HostPlan{
		{Host: "esx-a", Steps: []plan.Step{{Action: plan.Drain, VM: "a", Profile: "grid_p100-4q"}}},
		{Host: "esx-b", Steps: []plan.Step{{Action: plan.Uncordon, VM: "c", Profile: "grid_p100-4q"}}},
		{Host: "esx-c", Steps: []plan.Step{{Action: plan.Uncordon, VM: "e", Profile: "grid_p100-4q"}}},
	}}
	in.Plan, in.Now = next, in.Now.Add(time.Second)
	e.Run(context.Background(), in)
	if n := ev.InFlight("p"); n != 1 {
		t.Errorf("%d rounds recorded, want a's only", n)
	}
	if got := d.called("node-e"); got != 0 {
		t.Errorf("node-e's queued round ran %d times after the plan dropped it", got)
	}
	close(d.gates["node-a"])
	ev.Wait()
	if d.called("node-a") != 1 || d.called("node-c") != 1 || d.called("node-e") != 0 {
		t.Errorf("drains a %d, c %d, e %d; want 1, 1 (cancelled), 0", d.called("node-a"), d.called("node-c"), d.called("node-e"))
	}
}
