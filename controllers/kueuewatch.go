package controllers

import (
	"cmp"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kueueRecheck is how often a pool with spec.kueue looks again whether Kueue's API is
// served when it was not: one discovery request per period, whatever the passes.
const kueueRecheck = time.Minute

// kueueWatch starts the watches of Kueue's objects (the Kueue controller's, and the
// demand watch's of Workloads) once Kueue's API is served: when the manager starts, or
// on a pass of a pool with spec.kueue (the Kueue controller's, or demand's) after Kueue
// was installed later, so that installing Kueue after gpupool needs no restart. The
// watches are started once.
type kueueWatch struct {
	mapper meta.RESTMapper
	// gvk is the kind watched (zero: Kueue's Workload).
	gvk schema.GroupVersionKind
	// start adds the watches to the controllers.
	start func() error

	mu        sync.Mutex
	started   bool
	checkedAt time.Time
}

// ensure starts the watch if Kueue's Workload API is served and it has not started; it
// asks the API server at most once per kueueRecheck. It says whether Kueue is served and
// watched. Without a watch to manage (nil: the tests that call Reconcile directly) Kueue
// counts as served.
func (w *kueueWatch) ensure(now time.Time) (bool, error) {
	if w == nil {
		return true, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return true, nil
	}
	if !w.checkedAt.IsZero() && now.Sub(w.checkedAt) < kueueRecheck && now.After(w.checkedAt) {
		return false, nil
	}
	w.checkedAt = now
	// Any error is "not served": a group the API server does not know comes back from
	// controller-runtime's mapper as a no-match, a discovery failure or a not-found, and
	// a manager without Kueue must start all the same.
	gvk := cmp.Or(w.gvk, kueueWorkload)
	if _, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return false, nil
	}
	if err := w.start(); err != nil {
		return false, err
	}
	w.started = true
	return true, nil
}

// KueueGroupVersion is the Kueue API gpupool speaks (Kueue v0.15 and later).
var KueueGroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

var (
	kueueWorkload       = KueueGroupVersion.WithKind("Workload")
	kueueClusterQueue   = KueueGroupVersion.WithKind("ClusterQueue")
	kueueAdmissionCheck = KueueGroupVersion.WithKind("AdmissionCheck")
)
