package controllers

import (
	"context"
	"maps"
	"slices"
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

// TestNodePodsWaitDrained: on a real API server, waitDrained (the executor's Drained, for
// the suspends after drains) reports a node drained only once its pods are gone but
// those a drain leaves alone (a DaemonSet's): a terminating pod still counts. It returns
// true the moment the last pod goes, false at once for a node whose pods are not watched,
// and false when the node's watch stops while it waits.
func TestNodePodsWaitDrained(t *testing.T) {
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
	now, stop := context.WithCancel(ctx)
	stop()
	drainedNow := func(nodes ...string) bool { return np.waitDrained(now, nodes) } // never waits
	if drainedNow(a) || !drainedNow(b) || drainedNow(prefix+"not-watched") {
		t.Fatalf("drained now: a %v (want false: two pods), b %v (want true: a DaemonSet's only), a node not watched %v (want false)",
			drainedNow(a), drainedNow(b), drainedNow(prefix+"not-watched"))
	}

	wait, stopWait := context.WithTimeout(ctx, time.Minute) // a guard, not a measure
	defer stopWait()
	done := make(chan bool, 1)
	go func() { done <- np.waitDrained(wait, []string{b, a}) }()
	for _, p := range []*corev1.Pod{app, slow} {
		if err := k8s.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
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
	select {
	case got := <-done:
		t.Fatalf("waitDrained returned %v with a pod terminating on node-a", got)
	default:
	}
	if drainedNow(a) {
		t.Fatal("node-a drained with a pod terminating")
	}
	if err := k8s.Patch(ctx, slow, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	if got := <-done; !got {
		t.Fatal("waitDrained returned false once node-a's last pod went")
	}

	go func() { done <- np.waitDrained(wait, []string{c}) }()
	np.track("lab", nil) // node-c's watch stops while its pod is still there
	if got := <-done; got {
		t.Fatal("waitDrained returned true for a node whose watch stopped")
	}
}
