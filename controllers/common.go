package controllers

import (
	"fmt"
	"time"

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
