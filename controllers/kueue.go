package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// The Kueue bridge (spec.kueue, docs/kueue.md), run by the Kueue controller
// (kueuecontroller.go). gpupool reads and writes Kueue's objects as unstructured ones,
// so that it needs neither Kueue's Go module nor Kueue installed when no pool sets
// spec.kueue. Unstructured reads are not cached: lists go to the API server (no get);
// Workloads, ClusterQueues and AdmissionChecks are watched as metadata only, to wake the
// Kueue controller. ClusterQueues are listed by the opt-in label only, and patched only
// when listed so.
//
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=clusterqueues,verbs=list;watch;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks,verbs=list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks/status,verbs=patch

// Kueue's AdmissionCheck states.
const (
	checkPending = "Pending"
	checkReady   = "Ready"
)

func kueueList(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

// layoutReady says whether the layout's nodes are ready for work: it is the active
// layout and no switch is in flight. An aborted switch is not in flight: the active
// layout keeps serving (its nodes were uncordoned), so its quota and checks stay.
//
// A step of a layout by count's count (countFromDemand) leaves the layout ready: the
// GPUs that stay converted serve throughout, and the quota follows the smaller count
// (countStep).
func layoutReady(pool *gpupoolv1.GPUPoolProfile, layout string) bool {
	t := pool.Status.Transition
	if _, stepping := countStep(pool, layout); stepping {
		return true
	}
	return pool.Status.ActiveLayout == layout && (t == nil || t.AbortedTime != nil)
}

// leavingAt is when the active layout starts to be left: the next scheduled switch, or
// the switch demand announced, to another layout (zero: none known).
func leavingAt(pool *gpupoolv1.GPUPoolProfile) time.Time {
	st := &pool.Status
	var at time.Time
	if nt := st.NextTransition; nt != nil && nt.Layout != st.ActiveLayout {
		at = nt.At.Time
	}
	if d := st.Demand; d != nil && d.Switch != nil && d.Switch.Layout != st.ActiveLayout {
		if at.IsZero() || d.Switch.At.Time.Before(at) {
			at = d.Switch.At.Time
		}
	}
	return at
}

// leavingFrom is when the active layout stops taking new work: warnAhead before it starts
// to be left (zero: no switch away is known).
func leavingFrom(pool *gpupoolv1.GPUPoolProfile) time.Time {
	at := leavingAt(pool)
	if at.IsZero() {
		return at
	}
	return at.Add(-plan.WarnAhead(&pool.Spec))
}

// flavorQuota is the nominalQuota the flavor has now: its quota while its layout is ready
// for work and not about to be left (warnAhead before the switch), else its waitingQuota.
// It returns when that changes next by the clock alone (zero: not by the clock).
func flavorQuota(pool *gpupoolv1.GPUPoolProfile, f *gpupoolv1.KueueFlavor, now time.Time) (corev1.ResourceList, time.Time) {
	waiting := corev1.ResourceList{}
	for r := range f.Quota {
		waiting[r] = resource.Quantity{}
		if q, ok := f.WaitingQuota[r]; ok {
			waiting[r] = q
		}
	}
	if !layoutReady(pool, f.Layout) {
		return waiting, time.Time{}
	}
	count, _ := countStep(pool, f.Layout)
	quota := scaledQuota(pool, f, count)
	if lower := leavingFrom(pool); !lower.IsZero() {
		if !now.Before(lower) {
			return waiting, time.Time{}
		}
		return quota, lower
	}
	return quota, time.Time{}
}

// countStep is, for a layout by count, the count its flavors' quota follows: the active
// count, or during a step of it (a transition from the layout to itself) the smaller of
// the counts before and after, which both serve; stepping says a step is in flight.
// Zero when no count is recorded.
func countStep(pool *gpupoolv1.GPUPoolProfile, layout string) (int32, bool) {
	st := &pool.Status
	if st.ActiveLayout != layout {
		return 0, false
	}
	t := st.Transition
	if t != nil && t.AbortedTime == nil && t.From == layout && t.To == layout && t.Count > 0 {
		return min(t.Count, max(t.FromCount, 1)), true
	}
	return st.ActiveCount, false
}

// scaledQuota is the flavor's quota for a layout by count running count GPUs converted:
// the quota as written is for convert.count, and each resource scales with the count
// (write quota as convert.count x the pod GPUs of one converted GPU, and the quota is
// always count x that: docs/count-layouts.md). Other flavors' quota is as written.
func scaledQuota(pool *gpupoolv1.GPUPoolProfile, f *gpupoolv1.KueueFlavor, count int32) corev1.ResourceList {
	l := pool.Spec.LayoutNamed(f.Layout)
	if l == nil || l.Convert == nil || l.Convert.Count < 1 || count < 1 || count == l.Convert.Count {
		return f.Quota
	}
	out := corev1.ResourceList{}
	for r, q := range f.Quota {
		out[r] = *resource.NewMilliQuantity(q.MilliValue()*int64(count)/int64(l.Convert.Count), q.Format)
	}
	return out
}

// syncKueue applies spec.kueue: the flavors' quota in the opted-in ClusterQueues, gpupool's
// AdmissionChecks marked active, and the state of the checks of the Workloads that wait
// for a layout. Once spec.kueue is removed, it releases the checks the pool held. It
// changes only pool.Status.Kueue of the pool (the caller patches it) and returns how
// soon to look again (0: no sooner than otherwise).
func (k *KueueReconciler) syncKueue(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) time.Duration {
	if pool.Spec.Kueue == nil {
		forgetKueueMetrics(pool.Name)
		if pool.Status.Kueue == nil || poolPaused(pool) {
			return 0
		}
		return k.releaseRemovedKueue(ctx, pool, now)
	}
	if poolPaused(pool) {
		return 0
	}
	logger := log.FromContext(ctx)
	served, err := k.watch.ensure(now)
	if err != nil {
		logger.Error(err, "kueue: starting the watch of Workloads")
	}
	if !served && err == nil {
		// Not installed (yet): nothing to read or write; look again when the watch does.
		k.emit(pool, corev1.EventTypeWarning, "KueueNotServed", "spec.kueue is set but the API server does not serve %s: install Kueue (v0.15 or later)", KueueGroupVersion)
		return kueueRecheck
	}
	if pool.Status.Kueue == nil {
		// Set before any check is: it is what says, once spec.kueue is gone, that the
		// pool's checks are to be released.
		pool.Status.Kueue = &gpupoolv1.KueueStatus{}
	}
	var again time.Duration
	var next time.Time
	var v kueueView
	err = readKueueView(ctx, k.Client, pool, &v)
	if err == nil {
		next, err = k.syncQuota(ctx, pool, v.queues, now)
	}
	if err == nil {
		err = k.syncChecks(ctx, pool, &v, now)
	}
	if err != nil {
		logger.Error(err, "kueue: syncing quota and admission checks")
		k.emit(pool, corev1.EventTypeWarning, "KueueSyncFailed", "%s", text.Cut(err.Error(), maxDemandMessage))
		kueueSyncErrors.WithLabelValues(pool.Name).Inc()
		again = requeueKueue
	}
	if !next.IsZero() {
		if d := next.Sub(now); d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	return again
}

// syncQuota sets the nominalQuota of the pool's flavors in the ClusterQueues labelled
// gpupool.dev/pool=<pool> (queues); other ClusterQueues are never read for writing. It
// returns when a quota changes next by the clock.
func (k *KueueReconciler) syncQuota(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, queues []unstructured.Unstructured, now time.Time) (time.Time, error) {
	want := map[string]corev1.ResourceList{}
	var next time.Time
	for i := range pool.Spec.Kueue.Flavors {
		f := &pool.Spec.Kueue.Flavors[i]
		q, at := flavorQuota(pool, f, now)
		want[f.Name] = q
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	publishKueueQuota(pool.Name, want)
	var errs []error
	for i := range queues {
		cq := &queues[i]
		before := cq.DeepCopy()
		changed, err := setQuota(cq, want)
		if err != nil {
			errs = append(errs, fmt.Errorf("ClusterQueue %s: %w", cq.GetName(), err))
			continue
		}
		if !changed {
			continue
		}
		if err := k.Client.Patch(ctx, cq, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			errs = append(errs, fmt.Errorf("patching the quota of ClusterQueue %s: %w", cq.GetName(), err))
			continue
		}
		k.emit(pool, corev1.EventTypeNormal, "KueueQuotaSet", "ClusterQueue %s: %s", cq.GetName(), quotaString(want))
	}
	return next, errors.Join(errs...)
}

// setQuota sets, in the ClusterQueue's resourceGroups, the nominalQuota of every resource
// of a flavor that want names. Resources the ClusterQueue does not list are not added.
func setQuota(cq *unstructured.Unstructured, want map[string]corev1.ResourceList) (bool, error) {
	groups, found, err := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
	if err != nil || !found {
		return false, err
	}
	changed := false
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		flavors, _ := gm["flavors"].([]any)
		for _, f := range flavors {
			fm, _ := f.(map[string]any)
			name, _ := fm["name"].(string)
			quota, ok := want[name]
			if !ok {
				continue
			}
			resources, _ := fm["resources"].([]any)
			for _, res := range resources {
				rm, _ := res.(map[string]any)
				rn, _ := rm["name"].(string)
				q, ok := quota[corev1.ResourceName(rn)]
				if !ok {
					continue
				}
				if cur, err := resource.ParseQuantity(fmt.Sprint(rm["nominalQuota"])); err == nil && cur.Cmp(q) == 0 {
					continue
				}
				rm["nominalQuota"] = q.String()
				changed = true
			}
		}
	}
	if !changed {
		return false, nil
	}
	return true, unstructured.SetNestedSlice(cq.Object, groups, "spec", "resourceGroups")
}

func quotaString(want map[string]corev1.ResourceList) string {
	var parts []string
	for f, rl := range want {
		var rs []string
		for r, q := range rl {
			rs = append(rs, fmt.Sprintf("%s=%s", r, q.String()))
		}
		sort.Strings(rs)
		parts = append(parts, fmt.Sprintf("flavor %s %s", f, strings.Join(rs, ",")))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// waitingMessage says why a Workload waits for the layout, and until when:
// "waiting for layout night at 20:00 (in 4h)", or a switch in progress.
func waitingMessage(pool *gpupoolv1.GPUPoolProfile, layout string, now time.Time) string {
	st := &pool.Status
	if t := st.Transition; t != nil && t.To == layout && t.AbortedTime != nil {
		return fmt.Sprintf("waiting for layout %s: the switch to it was aborted at %s (a drain timed out)", layout, clockTime(pool, t.AbortedTime.Time, now))
	}
	if t := st.Transition; t != nil && t.To == layout {
		if st.DesiredReason == gpupoolv1.DesiredByDemand {
			return fmt.Sprintf("waiting for layout %s: demand switch in progress", layout)
		}
		return fmt.Sprintf("waiting for layout %s: switch in progress", layout)
	}
	if d := st.Demand; d != nil && d.Switch != nil && d.Switch.Layout == layout {
		return fmt.Sprintf("waiting for layout %s: demand switch at %s (%s)", layout, clockTime(pool, d.Switch.At.Time, now), inDuration(d.Switch.At.Sub(now)))
	}
	if nt := st.NextTransition; nt != nil && nt.Layout == layout {
		// nextTransition is when the switch starts (a window's start less leadTime, an
		// override's end as it is): say that, not when the layout may be ready.
		at := nt.At.Time
		return fmt.Sprintf("waiting for layout %s: the switch to it starts at %s (%s)", layout, clockTime(pool, at, now), inDuration(at.Sub(now)))
	}
	return fmt.Sprintf("waiting for layout %s (no switch to it is scheduled)", layout)
}

func fromUnstructured(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}

func toUnstructured(obj any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}
