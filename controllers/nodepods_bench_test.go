package controllers

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BenchmarkNodePodsWatches measures what a pool's node costs the manager at rest (issue
// 37: RSS and CPU at rest at 64 hosts, 1,024 watched nodes): on the suite's API server,
// 256 nodes with two pods each are tracked; once every node's list is in, each pod is
// changed once (as a kubelet's status updates reach each watch: the event goes through
// the watch's decoder), and it reports the goroutines, the stack and the live heap per
// watched node. Run with
// `go test ./controllers -run '^$' -bench NodePodsWatches -benchtime 3x`.
func BenchmarkNodePodsWatches(b *testing.B) {
	const nodes, prefix = 256, "npb-"
	ctx := context.Background()
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%snode-%d", prefix, i)
	}
	// The framework calls a benchmark more than once (b.N = 1 first): the pods are made
	// by the first call.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "apps"}}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
		if err := k8s.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		for i, n := range names {
			for j := range 2 {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d-%d", i, j), Namespace: ns.Name},
					Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
				if err := k8s.Create(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		}
	} else if err != nil {
		b.Fatal(err)
	}
	// As SetupWithManager makes it: client-go's typed clients ask for protobuf.
	cs, err := kubernetes.NewForConfig(operatorConfig)
	if err != nil {
		b.Fatal(err)
	}
	var goroutines, stack, heap float64
	b.ResetTimer()
	for i := range b.N {
		g0, s0, h0 := memNow()
		wctx, cancel := context.WithCancel(ctx)
		np := newNodePods(wctx, cs)
		np.track("lab", names)
		waitPods(b, np, names, func(pods []corev1.Pod) bool { return len(pods) == 2 })
		b.StopTimer()
		round := fmt.Sprint(i)
		for n := range names {
			for j := range 2 {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d-%d", n, j), Namespace: ns.Name}}
				patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"round":"`+round+`"}}}`))
				if err := k8s.Patch(ctx, p, patch); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		waitPods(b, np, names, func(pods []corev1.Pod) bool {
			return len(pods) == 2 && pods[0].Labels["round"] == round && pods[1].Labels["round"] == round
		})
		g1, s1, h1 := memNow()
		goroutines += float64(g1 - g0)
		stack += float64(s1) - float64(s0)
		heap += float64(h1) - float64(h0)
		np.track("lab", nil)
		cancel()
		for try := 0; runtime.NumGoroutine() > g0+10; try++ {
			if try > 400 { // a guard: the watches end within milliseconds of their context
				b.Fatalf("%d goroutines left after the watches stopped, %d before they started", runtime.NumGoroutine(), g0)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	per := float64(b.N * nodes)
	b.ReportMetric(goroutines/per, "goroutines/node")
	b.ReportMetric(stack/per, "stack-B/node")
	b.ReportMetric(heap/per, "heap-B/node")
}

// waitPods waits until every node's pods, as its watch holds them, are as want says.
func waitPods(b *testing.B, np *nodePods, names []string, want func([]corev1.Pod) bool) {
	for _, n := range names {
		for try := 0; ; try++ {
			if pods, ok := np.list(n); ok && want(pods) {
				break
			}
			if try > 1200 { // a guard against a hang: lists and events take milliseconds
				b.Fatalf("node %s's pods not as wanted from its watch", n)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
}

// memNow is the goroutines, the stack bytes and the live heap bytes after two
// collections (the second frees what pools, sync.Pool's, held through the first).
func memNow() (int, uint64, uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.StackInuse, m.HeapAlloc
}
