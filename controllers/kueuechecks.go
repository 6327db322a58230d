package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/text"
)

// gpupool's AdmissionCheck (docs/kueue.md): which Workloads a pool answers, what it
// answers, and what it releases when it stops answering.

// kueueView is what one pass reads of Kueue for the pool, each kind listed once: the
// Kueue controller's pass (quota and checks) and, separately, the pool pass's demand
// (kueueDemand) each read one.
type kueueView struct {
	read bool
	// checks are the names of gpupool's AdmissionChecks (controllerName
	// gpupool.dev/layout); acs the objects, to mark them active.
	checks map[string]bool
	acs    []unstructured.Unstructured
	// queues are the ClusterQueues labelled gpupool.dev/pool=<pool>; queueNames their
	// names. The pool's check acts only on the Workloads admitted to one of them.
	queues     []unstructured.Unstructured
	queueNames map[string]bool
	// workloads are every Workload, listed only when the pool has both a check to answer
	// and a ClusterQueue.
	workloads []unstructured.Unstructured
}

// readKueue fills v once per pass for demand (kueueDemand); a failed read is tried again
// by the next reader. It is readKueueView through the pool reconciler's client.
func (r *GPUPoolProfileReconciler) readKueue(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, v *kueueView) error {
	return readKueueView(ctx, r.Client, pool, v)
}

// readKueueView fills v once per pass: gpupool's AdmissionChecks, the ClusterQueues
// labelled for the pool and, when there are both, every Workload, listed from the API
// server (unstructured reads are not cached).
func readKueueView(ctx context.Context, c client.Reader, pool *gpupoolv1.GPUPoolProfile, v *kueueView) error {
	if v.read {
		return nil
	}
	acs := kueueList(kueueAdmissionCheck)
	if err := c.List(ctx, acs); err != nil {
		return fmt.Errorf("listing AdmissionChecks: %w", err)
	}
	cqs := kueueList(kueueClusterQueue)
	if err := c.List(ctx, cqs, client.MatchingLabels{gpupoolv1.LabelKueuePool: pool.Name}); err != nil {
		return fmt.Errorf("listing ClusterQueues: %w", err)
	}
	out := kueueView{checks: map[string]bool{}, queueNames: map[string]bool{}, queues: cqs.Items}
	for i := range acs.Items {
		if c, _, _ := unstructured.NestedString(acs.Items[i].Object, "spec", "controllerName"); c == gpupoolv1.KueueAdmissionCheckController {
			out.checks[acs.Items[i].GetName()] = true
			out.acs = append(out.acs, acs.Items[i])
		}
	}
	for i := range cqs.Items {
		out.queueNames[cqs.Items[i].GetName()] = true
	}
	if len(out.checks) > 0 && len(out.queues) > 0 {
		wls := kueueList(kueueWorkload)
		if err := c.List(ctx, wls); err != nil {
			return fmt.Errorf("listing Workloads: %w", err)
		}
		out.workloads = wls.Items
	}
	out.read = true
	*v = out
	return nil
}

// markActive sets the AdmissionCheck's Active condition: Kueue admits nothing through a
// ClusterQueue whose checks are not active.
func (k *KueueReconciler) markActive(ctx context.Context, ac *unstructured.Unstructured) error {
	raw, _, _ := unstructured.NestedSlice(ac.Object, "status", "conditions")
	conds := make([]metav1.Condition, 0, len(raw))
	for _, c := range raw {
		var mc metav1.Condition
		if cm, ok := c.(map[string]any); ok {
			if err := fromUnstructured(cm, &mc); err == nil {
				conds = append(conds, mc)
			}
		}
	}
	if !meta.SetStatusCondition(&conds, metav1.Condition{Type: "Active", Status: metav1.ConditionTrue, Reason: "Active",
		Message: "gpupool holds the Workloads of flavors whose layout is not ready for work", ObservedGeneration: ac.GetGeneration()}) {
		return nil
	}
	before := ac.DeepCopy()
	list := make([]any, 0, len(conds))
	for _, c := range conds {
		m, err := toUnstructured(&c)
		if err != nil {
			return err
		}
		list = append(list, m)
	}
	if err := unstructured.SetNestedSlice(ac.Object, list, "status", "conditions"); err != nil {
		return err
	}
	if err := k.Client.Status().Patch(ctx, ac, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("marking AdmissionCheck %s active: %w", ac.GetName(), err)
	}
	return nil
}

