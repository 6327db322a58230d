// Package v1alpha1 contains the v1alpha1 API of the gpupool.dev group.
//
// +kubebuilder:object:generate=true
// +groupName=gpupool.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "gpupool.dev", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this package to a scheme. It depends on
	// apimachinery only, so that the API package stays cheap to import.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &GPUPoolProfile{}, &GPUPoolProfileList{}, &GPUPoolRequest{}, &GPUPoolRequestList{}, &GPUPoolUsage{}, &GPUPoolUsageList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
