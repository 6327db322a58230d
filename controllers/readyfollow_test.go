package controllers

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testworld"
)

// followNode is a pool node as the follower sees it: cordoned by gpupool, Ready or not,
// advertising gpus GPUs.
func followNode(name string, ready bool, gpus int64) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"keep": "me"},
			Annotations: map[string]string{gpupoolv1.AnnotationCordoned: "p"}},
		Spec: corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
			Allocatable: corev1.ResourceList{nodes.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}},
	}
}

func followArm(node string) readyArm {
	return readyArm{pool: "p", gen: 1, vm: node, node: node, layout: "day", relabel: true, uncordon: true,
		meta: nodes.Meta{Labels: map[string]string{gpupoolv1.LabelPool: "p", gpupoolv1.LabelLayout: "day"}},
		want: nodes.GPUWant{Count: 1}, done: gpupoolv1.StateReady, pending: gpupoolv1.StatePending}
}

// TestReadyStep is the follower's decision over the classes of node it may see: not yet
// ready for work (NotReady, no GPUs, a readiness label missing), ready (relabel and
// uncordon in one patch, the worker done), ready but not once relabelled (the relabel
// alone: the pass uncordons), an uncordon alone, a node that still carries a
// draining-soon warning (taken off with the step), and a node that carries it all already.
func TestReadyStep(t *testing.T) {
	withLabel := func(n *corev1.Node, k, v string) *corev1.Node { n.Labels[k] = v; return n }
	readinessLabel := gpupoolv1.ReadinessSpec{NodeLabels: map[string]string{"feature": "on"}}
	cases := []struct {
		name     string
		arm      func(readyArm) readyArm
		node     *corev1.Node
		fires    bool
		uncordon bool
		last     bool
		state    string
	}{
		{name: "NotReady", node: followNode("n", false, 1)},
		{name: "Ready without its GPUs", node: followNode("n", true, 0)},
		{name: "Ready, a readiness label missing", arm: func(a readyArm) readyArm { a.readiness = readinessLabel; return a }, node: followNode("n", true, 1)},
		{name: "ready for work", node: followNode("n", true, 1), fires: true, uncordon: true, last: true, state: gpupoolv1.StateReady},
		{name: "ready with its readiness label", arm: func(a readyArm) readyArm { a.readiness = readinessLabel; return a },
			node: withLabel(followNode("n", true, 1), "feature", "on"), fires: true, uncordon: true, last: true, state: gpupoolv1.StateReady},
		{name: "ready, but the layout's labels change a readiness label", arm: func(a readyArm) readyArm {
			a.readiness = readinessLabel
			a.meta.Labels["feature"] = "off"
			return a
		}, node: withLabel(followNode("n", true, 1), "feature", "on"), fires: true, state: gpupoolv1.StatePending},
		{name: "uncordon alone", arm: func(a readyArm) readyArm { a.relabel, a.meta = false, nodes.Meta{}; return a },
			node: followNode("n", true, 1), fires: true, uncordon: true, last: true, state: gpupoolv1.StateReady},
		{name: "relabel alone", arm: func(a readyArm) readyArm { a.uncordon = false; return a },
			node: followNode("n", true, 1), fires: true, last: true, state: gpupoolv1.StateReady},
		{name: "ready for work, a warning left on it", node: func() *corev1.Node {
			n := followNode("n", true, 1)
			nodes.SetWarning(n, time.Date(2026, 11, 30, 19, 50, 0, 0, time.UTC), true)
			return n
		}(), fires: true, uncordon: true, last: true, state: gpupoolv1.StateReady},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := followArm("n")
			if tc.arm != nil {
				a = tc.arm(a)
			}
			st, ok := readyStep(a, tc.node)
			if ok != tc.fires {
				t.Fatalf("fires = %v, want %v", ok, tc.fires)
			}
			if !ok {
				return
			}
			if st.uncordon != tc.uncordon || st.last != tc.last {
				t.Errorf("uncordon, last = %v, %v; want %v, %v", st.uncordon, st.last, tc.uncordon, tc.last)
			}
			n := tc.node.DeepCopy()
			st.change(n)
			if a.relabel && !nodes.HasMeta(n, a.meta) {
				t.Errorf("not relabelled: %v", n.Labels)
			}
			if n.Spec.Unschedulable == tc.uncordon {
				t.Errorf("unschedulable = %v after the step, uncordon %v", n.Spec.Unschedulable, tc.uncordon)
			}
			if got := n.Labels[LabelState]; got != tc.state {
				t.Errorf("state label %q, want %q", got, tc.state)
			}
			if n.Labels["keep"] != "me" {
				t.Error("a label gpupool does not own was lost")
			}
			if nodes.HasAnyWarning(n) {
				t.Errorf("a draining-soon warning left after the step: %v %v", n.Annotations, n.Spec.Taints)
			}
			if _, again := readyStep(a, n); again {
				t.Error("the step fires again on the node it wrote")
			}
		})
	}
}

