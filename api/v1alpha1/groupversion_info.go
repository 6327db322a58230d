// Package v1alpha1 contains the v1alpha1 API of the gpupool.dev group.
//
// +kubebuilder:object:generate=true
// +groupName=gpupool.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "gpupool.dev", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this package to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
