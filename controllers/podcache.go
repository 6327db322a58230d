package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// The manager caches every pod of the cluster (a drain lists a node's pods, demand the
// pending ones), so what it holds of a pod is what its memory grows with: leanPod keeps
// only what the drain (internal/drain) and demand (internal/demand, watches.go) read, and the
// two field indexes below let them list the few pods they need instead of every pod.
// docs/performance.md, "Memory against the cluster's pods", has the measurements.

// podPendingResourceField indexes the pods not bound to a node, and not finished, by the
// extended resources they request: demand lists the pods pending for the pool's GPU
// resource through it, not the cluster's pods.
const podPendingResourceField = "gpupool.dev/pending-extended-resource"

// keptPodAnnotations are the pod annotations gpupool reads; the others are dropped from
// the cache. A new annotation read of a pod must be added here (TestLeanPodKeeps fails
// otherwise for the pods of its table).
var keptPodAnnotations = []string{gpupoolv1.AnnotationDoNotDisrupt, corev1.MirrorPodAnnotationKey}

// CacheOptions are the manager cache's options: managedFields stripped from every
// object, only the pods not bound to a node held, lean (leanPod), and nodes without what
// kubelets fill in and gpupool never reads (transformNode).
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			// Only the pods no node has yet (demand's pending pods): the pods of the
			// pools' nodes are watched node by node (nodePods), and no other bound pod
			// of the cluster is held.
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", ""), Transform: transformPod},
			// Every node of the cluster is held (any may be a pool VM's, by
			// spec.providerID): what grows with the cluster is kept small.
			&corev1.Node{}: {Transform: transformNode},
		},
	}
}

// transformNode drops from a cached node what gpupool never reads and a kubelet fills
// in: the images the node holds (up to 50 by default, most of a real node's status),
// the volumes in use and attached, the system info, addresses, daemon endpoints, runtime
// handlers, features and config, and managedFields (the default transform, which a
// transform of the type's own replaces); the capacity, the allocatable resources but the
// extended ones (readiness reads the GPU resource, which admission requires to be
// extended), and of each condition all but its type and status (readiness and
// nodes.Changed read no more; the heartbeats and messages are most of a condition).
// Every node of the cluster is held (1,281 at 64 hosts), and what is dropped here is
// dropped from every copy a node write, or the work past a pass, makes of one too. A
// node is written by patches computed against the cached copy (nodewrite.go), which
// leave out what the copy lacks, and status is a subresource gpupool never writes:
// nothing dropped is written back.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	// The annotations stay whole, though gpupool reads only its own and Cluster API's:
	// a node write is a merge patch against this copy, and a copy holding only gpupool's
	// would send "annotations": null when a write removes the last of them (a release, an
	// uncordon), which deletes every annotation of the node (kubeadm's, the CNI's).
	st := &n.Status
	st.Images, st.VolumesInUse, st.VolumesAttached = nil, nil, nil
	st.NodeInfo, st.Addresses, st.DaemonEndpoints = corev1.NodeSystemInfo{}, nil, corev1.NodeDaemonEndpoints{}
	st.RuntimeHandlers, st.Features, st.Config, st.DeclaredFeatures = nil, nil, nil, nil
	st.Capacity, st.Allocatable = nil, extendedOnly(st.Allocatable)
	if st.Conditions != nil {
		// A new slice of their length: the decoded one has room for more.
		conds := make([]corev1.NodeCondition, len(st.Conditions))
		for i, c := range st.Conditions {
			conds[i] = corev1.NodeCondition{Type: c.Type, Status: c.Status}
		}
		st.Conditions = conds
	}
	return n, nil
}

// transformPod is leanPod as a cache transform; anything else (a tombstone is never
// passed) goes through as it is.
func transformPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return leanPod(p), nil
	}
	return obj, nil
}

// leanPod is the pod as the cache holds it: its identity, labels (a selector may read
// them), the annotations gpupool reads, owners, deletion; the node it is bound to and,
// until it is bound, what a scheduler matches against a layout (node selector, required
// node affinity, tolerations); per container only the extended resources it asks for;
// the resource claims it names (demand reads what they ask for, readiness.dra); the
// emptyDir volumes (by name only); the phase and the PodScheduled condition.
// Everything else (images, env, probes, container statuses, managedFields) is most of a
// pod and never read. It is idempotent.
//
// Note: what is left is mostly corev1.Pod's own struct (about 1.2 KiB, empty): the
// floor of a cache of every pod (docs/performance.md, "Memory against the cluster's
// pods").
func leanPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences,
			DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			ResourceClaims: p.Spec.ResourceClaims,
			Containers:     leanContainers(p.Spec.Containers),
			InitContainers: leanContainers(p.Spec.InitContainers),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, StartTime: p.Status.StartTime},
	}
	for _, k := range keptPodAnnotations {
		if v, ok := p.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	// What a scheduler matches is read of the pods not bound yet only (demand.Shapes.Serves):
	// a bound pod's update drops it.
	if p.Spec.NodeName == "" {
		out.Spec.NodeSelector, out.Spec.Tolerations = p.Spec.NodeSelector, p.Spec.Tolerations
		if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			out.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason}}
			break
		}
	}
	return out
}

// leanContainers keeps the containers that ask for an extended resource, with only those
// resources: the GPU resource gpupool counts is one (readiness.gpuResource must name an
// extended resource), and a container without any counts for nothing.
func leanContainers(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		lim, req := extendedOnly(c.Resources.Limits), extendedOnly(c.Resources.Requests)
		if lim == nil && req == nil {
			continue
		}
		out = append(out, corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Limits: lim, Requests: req}})
	}
	return out
}

func extendedOnly(rl corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range rl {
		if isExtended(name) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q
		}
	}
	return out
}

// isExtended says whether a resource name is an extended resource: a domain outside
// kubernetes.io, such as nvidia.com/gpu.
func isExtended(name corev1.ResourceName) bool {
	n := string(name)
	return strings.Contains(n, "/") && !strings.Contains(n, "kubernetes.io/")
}

// podNodeName indexes pods by spec.nodeName ("" for the pods not bound yet), as the API
// server's field selector does: the tests' fake clients serve drain.PodNodeNameField with it.
func podNodeName(o client.Object) []string {
	return []string{o.(*corev1.Pod).Spec.NodeName}
}

// pendingClaimsKey is the podPendingResourceField value of the pods with resource claims
// (what they ask for is in the claims): no extended resource is named so, as those have a
// domain prefix.
const pendingClaimsKey = "resourceclaims"

// podPendingResources is the podPendingResourceField index: the extended resources a pod
// not bound to a node, and not finished, requests, and pendingClaimsKey if it has
// resource claims.
func podPendingResources(o client.Object) []string {
	p := o.(*corev1.Pod)
	if p.Spec.NodeName != "" || demand.Finished(p) {
		return nil
	}
	var out []string
	if len(p.Spec.ResourceClaims) > 0 {
		out = append(out, pendingClaimsKey)
	}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for name := range rl {
					if isExtended(name) && !slices.Contains(out, string(name)) {
						out = append(out, string(name))
					}
				}
			}
		}
	}
	return out
}

// indexPods registers the pod indexes with the manager's cache.
func indexPods(ctx context.Context, indexer client.FieldIndexer) error {
	// Note: no index by spec.nodeName: the cache holds only unbound pods, and a node's
	// pods come from nodePods (or the API server), never from this cache.
	if err := indexer.IndexField(ctx, &corev1.Pod{}, podPendingResourceField, podPendingResources); err != nil {
		return fmt.Errorf("indexing pending pods by extended resource: %w", err)
	}
	return nil
}
