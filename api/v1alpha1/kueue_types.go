package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The keys gpupool uses on Kueue objects (LabelKueuePool,
// KueueAdmissionCheckController) are in keys.go.

// KueueSpec tells Kueue what each layout offers and when (docs/kueue.md): the
// ResourceFlavors the layouts' nodes serve, and their quota in the ClusterQueues that opt
// in with the label gpupool.dev/pool=<pool>.
type KueueSpec struct {
	// Flavors map Kueue ResourceFlavors to the layout whose nodes serve them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	Flavors []KueueFlavor `json:"flavors"`
}

// KueueFlavor is one ResourceFlavor served by one layout's nodes.
type KueueFlavor struct {
	// Name is the ResourceFlavor's name, as the ClusterQueues' resourceGroups list it.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Layout is the layout whose nodes serve the flavor. A Workload that Kueue assigns the
	// flavor waits (gpupool's AdmissionCheck) until this layout is active and its nodes
	// are ready for work.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Layout string `json:"layout"`
	// Quota is the flavor's nominalQuota per resource (such as nvidia.com/gpu: 8) while
	// its layout is active and ready for work. gpupool raises the flavor's quota to it in
	// the opted-in ClusterQueues once the layout's nodes are ready.
	// +kubebuilder:validation:XValidation:rule=`size(self) >= 1`,message=`quota must name at least one resource, such as nvidia.com/gpu: 8`
	Quota corev1.ResourceList `json:"quota"`
	// WaitingQuota is the flavor's nominalQuota while its layout is not ready for work,
	// and from warnAhead before a switch away from it: what stays of the flavor, so that
	// Kueue admits no new work onto nodes about to be drained. Work admitted within it
	// reserves the flavor and waits for the layout (and counts as demand). A resource not
	// listed is 0.
	// +optional
	WaitingQuota corev1.ResourceList `json:"waitingQuota,omitempty"`
}

// KueueStatus is what the pool holds in Kueue. Its presence is what tells, once
// spec.kueue is removed, that the pool's admission checks are still to be released:
// that cannot be observed from the spec any more.
type KueueStatus struct {
	// HeldWorkloads is how many Workloads of the ClusterQueues labelled for the pool
	// gpupool's AdmissionCheck held (Pending) for their layout on the last pass of
	// gpupool's Kueue controller.
	// +optional
	HeldWorkloads int32 `json:"heldWorkloads,omitempty"`
	// ReleaseFailingSince is, while the pool is being deleted and its checks cannot be
	// released, when that first failed, on gpupool's clock: the deletion waits for the
	// release at most 10 minutes from then.
	// +optional
	ReleaseFailingSince *metav1.Time `json:"releaseFailingSince,omitempty"`
}