// heldWorkload is a Workload with quota reserved on flavors of the pool, and the state of
// its gpupool check.
type heldWorkload struct {
	obj *unstructured.Unstructured
	// check is the index of gpupool's check in status.admissionChecks.
	check int
	// layouts are the layouts of the pool's flavors it was assigned; gpus what it asks
	// of the GPU resource on them.
	layouts []string
	gpus    int64
}

// pendingCheck finds gpupool's check on a Workload that the pool answers: its quota is
// reserved (status.admission) in a ClusterQueue labelled for the pool, it is not yet
// admitted or finished, and it lists one of gpupool's checks. It returns the check's
// index (-1: not the pool's to answer). A Workload of another ClusterQueue is left alone,
// whatever flavor it reserved: two pools never answer one Workload.
func pendingCheck(wl *unstructured.Unstructured, v *kueueView) int {
	if conditionTrue(wl, "Finished") || conditionTrue(wl, "Admitted") {
		return -1 // admitted: the check has done its part; it is never taken back
	}
	if cq, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue"); !v.queueNames[cq] {
		return -1
	}
	states, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for j, st := range states {
		if m, ok := st.(map[string]any); ok && v.checks[fmt.Sprint(m["name"])] {
			return j
		}
	}
	return -1
}

// HeldWorkloads are the Workloads the pool's admission check holds now, as demand counts
// them, read through c (kubectl gpupool record records them).
func HeldWorkloads(ctx context.Context, c client.Reader, pool *gpupoolv1.GPUPoolProfile) ([]demand.Held, error) {
	if pool.Spec.Kueue == nil {
		return nil, nil
	}
	var v kueueView
	if err := readKueueView(ctx, c, pool, &v); err != nil {
		return nil, err
	}
	return heldDemand(pool, &v), nil
}

// heldDemand are v's held Workloads as demand counts them.
func heldDemand(pool *gpupoolv1.GPUPoolProfile, v *kueueView) []demand.Held {
	var out []demand.Held
	for _, h := range heldWorkloads(pool, v) {
		d := demand.Held{Namespace: h.obj.GetNamespace(), Name: h.obj.GetName(), Layouts: h.layouts, GPUs: h.gpus}
		if ref := metav1.GetControllerOf(h.obj); ref != nil {
			d.Owner = string(ref.UID)
		}
		out = append(out, d)
	}
	return out
}

// heldWorkloads are the Workloads of v whose gpupool check the pool answers
// (pendingCheck) and that reserved at least one of the pool's flavors.
func heldWorkloads(pool *gpupoolv1.GPUPoolProfile, v *kueueView) []heldWorkload {
	layoutOf := map[string]string{}
	for _, f := range pool.Spec.Kueue.Flavors {
		layoutOf[f.Name] = f.Layout
	}
	res := corev1.ResourceName(nodes.GPUResource(pool.Spec.Readiness))
	if res == "" {
		res = nodes.DefaultGPUResource
	}
	var out []heldWorkload
	for i := range v.workloads {
		wl := &v.workloads[i]
		check := pendingCheck(wl, v)
		if check < 0 {
			continue
		}
		psas, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
		h := heldWorkload{obj: wl, check: check}
		seen := map[string]bool{}
		for _, psa := range psas {
			pm, _ := psa.(map[string]any)
			flavors, _ := pm["flavors"].(map[string]any)
			usage, _ := pm["resourceUsage"].(map[string]any)
			for rn, fv := range flavors {
				l, ok := layoutOf[fmt.Sprint(fv)]
				if !ok {
					continue
				}
				if !seen[l] {
					seen[l] = true
					h.layouts = append(h.layouts, l)
				}
				if rn == string(res) {
					if q, err := resource.ParseQuantity(fmt.Sprint(usage[rn])); err == nil {
						h.gpus += q.Value()
					}
				}
			}
		}
		if len(h.layouts) == 0 {
			continue
		}
		sort.Strings(h.layouts)
		out = append(out, h)
	}
	return out
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m["status"] == string(metav1.ConditionTrue)
		}
	}
	return false
}

