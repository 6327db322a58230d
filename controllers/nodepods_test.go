package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
