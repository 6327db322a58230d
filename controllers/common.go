package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
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

// fromWhat names where a transition starts: the active layout, or, before any layout was
// active, the VMs as gpupool found them.
func fromWhat(active string) string {
	if active == "" {
		return "the VMs as found (no layout active yet)"
	}
	return fmt.Sprintf("%q", active)
}

// poolsWhere maps an event to the pools that keep selects (nil: every pool), listed
// from c: the one mapping of the controllers' watches from an object to pools. The pools
// are the cache's own objects, not copies (keep must only read them): a node update maps
// through here, and copying every pool's status of a thousand workers for each one was a
// tenth of the manager's CPU during a 64-host switch.
func poolsWhere(ctx context.Context, c client.Reader, keep func(*gpupoolv1.GPUPoolProfile) bool) []reconcile.Request {
	var pools gpupoolv1.GPUPoolProfileList
	if err := c.List(ctx, &pools, client.UnsafeDisableDeepCopy); err != nil {
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

// clockTime is the time in the schedule's time zone, with the zone, and with the date
// when it is not now's date there: "07:50 CET", "Tue 18 Mar 07:50 CET".
func clockTime(pool *gpupoolv1.GPUPoolProfile, t, now time.Time) string {
	loc := scheduleZone(&pool.Spec)
	t, now = t.In(loc), now.In(loc)
	if y, m, d := t.Date(); y != now.Year() || m != now.Month() || d != now.Day() {
		return t.Format("Mon 2 Jan 15:04 MST")
	}
	return t.Format("15:04 MST")
}

// inDuration says how far ahead d is, to the minute; under half a minute to the second,
// so that a switch 20s ahead does not read as now.
func inDuration(d time.Duration) string {
	s := d.Round(time.Second)
	if s > 0 && s < 30*time.Second {
		return fmt.Sprintf("in %ds", int(s/time.Second))
	}
	d = s.Round(time.Minute)
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case d <= 0:
		return "now"
	case h > 0 && m > 0:
		return fmt.Sprintf("in %dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("in %dh", h)
	}
	return fmt.Sprintf("in %dm", m)
}

// requeueKueue is how soon a pass (the Kueue controller's, or demand's) looks again when
// Kueue could not be read or written.
const requeueKueue = 30 * time.Second

// deletionTaskWait bounds how long a pool being deleted waits for each of its vSphere
// tasks in flight, from when gpupool started it (on its own clock): long enough for any
// power operation or reconfigure vCenter finishes, short enough that a task vCenter lost
// track of, or a vCenter that cannot be reached, does not keep the pool forever.
const deletionTaskWait = 10 * time.Minute

// demandCoalesce is how long a pod event waits before its pool's demand is looked at:
// the events of a burst of pods (a pod-creation loop, a Job's pods) are one recheck.
const demandCoalesce = 3 * time.Second

// maxDemandMessage bounds status.demand.message (the API allows 1024).
const maxDemandMessage = demand.MaxMessage

// scheduleZone is the zone of the pool's schedule (the zone its messages' times and
// its accounting's days are in), else UTC.
func scheduleZone(spec *gpupoolv1.GPUPoolProfileSpec) *time.Location {
	if sc := spec.Schedule; sc != nil && sc.TimeZone != "" {
		if l, err := time.LoadLocation(sc.TimeZone); err == nil {
			return l
		}
	}
	return time.UTC
}
