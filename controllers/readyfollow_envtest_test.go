package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testworld"
)

// TestReadyNodesRelabelledBetweenPasses: in a night -> day switch, the passes run until
// the day VMs are powered on and their nodes are all a worker waits for; then the nodes
// become Ready (kwok, through the power wire) and no pass runs. The ready follower, on a
// real node informer, relabels and uncordons each node in one patch with its state
// label. The passes that follow write none of those nodes' steps again, and each node
// is relabelled and uncordoned once (its events), whichever the follower or a pass did.
func TestReadyNodesRelabelledBetweenPasses(t *testing.T) {
	h := newHarness(t, "rfw-")
	wlog := &nodeWriteLog{}
	wlog.reset()
	h.client = wlog.wrap
	r := h.reconciler()
	r.states = newStateBatches(h.ctx)
	informers, err := cache.New(operatorConfig, cache.Options{Scheme: testScheme})
	h.must(err)
	r.ready = newReadyFollow(h.ctx, r)
	h.must(r.ready.watch(h.ctx, informers))
	go func() { _ = informers.Start(h.ctx) }()
	if !informers.WaitForCacheSync(h.ctx) {
		t.Fatal("the node informer did not sync")
	}
	t.Cleanup(r.ready.idle)

	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.clock.SetTime(monday1950)
	h.converge(pool.Name, "night", 40)
	r.ready.idle()
	h.events()

	// Night -> day, the nodes left as they are: the passes get the day VMs powered on
	// and wait for their nodes.
	day := []string{"day-1", "day-2", "day-3", "day-4"}
	h.clock.SetTime(tuesday0750)
	armed := func() int {
		r.ready.mu.Lock()
		defer r.ready.mu.Unlock()
		n := 0
		for _, e := range r.ready.arms {
			if e.pool == pool.Name && e.state == armWaiting {
				n++
			}
		}
		return n
	}
	for i := 0; armed() < len(day); i++ {
		if i == 30 {
			t.Fatalf("the day nodes were never all a worker waits for: %d armed, workers %v", armed(), h.steps)
		}
		h.clock.Step(testworld.Step(h.reconcile(pool.Name)))
		r.states.idle(pool.Name)
	}
	for _, vm := range day {
		if n := h.node(vm); !n.Spec.Unschedulable {
			t.Fatalf("node %s uncordoned before it was ready", n.Name)
		}
	}
	// While they wait, a pass finds nothing but time passed and writes nothing: the
	// workers' messages and the conditions name when the waits end, not how long they
	// have lasted (issue 37: 1,024 such messages had a 300 KB status written every few
	// seconds while the nodes came up).
	h.clock.Step(testworld.Step(h.reconcile(pool.Name))) // the waits' first pass says what they wait for
	r.states.idle(pool.Name)
	waiting := h.get(pool.Name)
	for _, d := range []time.Duration{execute.RequeueNodeReady, time.Minute} {
		h.clock.Step(d)
		h.reconcile(pool.Name)
		r.states.idle(pool.Name)
		if p := h.get(pool.Name); p.ResourceVersion != waiting.ResourceVersion {
			t.Errorf("%s later, with nothing but time passed, a pass wrote the pool's status: %s", d, statusDiff(waiting, p))
		}
	}
	done := testutil.ToFloat64(readySteps.WithLabelValues(pool.Name, "done"))

	// The nodes become ready for work; no pass runs.
	wlog.nextPass()
	follower := wlog.pass
	h.settle()
	h.waitNodes("relabelled and uncordoned by the follower", func(n *corev1.Node) bool {
		vm := strings.TrimPrefix(n.Name, h.prefix)
		return !strings.HasPrefix(vm, "day-") ||
			(!n.Spec.Unschedulable && n.Labels[gpupoolv1.LabelLayout] == "day" && n.Labels[LabelState] == gpupoolv1.StateReady)
	})
	r.ready.idle()
	if got := testutil.ToFloat64(readySteps.WithLabelValues(pool.Name, "done")) - done; got != float64(len(day)) {
		t.Errorf("the follower made %v node steps, want %d", got, len(day))
	}

	// The passes finish the switch and write none of those steps again.
	wlog.nextPass()
	after := wlog.pass
	p := h.converge(pool.Name, "day", 20)
	h.checkDay(p)
	r.states.idle(pool.Name)
	h.checkStates(map[string]string{"day-1": "ready", "day-2": "ready", "day-3": "ready", "day-4": "ready", "night-1": "parked"})
	wlog.mu.Lock()
	for _, vm := range day {
		var byFollower int
		for _, w := range wlog.writes[h.prefix+vm] {
			f := parsePatch(t, w.patch)
			_, relabels := f.Metadata.Labels[gpupoolv1.LabelLayout]
			switch {
			case w.pass == follower && relabels && f.uncordons():
				byFollower++
			case w.pass >= after && (relabels || f.uncordons()):
				t.Errorf("node %s: pass %d relabelled or uncordoned it again: %s", vm, w.pass, w.patch)
			}
		}
		if byFollower != 1 {
			t.Errorf("node %s: %d follower patches that relabel and uncordon, want 1: %v", vm, byFollower, wlog.writes[h.prefix+vm])
		}
	}
	wlog.mu.Unlock()
	relabelled := map[string]int{}
	for _, e := range h.events() {
		for _, vm := range day {
			if strings.Contains(e, "Relabelled") && strings.Contains(e, h.prefix+vm+" ") {
				relabelled[vm]++
			}
		}
	}
	for _, vm := range day {
		if relabelled[vm] != 1 {
			t.Errorf("node %s relabelled %d times (events), want once", vm, relabelled[vm])
		}
	}
}

// waitNodes waits, with a watch and a deadline, until ok holds for every node of the test.
func (h *harness) waitNodes(what string, ok func(*corev1.Node) bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	w, err := k8s.Watch(ctx, &corev1.NodeList{})
	h.must(err)
	defer w.Stop()
	for {
		var list corev1.NodeList
		h.must(k8s.List(ctx, &list))
		var behind []string
		for i := range list.Items {
			n := &list.Items[i]
			if strings.HasPrefix(n.Name, h.prefix) && !ok(n) {
				behind = append(behind, n.Name+" (unschedulable "+boolWord(n.Spec.Unschedulable)+", ready "+boolWord(nodes.Ready(n))+")")
			}
		}
		if len(behind) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("nodes not %s: %v", what, behind)
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				h.t.Fatalf("node watch ended: %v", ev.Object)
			}
		}
	}
}

func boolWord(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// statusDiff names the workers and the conditions whose words differ between two reads of
// a pool, for a failure message.
func statusDiff(a, b *gpupoolv1.GPUPoolProfile) string {
	var out []string
	for i := range min(len(a.Status.Workers), len(b.Status.Workers)) {
		if x, y := a.Status.Workers[i], b.Status.Workers[i]; x.Message != y.Message || x.Step != y.Step {
			out = append(out, fmt.Sprintf("worker %s: %q -> %q", x.VM, x.Message, y.Message))
		}
	}
	for _, c := range b.Status.Conditions {
		if was := findCondition(a, c.Type); was == nil || was.Message != c.Message || was.Status != c.Status {
			out = append(out, fmt.Sprintf("condition %s: %q", c.Type, c.Message))
		}
	}
	if len(out) == 0 {
		return "(no message or condition changed)"
	}
	return strings.Join(out, "; ")
}
