package nodes

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The marks are what a pool puts on any node it watches, worker or not: the state label
// and the draining-soon warning, with their owner (AnnotationMarkedBy). The owner record
// tells which pool may take them off, so that two pools never strip each other's.

// SetMarksOwner records on the node that the pool put its marks there.
func SetMarksOwner(n *corev1.Node, pool string) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[gpupoolv1.AnnotationMarkedBy] = pool
}

// SetState sets the node's state label (LabelState) and records the pool as the owner
// of its marks.
func SetState(n *corev1.Node, state, pool string) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[gpupoolv1.LabelState] = state
	SetMarksOwner(n, pool)
}

// StripMarks takes the state label, the draining-soon warning and their owner off a
// node, and nothing else (a parked node keeps its parked label, taint and cordon).
func StripMarks(n *corev1.Node) {
	delete(n.Labels, gpupoolv1.LabelState)
	SetWarning(n, time.Time{}, false)
	delete(n.Annotations, gpupoolv1.AnnotationMarkedBy)
}

// HasMarks tells whether the node carries any of the marks, so that a node without
// them is not patched for nothing.
func HasMarks(n *corev1.Node) bool {
	_, state := n.Labels[gpupoolv1.LabelState]
	_, owner := n.Annotations[gpupoolv1.AnnotationMarkedBy]
	return state || owner || HasAnyWarning(n)
}

// MarksOwnedBy tells whether a node's marks are the pool's: the pool it names as their
// owner; a node marked before owners were recorded is the pool's when it carries the
// pool's label, or when workerNodes (the nodes the pool's status names as its workers')
// has it and no other pool labels it.
func MarksOwnedBy(n *corev1.Node, pool string, workerNodes map[string]bool) bool {
	if owner := n.Annotations[gpupoolv1.AnnotationMarkedBy]; owner != "" {
		return owner == pool
	}
	if p := n.Labels[gpupoolv1.LabelPool]; p != "" {
		return p == pool
	}
	return workerNodes[n.Name]
}

// MarkedBy are the nodes among nodes whose marks are the pool's (MarksOwnedBy).
func MarkedBy(nodes []corev1.Node, pool string, workerNodes map[string]bool) []*corev1.Node {
	var out []*corev1.Node
	for i := range nodes {
		if n := &nodes[i]; MarksOwnedBy(n, pool, workerNodes) {
			out = append(out, n)
		}
	}
	return out
}
