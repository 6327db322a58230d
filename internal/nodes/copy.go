package nodes

import corev1 "k8s.io/api/core/v1"

// WriteCopy is a copy of n to change and write: its metadata and spec its own, its
// status n's, shared and read only. gpupool writes a node's metadata and spec, never its
// status, and a node's status (capacity, allocatable, conditions) is most of it: the
// copies a switch hands to the work that outlives its pass (1,024 at 64 hosts) need not
// hold one each.
func WriteCopy(n *corev1.Node) *corev1.Node {
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: *n.ObjectMeta.DeepCopy(), Spec: *n.Spec.DeepCopy(), Status: n.Status}
}
