package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
)

// Requeue intervals. A reconcile never waits: it starts work, records it and comes back.
const (
	requeueTask       = execute.RequeueTask
	requeueDrain      = execute.RequeueDrain
	requeueNodeReady  = execute.RequeueNodeReady
	requeueStep       = execute.RequeueStep
	requeueBlocked    = execute.RequeueBlocked
	requeueVCenter    = 30 * time.Second
	requeueLoginError = 10 * time.Minute
	resyncPeriod      = 5 * time.Minute
	reconcileTimeout  = 2 * time.Minute
)

// layoutNamed is the spec's layout of that name (nil: none).
func layoutNamed(spec *gpupoolv1.GPUPoolProfileSpec, name string) *gpupoolv1.Layout {
	for i := range spec.Layouts {
		if spec.Layouts[i].Name == name {
			return &spec.Layouts[i]
		}
	}
	return nil
}

// soonest merges requeue delays: the lowest that is not zero (zero: no requeue asked),
// as Cluster API's LowestNonZeroResult does.
func soonest(ds ...time.Duration) time.Duration {
	var out time.Duration
	for _, d := range ds {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}

// fromWhat names where a transition starts: the active layout, or, before any layout was
// active, the VMs as gpupool found them.
func fromWhat(active string) string {
	if active == "" {
		return "the VMs as found (no layout active yet)"
	}
	return fmt.Sprintf("%q", active)
}

// poolsWhere maps an event to the pools that keep selects (nil: every pool), listed
// from c: the one mapping of the controllers' watches from an object to pools.
func poolsWhere(ctx context.Context, c client.Reader, keep func(*gpupoolv1.GPUPoolProfile) bool) []reconcile.Request {
	var pools gpupoolv1.GPUPoolProfileList
	if err := c.List(ctx, &pools); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pools.Items))
	for i := range pools.Items {
		if keep == nil || keep(&pools.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: pools.Items[i].Name}})
		}
	}
	return reqs
}