// checkState is the state of gpupool's check on a Workload that reserved flavors of these
// layouts: Ready when every one is ready for work and not about to be left, else Pending
// with what it waits for. From warnAhead before a switch away from the active layout, its
// Workloads stay Pending: admitted now, they would start on nodes drained minutes later.
func checkState(pool *gpupoolv1.GPUPoolProfile, layouts []string, now time.Time) (state, msg string) {
	for _, l := range layouts {
		if !layoutReady(pool, l) {
			return checkPending, waitingMessage(pool, l, now)
		}
	}
	if from := leavingFrom(pool); !from.IsZero() && !now.Before(from) {
		at := leavingAt(pool)
		return checkPending, fmt.Sprintf("waiting for layout %s: a switch away from it starts at %s (%s)",
			pool.Status.ActiveLayout, clockTime(pool, at, now), inDuration(at.Sub(now)))
	}
	return checkReady, "layout " + strings.Join(layouts, ", ") + " is ready for work"
}

// syncChecks marks gpupool's AdmissionChecks active and sets gpupool's check on every
// Workload the pool answers (heldWorkloads): checkState. It records how many it holds in
// status.kueue.
func (k *KueueReconciler) syncChecks(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, v *kueueView, now time.Time) error {
	var errs []error
	for i := range v.acs {
		if err := k.markActive(ctx, &v.acs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	var pending int32
	defer func() {
		publishKueueHeld(pool.Name, int(pending))
		pool.Status.Kueue = &gpupoolv1.KueueStatus{HeldWorkloads: pending}
	}()
	for _, h := range heldWorkloads(pool, v) {
		state, msg := checkState(pool, h.layouts, now)
		if state == checkPending {
			pending++
		}
		if err := k.setCheck(ctx, h.obj, h.check, state, msg, now); err != nil && !apierrors.IsConflict(err) {
			errs = append(errs, err) // a conflict is seen again on the Workload's next event
		}
	}
	return errors.Join(errs...)
}

// setCheck sets the state and message of gpupool's check (status.admissionChecks[check])
// on the Workload, if they changed. A Workload gone is no error; one changed since it
// was read is a conflict (apierrors.IsConflict), which the caller weighs.
func (k *KueueReconciler) setCheck(ctx context.Context, wl *unstructured.Unstructured, check int, state, msg string, now time.Time) error {
	states, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	m, _ := states[check].(map[string]any)
	if m["state"] == state && m["message"] == msg {
		return nil
	}
	before := wl.DeepCopy()
	if m["state"] != state {
		m["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
	}
	m["state"], m["message"] = state, msg
	if err := unstructured.SetNestedSlice(wl.Object, states, "status", "admissionChecks"); err != nil {
		return err
	}
	// The list is replaced whole: the optimistic lock keeps Kueue's concurrent changes.
	if err := k.Client.Status().Patch(ctx, wl, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("setting the admission check of Workload %s/%s: %w", wl.GetNamespace(), wl.GetName(), err)
	}
	return nil
}

// releaseChecks sets gpupool's check Ready on every Workload the pool answers
// (pendingCheck), whatever flavor it reserved: the pool no longer holds work (it is
// deleted, or spec.kueue was removed), and no other pool answers the Workloads of its
// ClusterQueues. Ready, not Retry: Retry gives the quota back and requeues the Workload,
// whose next reservation lists the same check, which nobody answers any more; Ready
// leaves the Workload to Kueue's quota alone, as if gpupool had never held it. It returns
// how many it released.
//
// Note: a Workload changed since it was listed (by Kueue, or by the Kueue controller's
// pass that read the pool just before its deletion or spec change) is not released by
// that patch: the Workloads are listed again, at most releaseAttempts times. Taking the
// conflict for a release would leave it Pending for ever once the finalizer is gone.
func (k *KueueReconciler) releaseChecks(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, why string, now time.Time) (int, error) {
	for range releaseAttempts - 1 {
		if n, err := k.releaseOnce(ctx, pool, why, now); !apierrors.IsConflict(err) {
			return n, err
		}
	}
	return k.releaseOnce(ctx, pool, why, now)
}

// releaseAttempts bounds how often a release lists the Workloads again after a conflict.
const releaseAttempts = 3

// releaseOnce is one attempt of releaseChecks. Its error is a conflict (IsConflict) when
// a Workload's patch conflicted and nothing else failed.
func (k *KueueReconciler) releaseOnce(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, why string, now time.Time) (int, error) {
	var v kueueView
	if err := readKueueView(ctx, k.Client, pool, &v); err != nil {
		return 0, err
	}
	msg := why + ": gpupool no longer holds it for a layout"
	released := 0
	var errs []error
	var conflict error
	for i := range v.workloads {
		wl := &v.workloads[i]
		check := pendingCheck(wl, &v)
		if check < 0 {
			continue
		}
		if err := k.setCheck(ctx, wl, check, checkReady, msg, now); apierrors.IsConflict(err) {
			conflict = err
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		released++
	}
	if len(errs) > 0 {
		return released, errors.Join(errs...)
	}
	return released, conflict
}

// releaseRemovedKueue releases the pool's checks once spec.kueue is removed, then forgets
// that it held any (status.kueue). The quota it wrote is left as last set.
func (k *KueueReconciler) releaseRemovedKueue(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) time.Duration {
	served, err := k.watch.ensure(now)
	if err == nil && !served {
		pool.Status.Kueue = nil // Kueue is gone, and with it the Workloads the checks held
		return 0
	}
	n := 0
	if err == nil {
		n, err = k.releaseChecks(ctx, pool, "spec.kueue was removed from GPUPoolProfile "+pool.Name, now)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "kueue: releasing the admission checks of the pool")
		k.emit(pool, corev1.EventTypeWarning, "KueueReleaseFailed", "spec.kueue was removed; releasing its admission checks: %s", text.Cut(err.Error(), maxDemandMessage))
		return requeueKueue
	}
	pool.Status.Kueue = nil
	k.emit(pool, corev1.EventTypeNormal, "KueueReleased", "spec.kueue was removed: gpupool's admission check set Ready on %d Workload(s) it held; the quota of the ClusterQueues labelled %s=%s is left as last set",
		n, gpupoolv1.LabelKueuePool, pool.Name)
	return 0
}

// releaseDeletedKueue releases the checks of a pool being deleted: the pool's deletion
// pass calls it before its finalizer goes (reconcileDelete), through the Kueue
// controller's code (kueueBridge), so that one finalizer orders the deletion.
func (r *GPUPoolProfileReconciler) releaseDeletedKueue(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) time.Duration {
	return r.kueueBridge().releaseDeleted(ctx, pool, now)
}

// releaseDeleted releases the checks of a pool being deleted (finalize). A failure
// holds the deletion, looked at again shortly, for at most deletionTaskWait from the
// first failure on gpupool's clock (status.kueue.releaseFailingSince, written by the
// caller's status patch): a Kueue that cannot be written must not keep the pool for
// ever. It returns how soon to look again (0: released or given up).
func (k *KueueReconciler) releaseDeleted(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) time.Duration {
	if pool.Spec.Kueue == nil && pool.Status.Kueue == nil {
		return 0
	}
	served, err := k.watch.ensure(now)
	if err == nil && !served {
		return 0
	}
	n := 0
	if err == nil {
		n, err = k.releaseChecks(ctx, pool, "GPUPoolProfile "+pool.Name+" was deleted", now)
	}
	if err == nil {
		if n > 0 {
			k.emit(pool, corev1.EventTypeNormal, "KueueReleased", "the pool is being deleted: gpupool's admission check set Ready on %d Workload(s) it held; the quota of the ClusterQueues labelled %s=%s is left as last set",
				n, gpupoolv1.LabelKueuePool, pool.Name)
		}
		return 0
	}
	log.FromContext(ctx).Error(err, "kueue: releasing the admission checks of the pool being deleted")
	// Note: timed from the first failure, stamped by gpupool's own clock, never from
	// the deletionTimestamp the API server stamped (the clocks may differ).
	ks := pool.Status.Kueue
	if ks == nil {
		ks = &gpupoolv1.KueueStatus{}
		pool.Status.Kueue = ks
	}
	if ks.ReleaseFailingSince == nil {
		ks.ReleaseFailingSince = &metav1.Time{Time: now}
	}
	if now.Sub(ks.ReleaseFailingSince.Time) >= deletionTaskWait {
		k.emit(pool, corev1.EventTypeWarning, "KueueReleaseAbandoned", "the pool is being deleted; its admission checks could not be released within %s and are left as they are: %s",
			deletionTaskWait, text.Cut(err.Error(), maxDemandMessage))
		return 0
	}
	k.emit(pool, corev1.EventTypeWarning, "KueueReleaseFailed", "the pool is being deleted; releasing its admission checks: %s", text.Cut(err.Error(), maxDemandMessage))
	return requeueKueue
}