// followWorld is a reconciler on a fake client with pool p (generation 1) and the nodes.
func followWorld(t *testing.T, ns ...*corev1.Node) (*readyFollow, client.Client, *events.FakeRecorder) {
	t.Helper()
	p := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	b := fake.NewClientBuilder().WithScheme(testworld.Scheme()).WithObjects(p)
	for _, n := range ns {
		b = b.WithObjects(n)
	}
	c := b.Build()
	rec := events.NewFakeRecorder(100)
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, Recorder: rec}
	return newReadyFollow(context.Background(), r), c, rec
}

func nodeNow(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// idle waits until no write of the follower is in flight.
func (f *readyFollow) idle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.firing) > 0 {
		f.landed.Wait()
	}
}

// makeReady makes the node Ready with its GPU, as its kubelet and device plugin would.
func makeReady(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := nodeNow(t, c, name)
	n.Status = followNode(name, true, 1).Status
	if err := c.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	return nodeNow(t, c, name)
}

// TestReadyFollowOnce walks the ways a node step can be asked twice, and checks that it
// is made once: the pass claims an arm before the node is ready; the node is ready before
// the pass gets to it (the pass skips it and counts the worker done); the same pass arms
// it again from its older read; the next pass trusts its own read; the node was ready
// before the arm (fired at once); the pool's spec changed (dropped); a deleted pool
// (forget) keeps nothing.
func TestReadyFollowOnce(t *testing.T) {
	t.Run("the pass claims first", func(t *testing.T) {
		f, c, _ := followWorld(t, followNode("n", false, 1))
		seq := f.begin("p")
		f.set("p", seq, []readyArm{followArm("n")})
		if skip, _ := f.claim("p", "n", "", f.begin("p")); skip {
			t.Fatal("the pass skipped a node step nobody made")
		}
		f.consider(makeReady(t, c, "n"))
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable {
			t.Error("the follower wrote a node step the pass had claimed")
		}
	})
	t.Run("the follower first, during a pass", func(t *testing.T) {
		f, c, rec := followWorld(t, followNode("n", false, 1))
		f.set("p", f.begin("p"), []readyArm{followArm("n")})
		seq := f.begin("p") // a pass reads the node, not ready yet
		f.consider(nodeNow(t, c, "n"))
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable {
			t.Fatal("the follower fired on a node not ready")
		}
		ready := makeReady(t, c, "n")
		f.consider(ready)
		f.idle()
		n := nodeNow(t, c, "n")
		if n.Spec.Unschedulable || n.Labels[gpupoolv1.LabelLayout] != "day" || n.Labels[LabelState] != gpupoolv1.StateReady {
			t.Fatalf("not relabelled and uncordoned: %v unschedulable=%v", n.Labels, n.Spec.Unschedulable)
		}
		if skip, done := f.claim("p", "n", "", seq); !skip || !done {
			t.Errorf("the pass that read the node before the write: skip, done = %v, %v; want true, true", skip, done)
		}
		if !f.madeDuring("p", "n", "", seq) {
			t.Error("that pass would write the node's state label from its older read")
		}
		f.set("p", seq, []readyArm{followArm("n")}) // that pass's plan still waits for the node
		f.consider(n)
		f.idle()
		if got := len(rec.Events); got != 2 {
			t.Errorf("%d events, want Relabelled and Uncordoned once", got)
		}
		next := f.begin("p")
		if skip, _ := f.claim("p", "n", n.ResourceVersion, next); skip {
			t.Error("the next pass, which read the node after the write, skips its own step")
		}
		if skip, done := f.claim("p", "n", ready.ResourceVersion, next); !skip || !done {
			t.Errorf("the next pass, whose cache showed the node as the write found it: skip, done = %v, %v; want true, true", skip, done)
		}
		f.set("p", next, nil)
		f.set("p", f.begin("p"), nil)
		if len(f.arms) != 0 {
			t.Errorf("arms left two passes that armed nothing after the write: %v", f.arms)
		}
	})
	t.Run("the next pass's arms", func(t *testing.T) {
		f, c, _ := followWorld(t, followNode("a", false, 1), followNode("b", false, 1))
		f.set("p", f.begin("p"), []readyArm{followArm("a"), followArm("b")})
		a := followArm("a")
		a.uncordon = false
		f.set("p", f.begin("p"), []readyArm{a})
		if len(f.arms) != 1 || f.arms["a"] == nil || f.arms["a"].uncordon {
			t.Fatalf("arms after the next pass: %v", f.arms)
		}
		f.consider(makeReady(t, c, "b"))
		f.consider(makeReady(t, c, "a"))
		f.idle()
		if nodeNow(t, c, "b").Labels[gpupoolv1.LabelLayout] != "" {
			t.Error("an arm the next pass did not renew fired")
		}
		if n := nodeNow(t, c, "a"); n.Labels[gpupoolv1.LabelLayout] != "day" || !n.Spec.Unschedulable {
			t.Errorf("the renewed arm did not fire as the next pass armed it: %v unschedulable=%v", n.Labels, n.Spec.Unschedulable)
		}
	})
	t.Run("armed at the power-on", func(t *testing.T) {
		// The node still reads Ready from before its VM went down.
		f, c, _ := followWorld(t, followNode("n", true, 1))
		a := followArm("n")
		a.afterPowerOn = true
		f.set("p", f.begin("p"), []readyArm{a})
		f.consider(nodeNow(t, c, "n"))
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable {
			t.Fatal("a node Ready from before the power-on was relabelled")
		}
		down := nodeNow(t, c, "n")
		down.Status = followNode("n", false, 1).Status
		if err := c.Status().Update(context.Background(), down); err != nil {
			t.Fatal(err)
		}
		f.consider(nodeNow(t, c, "n"))
		f.consider(makeReady(t, c, "n"))
		f.idle()
		if n := nodeNow(t, c, "n"); n.Spec.Unschedulable || n.Labels[LabelState] != gpupoolv1.StateReady {
			t.Errorf("Ready after NotReady: not uncordoned and ready (%v, %v)", n.Spec.Unschedulable, n.Labels)
		}
	})
	t.Run("read not Ready by the arming pass, Ready before the arm", func(t *testing.T) {
		// The pass read the node not Ready after its VM went down; the VM came up before
		// the pass armed it, so the follower never sees the node not Ready itself.
		f, c, _ := followWorld(t, followNode("n", true, 1))
		a := followArm("n")
		a.afterPowerOn, a.readNotReady = true, true
		f.set("p", f.begin("p"), []readyArm{a})
		f.idle()
		if n := nodeNow(t, c, "n"); n.Spec.Unschedulable || n.Labels[LabelState] != gpupoolv1.StateReady {
			t.Errorf("a node the pass read not Ready, Ready when armed, waits for the next pass (%v, %v)", n.Spec.Unschedulable, n.Labels)
		}
	})
	t.Run("read not Ready by the next pass, Ready before its arm", func(t *testing.T) {
		// The first pass read the node Ready from before its VM went down; the next one
		// read it not Ready, and it came up before that pass renewed the arm.
		f, c, _ := followWorld(t, followNode("n", true, 1))
		a := followArm("n")
		a.afterPowerOn = true
		f.set("p", f.begin("p"), []readyArm{a})
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable {
			t.Fatal("a node Ready from before the power-on was relabelled")
		}
		a.readNotReady = true
		f.set("p", f.begin("p"), []readyArm{a})
		f.idle()
		if n := nodeNow(t, c, "n"); n.Spec.Unschedulable || n.Labels[LabelState] != gpupoolv1.StateReady {
			t.Errorf("the renewed arm did not fire (%v, %v)", n.Spec.Unschedulable, n.Labels)
		}
	})
	t.Run("ready before the arm", func(t *testing.T) {
		f, c, _ := followWorld(t, followNode("n", true, 1))
		f.set("p", f.begin("p"), []readyArm{followArm("n")})
		f.idle()
		if n := nodeNow(t, c, "n"); n.Spec.Unschedulable {
			t.Error("a node ready when armed waits for an update")
		}
	})
	t.Run("the spec changed", func(t *testing.T) {
		f, c, _ := followWorld(t, followNode("n", true, 1))
		a := followArm("n")
		a.gen = 0 // armed by a pass of an older spec
		f.set("p", f.begin("p"), []readyArm{a})
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable {
			t.Error("the follower acted on the plan of an older spec")
		}
		if skip, _ := f.claim("p", "n", "", f.begin("p")); skip {
			t.Error("a dropped step is skipped by the pass")
		}
	})
	t.Run("forget", func(t *testing.T) {
		f, c, _ := followWorld(t, followNode("n", false, 1))
		f.set("p", f.begin("p"), []readyArm{followArm("n")})
		f.forget("p")
		f.consider(makeReady(t, c, "n"))
		f.idle()
		if n := nodeNow(t, c, "n"); !n.Spec.Unschedulable || len(f.arms) != 0 || len(f.passes) != 0 {
			t.Error("a forgotten pool's arm fired or stayed")
		}
	})
}

