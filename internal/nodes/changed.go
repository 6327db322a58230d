package nodes

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Changed tells whether an update from o to n changes what a pool reads of a node:
// readiness (condition statuses, allocatable resources), cordon, providerID, labels, the
// taints gpupool manages or a layout may set (not the node.kubernetes.io/ taints the
// node lifecycle controller keeps moving on a parked, NotReady node), gpupool's own
// annotations and the Cluster API machine ones. The reconciler's node watch lets only
// such updates through: heartbeats and everything else would only wake every pool for
// nothing.
//
// A node gpupool marked parked that is not Ready does not wake the pools by its
// readiness, conditions or allocatable: its VM is parked or being parked, and the node
// lifecycle controller marks it NotReady some 40 s after the VM went down, the 256 or
// 1,024 parked nodes of a 64-host switch one after the other, each waking a pass that
// read vCenter for nothing (the minute after a switch, pprof). A parked node that
// becomes Ready again (its VM powered on by someone else) wakes them.
func Changed(o, n *corev1.Node) bool {
	if o.Spec.Unschedulable != n.Spec.Unschedulable || o.Spec.ProviderID != n.Spec.ProviderID ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(plannedTaints(o), plannedTaints(n)) ||
		!equality.Semantic.DeepEqual(relevantAnnotations(o), relevantAnnotations(n)) {
		return true
	}
	if o.Labels[gpupoolv1.LabelState] == gpupoolv1.StateParked && !Ready(n) {
		return false // the labels are the same: n is parked too
	}
	return Ready(o) != Ready(n) ||
		!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(conditionStatuses(o), conditionStatuses(n))
}

// conditionStatuses are the node's condition statuses by type, without the heartbeats:
// readiness may name any condition (spec.readiness.nodeConditions). Of two conditions
// of one type the first counts, as for readiness (conditionStatus); one without a
// status counts as missing (neither is True).
func conditionStatuses(n *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := make(map[corev1.NodeConditionType]corev1.ConditionStatus, len(n.Status.Conditions))
	for _, c := range n.Status.Conditions {
		if _, seen := out[c.Type]; !seen {
			out[c.Type] = c.Status
		}
	}
	for typ, st := range out {
		if st == "" {
			delete(out, typ)
		}
	}
	return out
}

// plannedTaints are the node's taints but those the node lifecycle controller and the
// cloud provider manage.
func plannedTaints(n *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range n.Spec.Taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") && !strings.HasPrefix(t.Key, "node.cloudprovider.kubernetes.io/") {
			out = append(out, t)
		}
	}
	return out
}

// relevantAnnotations are the node's gpupool.dev/ annotations and the Cluster API ones
// that name its Machine.
func relevantAnnotations(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for k, v := range n.Annotations {
		if RelevantAnnotation(k) {
			out[k] = v
		}
	}
	return out
}

// RelevantAnnotation tells whether gpupool reads a node's annotation k: its own
// (gpupool.dev/) and the Cluster API ones that name the node's Machine. The manager's
// cache keeps no other.
func RelevantAnnotation(k string) bool {
	return strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") || k == clusterv1.MachineAnnotation || k == clusterv1.ClusterNamespaceAnnotation
}
