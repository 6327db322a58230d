package demand

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Scope is who may ask (spec.demand.namespaceSelector and podSelector): a pod counts as
// demand only in a selected namespace and, with a pod selector, only when its labels
// match. Tenants who can only create pods cannot label namespaces, so they cannot select
// themselves.
type Scope struct {
	// namespaces are the selected namespaces; none when the selector is unset.
	namespaces map[string]bool
	// all: the selector is empty ({}), which selects every namespace.
	all bool
	// pods is the pod selector; nil selects every pod of the selected namespaces.
	pods labels.Selector
	// GPU is the pool's GPU resource (readiness.gpuResource): only pods that ask for it
	// are demand, and only they wake the pool.
	GPU corev1.ResourceName
	// Claims: the pool names its GPUs' DeviceClass (readiness.dra), so pods with
	// resource claims may be demand too (the Claims source reads what they ask for).
	Claims bool
	// Unset says that spec.demand has no namespaceSelector (an object stored before the
	// field was required): nothing counts, and the status says why.
	Unset bool
}

// Everyone is the scope of an empty namespace selector and no pod selector, with the
// GPU resource given: every pod asking for it counts.
func Everyone(gpu corev1.ResourceName) Scope {
	return Scope{namespaces: map[string]bool{}, all: true, GPU: gpu}
}

// NoNamespaceSelector is the reason no pod counts as demand.
const NoNamespaceSelector = "spec.demand.namespaceSelector is not set: no namespace's pods or Workloads count as demand (set it, such as namespaceSelector: {} for every namespace)"

// ReadScope reads the namespaces' labels (metadata only; r is the manager's cache) and
// selects the pool's. An empty selector reads nothing.
func ReadScope(ctx context.Context, r client.Reader, pool *gpupoolv1.GPUPoolProfile) (Scope, error) {
	var nss metav1.PartialObjectMetadataList
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if d := pool.Spec.Demand; d != nil && d.NamespaceSelector != nil && !EmptySelector(d.NamespaceSelector) {
		if err := r.List(ctx, &nss); err != nil {
			return Scope{}, fmt.Errorf("listing namespaces: %w", err)
		}
	}
	return ScopeOf(pool, nss.Items)
}

// ScopeOf selects, among the namespaces given, those the pool's demand counts.
func ScopeOf(pool *gpupoolv1.GPUPoolProfile, nss []metav1.PartialObjectMetadata) (Scope, error) {
	ds := Scope{namespaces: map[string]bool{}, GPU: GPUResource(pool), Claims: pool.Spec.Readiness.DRA != nil}
	d := pool.Spec.Demand
	if d == nil || d.NamespaceSelector == nil {
		ds.Unset = true
		return ds, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(d.NamespaceSelector)
	if err != nil {
		return ds, fmt.Errorf("spec.demand.namespaceSelector: %w", err)
	}
	ds.all = sel.Empty()
	for _, ns := range nss {
		if sel.Matches(labels.Set(ns.Labels)) {
			ds.namespaces[ns.Name] = true
		}
	}
	if d.PodSelector != nil {
		if ds.pods, err = metav1.LabelSelectorAsSelector(d.PodSelector); err != nil {
			return ds, fmt.Errorf("spec.demand.podSelector: %w", err)
		}
	}
	return ds, nil
}

// EmptySelector says whether the selector selects everything ({}).
func EmptySelector(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// Selects says whether demand counts the namespace's pods and Workloads.
func (ds Scope) Selects(namespace string) bool {
	return ds.all || ds.namespaces[namespace]
}

// GPUResource is the pool's GPU resource: readiness.gpuResource, or nvidia.com/gpu.
func GPUResource(pool *gpupoolv1.GPUPoolProfile) corev1.ResourceName {
	if res := nodes.GPUResource(pool.Spec.Readiness); res != "" {
		return corev1.ResourceName(res)
	}
	return nodes.DefaultGPUResource
}

// Counts says whether the pod's work counts as demand: pending, it may bring a layout
// in; running, it keeps one.
func (ds Scope) Counts(p *corev1.Pod) bool {
	if !ds.Selects(p.Namespace) {
		return false
	}
	return ds.pods == nil || ds.pods.Matches(labels.Set(p.Labels))
}

// Named is how status and events name a pod: by name in a selected namespace, otherwise
// by its namespace only, because the pool is cluster-scoped and read by more people than
// the tenants of a namespace demand does not select.
func (ds Scope) Named(p *corev1.Pod) string {
	if ds.Selects(p.Namespace) {
		return fmt.Sprintf("pod %s/%s", p.Namespace, p.Name)
	}
	return "a pod in namespace " + p.Namespace
}

// Wakes says whether an event of the pod may change the pool's demand: it asks for the
// pool's GPU resource (or, with readiness.dra, has resource claims) and counts.
func (ds Scope) Wakes(p *corev1.Pod) bool {
	return (PodGPUs(p, ds.GPU) > 0 || (ds.Claims && len(p.Spec.ResourceClaims) > 0)) && ds.Counts(p)
}