// TestReadyFollowConcurrently runs passes (begin, set, claim, madeDuring, settle), node
// events (consider) and a deletion (forget) of two pools at once, for the race detector,
// and checks that every node ends written once at most and nothing stays armed.
func TestReadyFollowConcurrently(t *testing.T) {
	var ns []*corev1.Node
	for _, name := range []string{"a", "b", "c", "d"} {
		ns = append(ns, followNode(name, false, 1))
	}
	f, c, rec := followWorld(t, ns...)
	arms := func(pool string, names ...string) []readyArm {
		var out []readyArm
		for _, n := range names {
			a := followArm(n)
			a.pool = pool
			out = append(out, a)
		}
		return out
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		for range 50 {
			seq := f.begin("p")
			f.set("p", seq, arms("p", "a", "b"))
			f.settle("p")
			f.claim("p", "a", "", seq)
			f.madeDuring("p", "b", "", seq)
		}
	}()
	go func() {
		defer wg.Done()
		for range 50 {
			f.set("q", f.begin("q"), arms("q", "c", "d"))
		}
		f.forget("q")
	}()
	var readyErr error
	go func() {
		defer wg.Done()
		for _, name := range []string{"a", "b", "c", "d"} {
			var n corev1.Node
			if readyErr = c.Get(context.Background(), client.ObjectKey{Name: name}, &n); readyErr != nil {
				return
			}
			n.Status = followNode(name, true, 1).Status
			if readyErr = c.Status().Update(context.Background(), &n); readyErr != nil {
				return
			}
			f.consider(&n)
		}
	}()
	wg.Wait()
	if readyErr != nil {
		t.Fatal(readyErr)
	}
	f.forget("p")
	f.idle()
	if len(f.arms) != 0 || len(f.firing) != 0 {
		t.Errorf("left after both pools were forgotten: arms %v, writes in flight %v", f.arms, f.firing)
	}
	if got := len(rec.Events); got > 8 {
		t.Errorf("%d events for 4 nodes, each relabelled and uncordoned once at most", got)
	}
}
