package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cluster is what a drain needs of the cluster: the pods bound to a node, the eviction
// API, and a plain delete for drain.onTimeout: Force. It is this narrow so that a drain
// can be tested against pods held in memory, and reused without the reconciler.
type Cluster interface {
	// PodsOnNode lists the pods bound to the node. They may be the cache's own objects
	// (shared, not copied): read them, never change them.
	PodsOnNode(ctx context.Context, node string) ([]corev1.Pod, error)
	// Evict asks the eviction API to evict the pod, which honours its
	// PodDisruptionBudgets. The error is the API server's: a refusal is a 429.
	Evict(ctx context.Context, pod *corev1.Pod, ev *policyv1.Eviction) error
	// Delete deletes the pod with the grace period given (nil: the pod's own).
	Delete(ctx context.Context, pod *corev1.Pod, gracePeriodSeconds *int64) error
}

// PodNodeNameField is the field FromClient lists a node's pods by: a field selector the
// API server serves for pods (a cache would need an index under that name).
const PodNodeNameField = "spec.nodeName"

// FromClient is the Cluster of a controller-runtime client.
func FromClient(c client.Client) Cluster { return clientCluster{c} }

type clientCluster struct{ c client.Client }

func (cc clientCluster) PodsOnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	return PodsOnNodeFrom(ctx, cc.c, node)
}

// PodsOnNodeFrom lists the pods bound to node from r, by PodNodeNameField.
func PodsOnNodeFrom(ctx context.Context, r client.Reader, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	// A drain and demand only read the pods: no deep copy of every pod on the node per
	// pass (a client straight to the API server ignores the option).
	if err := r.List(ctx, &pods, client.MatchingFields{PodNodeNameField: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	return pods.Items, nil
}

func (cc clientCluster) Evict(ctx context.Context, pod *corev1.Pod, ev *policyv1.Eviction) error {
	return cc.c.SubResource("eviction").Create(ctx, pod, ev)
}

func (cc clientCluster) Delete(ctx context.Context, pod *corev1.Pod, gracePeriodSeconds *int64) error {
	return cc.c.Delete(ctx, pod, &client.DeleteOptions{GracePeriodSeconds: gracePeriodSeconds})
}
