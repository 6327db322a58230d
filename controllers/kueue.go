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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// The Kueue bridge (spec.kueue, docs/kueue.md). gpupool reads and writes Kueue's objects
// as unstructured ones, so that it needs neither Kueue's Go module nor Kueue installed
// when no pool sets spec.kueue. Unstructured reads are not cached: lists go to the API
// server (no get), and only Workloads are watched. ClusterQueues are listed by the
// opt-in label only, and patched only when listed so.
//
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=clusterqueues,verbs=list;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks,verbs=list
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks/status,verbs=patch

// KueueGroupVersion is the Kueue API gpupool speaks (Kueue v0.15 and later).
var KueueGroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

var (
	kueueWorkload       = KueueGroupVersion.WithKind("Workload")
	kueueClusterQueue   = KueueGroupVersion.WithKind("ClusterQueue")
	kueueAdmissionCheck = KueueGroupVersion.WithKind("AdmissionCheck")
)

// Kueue's AdmissionCheck states.
const (
	checkPending = "Pending"
	checkReady   = "Ready"
)

// requeueKueue is how soon a pass looks again when Kueue could not be read or written.
const requeueKueue = 30 * time.Second

func kueueList(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

// layoutReady says whether the layout's nodes are ready for work: it is the active
// layout and no switch is in flight. An aborted switch is not in flight: the active
// layout keeps serving (its nodes were uncordoned), so its quota and checks stay.
func layoutReady(pool *gpupoolv1.GPUPoolProfile, layout string) bool {
	t := pool.Status.Transition
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
	if at := leavingAt(pool); !at.IsZero() {
		lower := at.Add(-warnAhead(&pool.Spec))
		if !now.Before(lower) {
			return waiting, time.Time{}
		}
		return f.Quota, lower
	}
	return f.Quota, time.Time{}
}

// syncKueue applies spec.kueue: the flavors' quota in the opted-in ClusterQueues, gpupool's
// AdmissionChecks marked active, and the state of the checks of the Workloads that wait
// for a layout. It returns how soon to look again (0: no sooner than otherwise).
func (r *GPUPoolProfileReconciler) syncKueue(ctx context.Context, s *scope) time.Duration {
	pool := s.pool
	if pool.Spec.Kueue == nil {
		forgetKueueMetrics(pool.Name)
		return 0
	}
	if pool.Spec.Paused {
		return 0
	}
	logger := log.FromContext(ctx)
	served, err := r.kueueWatch.ensure(s.now)
	if err != nil {
		logger.Error(err, "kueue: starting the watch of Workloads")
	}
	if !served && err == nil {
		// Not installed (yet): nothing to read or write; look again when the watch does.
		r.emit(pool, corev1.EventTypeWarning, "KueueNotServed", "spec.kueue is set but the API server does not serve %s: install Kueue (v0.15 or later)", KueueGroupVersion)
		return kueueRecheck
	}
	var again time.Duration
	next, err := r.syncQuota(ctx, pool, s.now)
	if err == nil {
		err = r.syncChecks(ctx, pool, s.now, &s.workloads)
	}
	if err != nil {
		logger.Error(err, "kueue: syncing quota and admission checks")
		r.emit(pool, corev1.EventTypeWarning, "KueueSyncFailed", "%s", truncate(err.Error(), maxDemandMessage))
		kueueSyncErrors.WithLabelValues(pool.Name).Inc()
		again = requeueKueue
	}
	if !next.IsZero() {
		if d := next.Sub(s.now); d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	return again
}

// syncQuota sets the nominalQuota of the pool's flavors in the ClusterQueues labelled
// gpupool.dev/pool=<pool>; other ClusterQueues are never read for writing. It returns when
// a quota changes next by the clock.
func (r *GPUPoolProfileReconciler) syncQuota(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) (time.Time, error) {
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
	cqs := kueueList(kueueClusterQueue)
	if err := r.Client.List(ctx, cqs, client.MatchingLabels{gpupoolv1.LabelKueuePool: pool.Name}); err != nil {
		return next, fmt.Errorf("listing ClusterQueues: %w", err)
	}
	var errs []error
	for i := range cqs.Items {
		cq := &cqs.Items[i]
		before := cq.DeepCopy()
		changed, err := setQuota(cq, want)
		if err != nil {
			errs = append(errs, fmt.Errorf("ClusterQueue %s: %w", cq.GetName(), err))
			continue
		}
		if !changed {
			continue
		}
		if err := r.Client.Patch(ctx, cq, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			errs = append(errs, fmt.Errorf("patching the quota of ClusterQueue %s: %w", cq.GetName(), err))
			continue
		}
		r.emit(pool, corev1.EventTypeNormal, "KueueQuotaSet", "ClusterQueue %s: %s", cq.GetName(), quotaString(want))
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

// gpupoolChecks are the names of the AdmissionChecks gpupool answers (controllerName
// gpupool.dev/layout). With mark, it sets their Active condition.
func (r *GPUPoolProfileReconciler) gpupoolChecks(ctx context.Context, mark bool) (map[string]bool, error) {
	acs := kueueList(kueueAdmissionCheck)
	if err := r.Client.List(ctx, acs); err != nil {
		return nil, fmt.Errorf("listing AdmissionChecks: %w", err)
	}
	out := map[string]bool{}
	var errs []error
	for i := range acs.Items {
		ac := &acs.Items[i]
		if c, _, _ := unstructured.NestedString(ac.Object, "spec", "controllerName"); c != gpupoolv1.KueueAdmissionCheckController {
			continue
		}
		out[ac.GetName()] = true
		if !mark {
			continue
		}
		if err := r.markActive(ctx, ac); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// markActive sets the AdmissionCheck's Active condition: Kueue admits nothing through a
// ClusterQueue whose checks are not active.
func (r *GPUPoolProfileReconciler) markActive(ctx context.Context, ac *unstructured.Unstructured) error {
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
	if err := r.Client.Status().Patch(ctx, ac, client.MergeFrom(before)); err != nil {
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

// heldWorkloads lists the Workloads whose gpupool check concerns the pool: quota is
// reserved (status.admission) on at least one of the pool's flavors, not yet admitted
// or finished.
func (r *GPUPoolProfileReconciler) heldWorkloads(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, checks map[string]bool, pass *passWorkloads) ([]heldWorkload, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	wls, err := pass.list(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	layoutOf := map[string]string{}
	for _, f := range pool.Spec.Kueue.Flavors {
		layoutOf[f.Name] = f.Layout
	}
	res := corev1.ResourceName(nodes.GPUResource(pool.Spec.Readiness))
	if res == "" {
		res = nodes.DefaultGPUResource
	}
	var out []heldWorkload
	for i := range wls.Items {
		wl := &wls.Items[i]
		if conditionTrue(wl, "Finished") || conditionTrue(wl, "Admitted") {
			continue // admitted: the check has done its part; it is never taken back
		}
		states, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
		check := -1
		for j, st := range states {
			if m, ok := st.(map[string]any); ok && checks[fmt.Sprint(m["name"])] {
				check = j
				break
			}
		}
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
	return out, nil
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

// syncChecks marks gpupool's AdmissionChecks active and sets, on every Workload that
// reserved one of the pool's flavors, gpupool's check: Ready when the flavors' layouts are
// ready for work, else Pending with when the layout comes.
func (r *GPUPoolProfileReconciler) syncChecks(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time, wls *passWorkloads) error {
	checks, err := r.gpupoolChecks(ctx, true)
	if err != nil {
		return err
	}
	held, err := r.heldWorkloads(ctx, pool, checks, wls)
	if err != nil {
		return err
	}
	var errs []error
	pending := 0
	defer func() { publishKueueHeld(pool.Name, pending) }()
	for _, h := range held {
		state, msg := checkReady, "layout "+strings.Join(h.layouts, ", ")+" is ready for work"
		for _, l := range h.layouts {
			if !layoutReady(pool, l) {
				state, msg = checkPending, waitingMessage(pool, l, now)
				break
			}
		}
		if state == checkPending {
			pending++
		}
		if err := r.setCheck(ctx, h, state, msg, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setCheck sets the state and message of gpupool's check on the Workload, if they changed.
func (r *GPUPoolProfileReconciler) setCheck(ctx context.Context, h heldWorkload, state, msg string, now time.Time) error {
	wl := h.obj
	states, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	m, _ := states[h.check].(map[string]any)
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
	if err := r.Client.Status().Patch(ctx, wl, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // seen again on the Workload's next event
		}
		return fmt.Errorf("setting the admission check of Workload %s/%s: %w", wl.GetNamespace(), wl.GetName(), err)
	}
	return nil
}

// waitingMessage says why a Workload waits for the layout, and until when:
// "waiting for layout night at 20:00 (in 4h)", or a switch in progress.
func waitingMessage(pool *gpupoolv1.GPUPoolProfile, layout string, now time.Time) string {
	st := &pool.Status
	if t := st.Transition; t != nil && t.To == layout && t.AbortedTime != nil {
		return fmt.Sprintf("waiting for layout %s: the switch to it was aborted at %s (a drain timed out)", layout, clockTime(pool, t.AbortedTime.Time))
	}
	if t := st.Transition; t != nil && t.To == layout {
		if st.DesiredReason == gpupoolv1.DesiredByDemand {
			return fmt.Sprintf("waiting for layout %s: demand switch in progress", layout)
		}
		return fmt.Sprintf("waiting for layout %s: switch in progress", layout)
	}
	if d := st.Demand; d != nil && d.Switch != nil && d.Switch.Layout == layout {
		return fmt.Sprintf("waiting for layout %s: demand switch at %s (%s)", layout, clockTime(pool, d.Switch.At.Time), inDuration(d.Switch.At.Sub(now)))
	}
	if nt := st.NextTransition; nt != nil && nt.Layout == layout {
		at := nt.At.Time
		if sc := pool.Spec.Schedule; sc != nil && sc.LeadTime != nil {
			at = at.Add(sc.LeadTime.Duration) // the window's start; the switch starts leadTime before
		}
		return fmt.Sprintf("waiting for layout %s at %s (%s)", layout, clockTime(pool, at), inDuration(at.Sub(now)))
	}
	return fmt.Sprintf("waiting for layout %s (no switch to it is scheduled)", layout)
}

// clockTime is the time in the schedule's time zone, with the date when it is not today.
func clockTime(pool *gpupoolv1.GPUPoolProfile, t time.Time) string {
	loc := time.UTC
	if sc := pool.Spec.Schedule; sc != nil && sc.TimeZone != "" {
		if l, err := time.LoadLocation(sc.TimeZone); err == nil {
			loc = l
		}
	}
	return t.In(loc).Format("15:04")
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

func fromUnstructured(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}

func toUnstructured(obj any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// kueueDemand is the demand of the Workloads gpupool's check holds: per layout that is not
// ready for work, the GPUs they reserved on its flavors (Kueue's job integration keeps
// their pods unsuspended only once admitted, so they are not counted as pods too).
//
// Kueue not served or not readable is no Kueue demand (noDemandSeen), never no demand:
// the pods' demand still counts. Whether Kueue is served is asked again at most once per
// kueueRecheck (kueueWatch.ensure).
type kueueDemand struct {
	c   *GPUPoolProfileReconciler
	now time.Time
	// wls are the pass's Workloads, listed once for demand and the checks.
	wls *passWorkloads
}

// kueueNotObserved begins the status.demand message of a pass that could not read Kueue.
const kueueNotObserved = "Kueue demand not observed"

func (kd kueueDemand) observeDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, _ layoutShapes) (map[string]plan.LayoutDemand, error) {
	if pool.Spec.Kueue == nil {
		return nil, nil
	}
	none := func(err error) error { return &noDemandSeen{source: "Kueue", err: err} }
	served, err := kd.c.kueueWatch.ensure(kd.now)
	if err == nil && !served {
		err = fmt.Errorf("the API server does not serve %s", KueueGroupVersion)
	}
	if err != nil {
		return nil, none(err)
	}
	checks, err := kd.c.gpupoolChecks(ctx, false)
	if err != nil {
		return nil, none(err)
	}
	held, err := kd.c.heldWorkloads(ctx, pool, checks, kd.wls)
	if err != nil {
		return nil, none(err)
	}
	obs := map[string]plan.LayoutDemand{}
	for _, h := range held {
		for _, l := range h.layouts {
			if layoutReady(pool, l) || l == pool.Status.ActiveLayout {
				continue
			}
			o := obs[l]
			o.PendingGPUs += h.gpus
			o.Pending = append(o.Pending, fmt.Sprintf("workload %s/%s", h.obj.GetNamespace(), h.obj.GetName()))
			obs[l] = o
		}
	}
	for l, o := range obs {
		sort.Strings(o.Pending)
		obs[l] = o
	}
	return obs, nil
}
