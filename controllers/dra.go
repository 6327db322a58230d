package controllers

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// Dynamic Resource Allocation (spec.readiness.dra): what the pass reads of it. Deciding
// stays internal/nodes' (readiness) and internal/demand's (the Claims source).

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list

// ResourceSlices are listed by driver with this field selector, which the API server
// serves for resource.k8s.io/v1 ResourceSlices.
const sliceDriverField = "spec.driver"

// publishedDevices is how many devices the pool's DRA driver publishes for each node
// (nodes.PublishedDevices), by node name; nil without readiness.dra. The driver's slices
// are listed from the API server once a pass: the manager caches no ResourceSlice, as a
// cache would hold every slice of the cluster (every node, every driver), and one list
// by driver costs one request however many nodes the pool has. A list that fails
// (resource.k8s.io not served, no permission) publishes nothing: the nodes then wait
// for the extended resource, and the workers' messages say what they lack.
func (r *GPUPoolProfileReconciler) publishedDevices(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) map[string]int64 {
	dra := pool.Spec.Readiness.DRA
	if dra == nil {
		return nil
	}
	var slices resourcev1.ResourceSliceList
	if err := r.APIReader.List(ctx, &slices, client.MatchingFields{sliceDriverField: dra.Driver}); err != nil {
		log.FromContext(ctx).V(1).Info("Listing ResourceSlices failed; the nodes publish no devices", "driver", dra.Driver, "error", err.Error())
		return nil
	}
	byNode := map[string][]resourcev1.ResourceSlice{}
	for _, sl := range slices.Items {
		if sl.Spec.NodeName != nil {
			byNode[*sl.Spec.NodeName] = append(byNode[*sl.Spec.NodeName], sl)
		}
	}
	out := make(map[string]int64, len(byNode))
	for node, sls := range byNode {
		out[node] = nodes.PublishedDevices(sls, dra.Driver, node)
	}
	return out
}
