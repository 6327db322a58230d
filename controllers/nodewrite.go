package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/nodes"
)

// patchNode applies change to a node with a merge patch that carries the node's
// resourceVersion, so that a taint or label another controller set meanwhile is never
// overwritten: on a conflict the node is read again and the change applied again. A
// patch that fails leaves n as it was last read, so that the rest of the pass does not
// take the change for made (a state label carried by a refused cordon is written again
// by publishMarks). It first waits for the marks a batch of the pool's last pass may be
// writing to the node (stateBatches), so that they land before this change.
func (r *GPUPoolProfileReconciler) patchNode(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	r.states.waitNode(n.Name)
	return r.patchNodeNow(ctx, n, change)
}

// patchNodeNow is patchNode without the wait: the state batches' own writes.
//
// n may be a pass's node as observe listed it: a shallow copy of the cache's node, whose
// labels, annotations, taints and status are the cache's own (client.UnsafeDisableDeepCopy:
// a pass copies no node it does not write). A change writes only a node's metadata and
// spec, so those are made n's own first; writing into the shared ones would change the
// node every reader of the cache sees. The status stays the one the pass read, shared and
// read only, also after the patch: the pass decided on it, and the API server's answer's
// status (its capacity, allocatable and conditions are most of a node) is let go rather
// than held by every node a pass patched (1,024 cordons at 64 hosts).
func (r *GPUPoolProfileReconciler) patchNodeNow(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	const attempts = 5
	read := n.Status
	*n = *nodes.WriteCopy(n)
	for i := 0; ; i++ {
		before := nodes.WriteCopy(n)
		change(n)
		err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			// The API server's answer is the whole node: the pass holds it as the cache
			// would (its managedFields alone are kilobytes a node), with the status read.
			_, _ = transformNode(n)
			n.Status = read
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
		_, _ = transformNode(n)
		read = n.Status // the node as it is now: read again, the pass's own
	}
}
