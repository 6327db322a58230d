package controllers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestNodePodsWatchesThePoolsNodesOnly: on a real API server, the pods of a tracked node
// are listed from its watch (lean), another node's are not held; a pod deleted there
// wakes the node's pools (the pass and the demand watch); a node no pool tracks any more
// is no longer watched.
func TestNodePodsWatchesThePoolsNodesOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := kubernetes.NewForConfig(operatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "npw-"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "apps"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "BIG", Value: "dropped by the transform"}}}}}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
		return p
	}
	mine := pod("mine", prefix+"node-a")
	pod("other", prefix+"node-b")

	np := newNodePods(ctx, cs)
	np.track("lab", []string{prefix + "node-a"})
	var got []corev1.Pod
	for range 600 { // a guard against a hang: the list syncs in milliseconds
		var ok bool
		if got, ok = np.list(prefix + "node-a"); ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 1 || got[0].Name != "mine" || len(got[0].Spec.Containers) != 0 {
		t.Fatalf("pods of node-a from its watch: %+v, want only the lean pod mine (no container asks for an extended resource)", got)
	}
	if _, ok := np.list(prefix + "node-b"); ok {
		t.Fatal("node-b, which no pool tracks, is watched")
	}
	if err := k8s.Delete(ctx, mine, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan event.GenericEvent{np.wake, np.demand} {
		select {
		case e := <-ch:
			if e.Object.GetName() != "lab" {
				t.Fatalf("woke %s, want the node's pool", e.Object.GetName())
			}
		case <-time.After(30 * time.Second): // a guard, not a measure
			t.Fatal("a pod deleted on a tracked node woke no pool")
		}
	}
	np.track("lab", nil)
	if n := np.watched(); n != 0 {
		t.Fatalf("%d nodes still watched after the pool let them go", n)
	}
}

// TestParkedNodesPodsNotWatched (issue 37, at rest): a pool watches the pods of its
// running VMs' nodes only. By day the four day nodes are watched and not the parked
// night VM's; by night only the night node; by day again the four day nodes. The
// switches drain through those watches (a cordoned running node's pods are read from
// its watch) and complete as without them.
func TestParkedNodesPodsNotWatched(t *testing.T) {
	h := newHarness(t, "npp-")
	cs, err := kubernetes.NewForConfig(operatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	np := newNodePods(h.ctx, cs)
	h.reconciler().nodePods = np
	watchedNodes := func() []string {
		np.mu.Lock()
		defer np.mu.Unlock()
		return slices.Sorted(maps.Keys(np.watches))
	}
	want := func(when string, vms ...string) {
		t.Helper()
		var names []string
		for _, vm := range vms {
			names = append(names, h.prefix+vm)
		}
		if got := watchedNodes(); !slices.Equal(got, names) {
			t.Errorf("%s: the pods of nodes %v are watched, want %v (the running VMs' nodes)", when, got, names)
		}
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	want("by day", "day-1", "day-2", "day-3", "day-4")
	h.clock.SetTime(monday1950)
	h.converge(pool.Name, "night", 60)
	want("by night", "night-1")
	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 60)
	want("by day again", "day-1", "day-2", "day-3", "day-4")
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	h.reconcile(pool.Name)
	if n := np.watched(); n != 0 {
		t.Errorf("after the pool was deleted %d nodes' pods are watched, want none", n)
	}
}

// TestNodePodsDrainWatch: on a real API server, nodePods as the executor's DrainWatch
// (for the suspends after drains) reports a node drained only once its pods are gone but
// those a drain leaves alone (a DaemonSet's): a terminating pod still counts; a node whose
// pods are not watched is not known. OnChange calls its function when a pod goes or the
// node's watch stops (at once when the node is not watched), never once stopped.
func TestNodePodsDrainWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := kubernetes.NewForConfig(operatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "npd-"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "apps"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := func(name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if mutate != nil {
			mutate(p)
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = k8s.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			_ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0))
		})
		return p
	}
	daemon := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "d5", Controller: ptr.To(true)}}
	}
	a, b, c := prefix+"node-a", prefix+"node-b", prefix+"node-c"
	app := pod("app", a, nil)
	slow := pod("slow", a, func(p *corev1.Pod) { p.Finalizers = []string{"test.gpupool.dev/keep"} })
	pod("agent-a", a, daemon)
	pod("agent-b", b, daemon)
	pod("app-c", c, nil)

	np := newNodePods(ctx, cs)
	np.track("lab", []string{a, b, c})
	for _, n := range []string{a, b, c} {
		for i := 0; ; i++ { // a guard against a hang: the lists sync in milliseconds
			if _, ok := np.list(n); ok {
				break
			}
			if i == 600 {
				t.Fatalf("the pods of %s never listed", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	drainedNow := func(node string) (bool, bool) { return np.Drained(node) }
	if d, k := drainedNow(a); d || !k {
		t.Fatalf("node-a: drained %v known %v, want false, true (two pods)", d, k)
	}
	if d, k := drainedNow(b); !d || !k {
		t.Fatalf("node-b: drained %v known %v, want true, true (a DaemonSet's pod only)", d, k)
	}
	if _, k := drainedNow(prefix + "not-watched"); k {
		t.Fatal("a node not watched is known")
	}
	// changed subscribes to a node's changes: the channel is closed when fn is called.
	changed := func(node string) (<-chan struct{}, func()) {
		ch := make(chan struct{})
		var once sync.Once
		stop := np.OnChange(node, func() { once.Do(func() { close(ch) }) })
		return ch, stop
	}
	guard := time.After(time.Minute) // a guard, not a measure
	await := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-guard:
			t.Fatalf("%s: never called", what)
		}
	}
	stoppedA, stopA := changed(a)
	stopA()
	firstA, _ := changed(a)
	for _, p := range []*corev1.Pod{app, slow} {
		if err := k8s.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	await(firstA, "OnChange(node-a) when app went")
	select {
	case <-stoppedA:
		t.Fatal("a stopped OnChange was called")
	default:
	}
	for i := 0; ; i++ { // until the watch shows app gone and slow terminating
		pods, _ := np.list(a)
		if len(pods) == 2 && slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == "slow" && p.DeletionTimestamp != nil }) {
			break
		}
		if i == 600 {
			t.Fatalf("pods of node-a: %v", pods)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d, _ := drainedNow(a); d {
		t.Fatal("node-a drained with a pod terminating")
	}
	secondA, _ := changed(a)
	if err := k8s.Patch(ctx, slow, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	await(secondA, "OnChange(node-a) when slow went")
	if d, k := drainedNow(a); !d || !k {
		t.Fatalf("node-a: drained %v known %v once its last pod went", d, k)
	}

	firstC, _ := changed(c)
	np.track("lab", nil) // node-c's watch stops while its pod is still there
	await(firstC, "OnChange(node-c) when its watch stopped")
	notWatched, _ := changed(c)
	await(notWatched, "OnChange(node-c) once it is not watched")
	if _, k := drainedNow(c); k {
		t.Fatal("node-c is known once its watch stopped")
	}
	select {
	case <-stoppedA:
		t.Fatal("a stopped OnChange was called")
	default:
	}
}
