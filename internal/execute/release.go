package execute

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

// ReleaseRemoved gives back the nodes of VMs that were removed from the spec: once their
// last task has finished, everything gpupool put on the node (cordon, labels, taints)
// and on its Cluster API objects is removed, and the worker's status entry forgets the
// node (Record drops the entry then). get reads a node by name. It returns the errors,
// for the pass's step errors.
func (e *Executor) ReleaseRemoved(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, get func(context.Context, string) (*corev1.Node, error)) []string {
	inSpec := map[string]bool{}
	for _, id := range world.PoolVMs(&pool.Spec) {
		inSpec[id] = true
	}
	var errs []string
	for i := range pool.Status.Workers {
		ws := &pool.Status.Workers[i]
		if inSpec[ws.VM] || ws.Task != nil || ws.Node == "" {
			continue
		}
		n, err := get(ctx, ws.Node)
		if apierrors.IsNotFound(err) {
			ws.Node = ""
			continue
		}
		if err == nil {
			err = ReleaseNode(ctx, e.Nodes, n)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("releasing node %s of VM %s, removed from the spec: %v", ws.Node, ws.VM, err))
			continue
		}
		e.Events.Node(n, corev1.EventTypeNormal, "NodeReleased", fmt.Sprintf("VM %s was removed from the spec: released node %s", ws.VM, ws.Node))
		ws.Node = ""
	}
	return errs
}

// ReleaseNode removes what gpupool put on a node and on its Cluster API objects.
func ReleaseNode(ctx context.Context, nw Nodes, n *corev1.Node) error {
	if err := nw.Release(ctx, n); err != nil {
		return err
	}
	if n.Labels[gpupoolv1.LabelPool] == "" && !nodes.HasMarks(n) && n.Annotations[gpupoolv1.AnnotationCordoned] == "" &&
		n.Annotations[gpupoolv1.AnnotationManagedLabels] == "" && n.Annotations[gpupoolv1.AnnotationManagedTaints] == "" {
		return nil
	}
	return nw.Patch(ctx, n, nodes.RemoveMeta)
}
