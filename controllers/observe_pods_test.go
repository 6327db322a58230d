package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpupool/gpupool/internal/world"
)

// TestPodsOnNodesReadAtOnce: the cordoned nodes whose pods no watch holds yet (VMs powered
// on since the last pass) are listed from the API server podReadsAtOnce at a time, not
// one after the other, for every count of nodes around that bound; each node gets its own
// pods, and a list that fails fails for its node only.
func TestPodsOnNodesReadAtOnce(t *testing.T) {
	for _, n := range []int{1, podReadsAtOnce - 1, podReadsAtOnce, 3*podReadsAtOnce + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var objs []client.Object
			w := &world.World{Nodes: map[string]*corev1.Node{}}
			var vms []string
			for i := range n {
				vm, node := fmt.Sprintf("vm-%d", i), fmt.Sprintf("node-%d", i)
				vms = append(vms, vm)
				w.Nodes[vm] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
				for j := range i % 3 { // 0, 1 or 2 pods: each node's own count
					objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d-%d", i, j), Namespace: "ml"},
						Spec: corev1.PodSpec{NodeName: node}})
				}
			}
			failing := fmt.Sprintf("node-%d", n/2)
			// All lists wait until as many as can be in flight at once are: one after
			// the other, the first would wait for ever (the guard ends it).
			want := min(n, podReadsAtOnce)
			var mu sync.Mutex
			inFlight, most := 0, 0
			full := make(chan struct{})
			var once sync.Once
			guard, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a guard against a hang, not a measure
			defer cancel()
			reader := interceptor.NewClient(withPodIndexes(fake.NewClientBuilder()).WithObjects(objs...).Build(), interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					mu.Lock()
					inFlight++
					most = max(most, inFlight)
					if inFlight == want {
						once.Do(func() { close(full) })
					}
					mu.Unlock()
					defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
					select {
					case <-full:
					case <-guard.Done():
						return errors.New("the lists were not sent at once")
					}
					lo := (&client.ListOptions{}).ApplyOptions(opts)
					if lo.FieldSelector != nil && lo.FieldSelector.String() == podNodeNameField+"="+failing {
						return errors.New("refused")
					}
					return c.List(ctx, list, opts...)
				}})
			r := &GPUPoolProfileReconciler{Client: reader, APIReader: reader, nodePods: newNodePods(context.Background(), nil)}
			pods, errs := r.podsOnNodes(context.Background(), w, vms)
			if most > podReadsAtOnce {
				t.Errorf("%d lists at once, want at most %d", most, podReadsAtOnce)
			}
			for i, vm := range vms {
				node := w.Nodes[vm].Name
				if node == failing {
					if errs[i] == nil {
						t.Errorf("%s: the failed list is not reported", node)
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("%s: %v", node, errs[i])
				}
				if len(pods[i]) != i%3 {
					t.Errorf("%s: %d pods, want %d", node, len(pods[i]), i%3)
				}
				for _, p := range pods[i] {
					if p.Spec.NodeName != node {
						t.Errorf("%s was given pod %s of %s", node, p.Name, p.Spec.NodeName)
					}
				}
			}
		})
	}
}
