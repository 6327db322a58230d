package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// passWorkloads lists Kueue's Workloads at most once in a pass: demand (kueueDemand) and
// the admission checks (syncChecks) read the same list, which comes from the API server
// (unstructured reads are not cached), so that a pass asks for every Workload once, not
// once per reader. The checks change the listed objects as they patch them, after
// demand has read them; a Workload changed since the list fails its patch on the
// optimistic lock and is set on the pass its change wakes. The zero value is ready to
// use; a failed list is not kept.
type passWorkloads struct {
	items *unstructured.UnstructuredList
}

func (w *passWorkloads) list(ctx context.Context, c client.Reader) (*unstructured.UnstructuredList, error) {
	if w.items != nil {
		return w.items, nil
	}
	wls := kueueList(kueueWorkload)
	if err := c.List(ctx, wls); err != nil {
		return nil, fmt.Errorf("listing Workloads: %w", err)
	}
	w.items = wls
	return wls, nil
}
