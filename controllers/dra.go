package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// Dynamic Resource Allocation (spec.readiness.dra): what the pass reads of it. Deciding
// stays internal/nodes' (readiness) and internal/demand's (the Claims source).

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list

// ResourceSlices are listed node by node with these field selectors, which the API
// server serves for resource.k8s.io/v1 ResourceSlices.
const (
	sliceNodeNameField = "spec.nodeName"
	sliceDriverField   = "spec.driver"
)

// publishedDevices is how many devices the pool's DRA driver publishes for the node
// (nodes.PublishedDevices), 0 without readiness.dra. The slices are listed from the API
// server by node and driver: the manager caches no ResourceSlice, as a cache would hold
// every slice of the cluster (every node, every driver) for the few pool nodes read.
// A list that fails (resource.k8s.io not served, no permission) publishes nothing: the
// node then waits for the extended resource, and the worker's message says what it
// lacks.
func (r *GPUPoolProfileReconciler) publishedDevices(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, n *corev1.Node) int64 {
	dra := pool.Spec.Readiness.DRA
	if dra == nil || n == nil {
		return 0
	}
	var slices resourcev1.ResourceSliceList
	if err := r.APIReader.List(ctx, &slices, client.MatchingFields{sliceNodeNameField: n.Name, sliceDriverField: dra.Driver}); err != nil {
		log.FromContext(ctx).V(1).Info("Listing ResourceSlices failed; the node publishes no devices", "node", n.Name, "driver", dra.Driver, "error", err.Error())
		return 0
	}
	return nodes.PublishedDevices(slices.Items, dra.Driver, n.Name)
}
