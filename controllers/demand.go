package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get

// maxDemandMessage bounds status.demand.message (the API allows 1024).
const maxDemandMessage = 1024

// demandSource sees the demand for a pool's layouts. Pending pods are the first source;
// a queue's workloads (Kueue) are meant to be another: sources are summed per layout
// (plan.LayoutDemand.Add), so the decision does not know where demand came from.
type demandSource interface {
	observeDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes layoutShapes, who demandScope) (map[string]plan.LayoutDemand, error)
}

// desire decides which layout is wanted now: plan.Desired, or with spec.demand,
// plan.Decide over the demand observed in the cluster. It records the decision and
// publishes status.demand.
func (r *GPUPoolProfileReconciler) desire(ctx context.Context, s *scope) (plan.Decision, error) {
	pool := s.pool
	if pool.Spec.Demand == nil || pool.Spec.Paused {
		if pool.Spec.Demand == nil {
			pool.Status.Demand = nil
			forgetDemandMetrics(pool.Name)
		}
		return plan.Desired(&pool.Spec, s.now)
	}
	v, err := r.viewDemand(ctx, pool, s.now, &s.kueue)
	if err != nil {
		return plan.Decision{}, err
	}
	if v.unobserved != nil {
		return r.unobserved(s, v.unobserved)
	}
	in, dec, missing := v.in, v.dec, v.missing
	r.logMissing(ctx, pool, missing)
	pool.Status.Demand = v.status
	s.demandRecheck = dec.Recheck
	if len(missing) > 0 {
		// The other sources decided; the missing one is looked at again soon.
		if again := s.now.Add(requeueKueue); s.demandRecheck.IsZero() || again.Before(s.demandRecheck) {
			s.demandRecheck = again
		}
	}
	publishDemandMetrics(pool.Name, pool.Spec.Layouts, in.Observed)
	return dec.Decision, nil
}

// demandView is what demand decides from the demand observed now: the decision and the
// status.demand it leaves. It reads the caches only, never vCenter, so that the demand
// watch (demandwatch.go) can ask it for every pod event it lets through.
type demandView struct {
	in      *plan.DemandInput
	dec     plan.DemandDecision
	status  *gpupoolv1.DemandStatus
	missing []string
	// unobserved: the pods (or namespaces) could not be read; nothing was decided.
	unobserved error
}

// viewDemand observes the demand of the pool's selected namespaces and decides. The
// pool is not changed. kv is the pass's read of Kueue, filled here if not yet read.
func (r *GPUPoolProfileReconciler) viewDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time, kv *kueueView) (demandView, error) {
	in := demandInput(pool)
	var token string
	in.BudgetSince, token = budgetReset(pool, now)
	shapes := shapesOf(pool)
	who, err := r.demandScopeOf(ctx, pool)
	if err != nil {
		return demandView{unobserved: err}, nil
	}
	var missing []string
	if who.unset {
		missing = append(missing, errNoNamespaceSelector)
	}
	for _, src := range r.demandSources(now, kv) {
		obs, err := src.observeDemand(ctx, pool, shapes, who)
		var none *noDemandSeen
		if errors.As(err, &none) {
			missing = append(missing, none.Error())
			continue
		}
		if err != nil {
			return demandView{unobserved: err}, nil
		}
		for l, o := range obs {
			sum := in.Observed[l]
			sum.Add(o)
			in.Observed[l] = sum
		}
	}
	dec, err := plan.Decide(&pool.Spec, now, in)
	if err != nil {
		return demandView{}, err
	}
	st := demandStatus(pool, in, dec)
	st.Budget = budgetStatus(dec.Budget, in.BudgetSince, token)
	if len(missing) > 0 {
		st.Message = truncate(strings.Join(append(missing, dec.Message), "; "), maxDemandMessage)
	}
	return demandView{in: in, dec: dec, status: st, missing: missing}, nil
}

// budgetReset is since when the switch budget counts and the reset token: an admin's
// new gpupool.dev/reset-demand-budget value resets it now (gpupool's clock; the value is
// never read as a time), otherwise the last reset in status stands.
func budgetReset(pool *gpupoolv1.GPUPoolProfile, now time.Time) (time.Time, string) {
	var b *gpupoolv1.DemandBudget
	if pool.Status.Demand != nil {
		b = pool.Status.Demand.Budget
	}
	ann := truncate(pool.Annotations[gpupoolv1.AnnotationResetDemandBudget], 256)
	if ann != "" && (b == nil || b.ResetToken != ann) {
		return now, ann
	}
	if b != nil && b.ResetTime != nil {
		return b.ResetTime.Time, b.ResetToken
	}
	return time.Time{}, ""
}

// budgetStatus is status.demand.budget.
func budgetStatus(b plan.DemandBudget, since time.Time, token string) *gpupoolv1.DemandBudget {
	out := &gpupoolv1.DemandBudget{Used: int32(b.Used), Max: int32(b.Max), ResetToken: token}
	if !b.FreeAt.IsZero() {
		out.NextAt = &metav1.Time{Time: b.FreeAt}
	}
	if !since.IsZero() {
		out.ResetTime = &metav1.Time{Time: since}
	}
	return out
}

// noDemandSeen is a source whose demand could not be read and counts as none: Kueue's
// API absent or failing must not discard the pods' demand, nor keep a layout demand
// holds beyond its idleFor, as an unreadable pod cache does (unobserved).
type noDemandSeen struct {
	source string
	err    error
}

func (e *noDemandSeen) Error() string {
	return fmt.Sprintf("%s demand not observed, counted as none: %v", e.source, e.err)
}

func (e *noDemandSeen) Unwrap() error { return e.err }

// logMissing logs the sources whose demand counts as none, when that starts (the status
// message did not say it before): a failing source is logged once, not every pass.
func (r *GPUPoolProfileReconciler) logMissing(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, missing []string) {
	was := ""
	if pool.Status.Demand != nil {
		was = pool.Status.Demand.Message
	}
	for _, m := range missing {
		if !strings.Contains(was, m) {
			log.FromContext(ctx).Info("Demand source not observed; counting it as none", "reason", m)
		}
	}
}

// unobserved decides without the demand, which could not be read: the schedule, except
// that a layout demand holds (the last decision was Demand) is kept as it is, so that one
// failed read never drains the work demand keeps, but no longer than the layout's
// idleFor from when its use was last seen (unobservedHold). The other timers stay as
// they were; the pass looks again soon.
func (r *GPUPoolProfileReconciler) unobserved(s *scope, err error) (plan.Decision, error) {
	pool := s.pool
	d, derr := plan.Desired(&pool.Spec, s.now)
	if derr != nil {
		return d, derr
	}
	msg := "demand not observed: " + err.Error()
	cur := pool.Status.ActiveLayout
	if t := pool.Status.Transition; t != nil && t.AbortedTime == nil {
		cur = t.To // an aborted switch is not what serves (docs/operations.md, "After an abort")
	}
	if pool.Status.DesiredReason == gpupoolv1.DesiredByDemand && cur != "" && cur != d.Layout && d.Reason != gpupoolv1.DesiredByOverride &&
		unobservedHold(pool, cur, s.now) {
		d = plan.Decision{Layout: cur, Reason: gpupoolv1.DesiredByDemand, Window: -1,
			Message: fmt.Sprintf("demand keeps layout %s while it cannot be observed (%v)", cur, err)}
		msg += "; layout " + cur + " is kept"
	}
	if pool.Status.Demand != nil {
		pool.Status.Demand.Message = truncate(msg, maxDemandMessage)
	}
	s.demandRecheck = s.now.Add(requeueBlocked)
	return d, nil
}

// unobservedHold says whether a layout demand holds may still be kept while the demand
// cannot be read: unused (nothing seen in use) for less than its idleFor. Its idle timer
// starts when the reads fail, if it had not, and is kept in status.demand, so that a
// read that keeps failing cannot hold it for ever.
func unobservedHold(pool *gpupoolv1.GPUPoolProfile, layout string, now time.Time) bool {
	ds := pool.Status.Demand
	if ds == nil {
		ds = &gpupoolv1.DemandStatus{}
		pool.Status.Demand = ds
	}
	i := slices.IndexFunc(ds.Layouts, func(l gpupoolv1.LayoutDemand) bool { return l.Layout == layout })
	if i < 0 {
		ds.Layouts = append(ds.Layouts, gpupoolv1.LayoutDemand{Layout: layout})
		i = len(ds.Layouts) - 1
	}
	ld := &ds.Layouts[i]
	if ld.IdleSince == nil {
		ld.IdleSince = &metav1.Time{Time: now}
	}
	return now.Before(ld.IdleSince.Add(plan.IdleFor(pool.Spec.Demand, layout)))
}

func (r *GPUPoolProfileReconciler) demandSources(now time.Time, kv *kueueView) []demandSource {
	return []demandSource{podDemand{c: r}, kueueDemand{c: r, now: now, view: kv}}
}

// demandInput is what Decide needs from the pool's status: the layout active and in
// flight, the timers it keeps there and the switches of the history.
func demandInput(pool *gpupoolv1.GPUPoolProfile) *plan.DemandInput {
	st := &pool.Status
	in := &plan.DemandInput{
		Active:    st.ActiveLayout,
		Observed:  map[string]plan.LayoutDemand{},
		Timers:    plan.DemandTimers{PendingSince: map[string]time.Time{}, IdleSince: map[string]time.Time{}},
		WarnAhead: warnAhead(&pool.Spec),
	}
	if t := st.Transition; t != nil {
		// Note: an aborted switch stays in status.transition; Decide does not count it as
		// in flight, and counts it once with its history entry (same ID).
		in.InFlight = t.To
		in.Switches = append(in.Switches, plan.PastSwitch{ID: t.ID, To: t.To, Reason: t.Reason, Start: t.StartTime.Time, Aborted: t.AbortedTime != nil})
	}
	for _, h := range st.History {
		ps := plan.PastSwitch{ID: h.ID, To: h.To, Reason: h.Reason, Start: h.StartTime.Time, Aborted: h.Result == gpupoolv1.TransitionAborted}
		if h.Result == gpupoolv1.TransitionCompleted {
			ps.End = h.EndTime.Time
		}
		in.Switches = append(in.Switches, ps)
	}
	if d := st.Demand; d != nil {
		for _, l := range d.Layouts {
			if l.PendingSince != nil {
				in.Timers.PendingSince[l.Layout] = l.PendingSince.Time
			}
			if l.IdleSince != nil {
				in.Timers.IdleSince[l.Layout] = l.IdleSince.Time
			}
		}
		if sw := d.Switch; sw != nil {
			in.Timers.Switch = &plan.AnnouncedSwitch{Layout: sw.Layout, Action: sw.Action, Decided: sw.DecidedTime.Time, At: sw.At.Time, Message: sw.Message}
		}
	}
	return in
}

// demandStatus is status.demand after a decision: every layout's demand, the timers and
// the announced switch, and demand's own account.
func demandStatus(pool *gpupoolv1.GPUPoolProfile, in *plan.DemandInput, dec plan.DemandDecision) *gpupoolv1.DemandStatus {
	ds := &gpupoolv1.DemandStatus{Message: truncate(dec.Message, maxDemandMessage)}
	if sw := dec.Timers.Switch; sw != nil {
		ds.Switch = &gpupoolv1.DemandSwitch{Layout: sw.Layout, Action: sw.Action, DecidedTime: metav1.NewTime(sw.Decided),
			At: metav1.NewTime(sw.At), Message: truncate(sw.Message, maxDemandMessage)}
	}
	for _, l := range pool.Spec.Layouts {
		o := in.Observed[l.Name]
		ld := gpupoolv1.LayoutDemand{Layout: l.Name, PendingPods: int32(len(o.Pending)), PendingGPUs: o.PendingGPUs,
			RunningGPUs: o.RunningGPUs, Evictions: int32(o.Evictions), DoNotDisrupt: int32(len(o.DoNotDisrupt)),
			JobsNearCompletion: int32(len(o.NearCompletion))}
		if len(o.Pending) > 0 {
			ld.Pods = o.Pending[:min(len(o.Pending), 5)]
		}
		if t, ok := dec.Timers.PendingSince[l.Name]; ok {
			ld.PendingSince = &metav1.Time{Time: t}
		}
		if t, ok := dec.Timers.IdleSince[l.Name]; ok {
			ld.IdleSince = &metav1.Time{Time: t}
		}
		ds.Layouts = append(ds.Layouts, ld)
	}
	return ds
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-len(" [...]")] + " [...]"
}

// layoutShapes are, per layout, the nodes it makes as a scheduler would see them (labels
// and taints, one per distinct profile), to match pending pods against.
type layoutShapes map[string][]*corev1.Node

func shapesOf(pool *gpupoolv1.GPUPoolProfile) layoutShapes {
	out := layoutShapes{}
	for i := range pool.Spec.Layouts {
		l := &pool.Spec.Layouts[i]
		seen := map[string]bool{}
		for _, w := range l.Workers {
			if w.NoNode || seen[w.Profile] {
				continue
			}
			seen[w.Profile] = true
			mib, _ := inventory.ProfileFrameBufferMiB(w.Profile)
			m := nodes.ActiveMeta(pool.Name, l, w.Profile, mib)
			out[l.Name] = append(out[l.Name], &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "layout-" + l.Name, Labels: m.Labels},
				Spec:       corev1.NodeSpec{Taints: m.Taints},
			})
		}
	}
	return out
}

// serves says whether a node of the shape could take the pod: its node selector and
// required node affinity match, and it tolerates the layout's NoSchedule and NoExecute
// taints. Preferences are no requirement.
func (ls layoutShapes) serves(layout string, p *corev1.Pod) bool {
	aff := nodeaffinity.GetRequiredNodeAffinity(p)
	for _, n := range ls[layout] {
		if ok, err := aff.Match(n); err != nil || !ok {
			continue
		}
		_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, p.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
		if !untolerated {
			return true
		}
	}
	return false
}

// podDemand is the demand pods show: unschedulable GPU pods that only a layout other
// than the active one could serve, the GPU pods running on each layout's nodes, and what
// a switch from the active layout would evict.
type podDemand struct{ c *GPUPoolProfileReconciler }

func (pd podDemand) observeDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes layoutShapes, who demandScope) (map[string]plan.LayoutDemand, error) {
	res := who.gpu
	pods, err := pd.c.pendingPods(ctx, res)
	if err != nil {
		return nil, err
	}
	active := pool.Status.ActiveLayout
	layoutOf, err := pd.nodeLayouts(ctx, pool)
	if err != nil {
		return nil, err
	}
	drained := drainedBySwitch(pool)
	// Only the pods on the pool's nodes count as running or evicted: they are listed
	// node by node (the cache's index), never the cluster's pods.
	for _, node := range demandNodes(layoutOf, drained) {
		on, err := pd.c.podsOnNode(ctx, node)
		if err != nil {
			return nil, err
		}
		pods = append(pods, on...)
	}
	kept := keptByEveryOther(pool)
	obs := map[string]plan.LayoutDemand{}
	near := map[types.NamespacedName]bool{}
	for i := range pods {
		p := &pods[i]
		if podFinished(p) {
			continue
		}
		gpus := podGPUs(p, res)
		name := who.named(p)
		if p.Spec.NodeName == "" {
			if gpus == 0 || !who.counts(p) || !unschedulable(p) || (active != "" && shapes.serves(active, p)) {
				continue
			}
			for _, l := range pool.Spec.Layouts {
				if l.Name != active && shapes.serves(l.Name, p) {
					o := obs[l.Name]
					o.PendingGPUs += gpus
					o.Pending = append(o.Pending, name)
					obs[l.Name] = o
				}
			}
			continue
		}
		// A pod on a node that every other layout keeps as it is does not use the
		// layout it is labelled for: no switch would disrupt it. Only the work of whom
		// demand selects keeps a layout; every pod counts in what a switch would evict.
		if l, ok := layoutOf[p.Spec.NodeName]; ok && gpus > 0 && who.counts(p) && !kept[l][p.Spec.NodeName] {
			o := obs[l]
			o.RunningGPUs += gpus
			obs[l] = o
		}
		for target, nodes := range drained {
			if !nodes[p.Spec.NodeName] || !evictable(p) {
				continue
			}
			o := obs[target]
			if gpus > 0 {
				o.Evictions++
			}
			if p.Annotations[AnnotationDoNotDisrupt] == "true" {
				o.DoNotDisrupt = append(o.DoNotDisrupt, name)
			} else if pd.nearCompletion(ctx, p, near) {
				o.NearCompletion = append(o.NearCompletion, name)
			}
			obs[target] = o
		}
	}
	for l, o := range obs {
		sort.Strings(o.Pending)
		sort.Strings(o.DoNotDisrupt)
		sort.Strings(o.NearCompletion)
		obs[l] = o
	}
	return obs, nil
}

// demandNodes are the nodes whose pods demand reads, sorted: those serving a layout of
// the pool and those a switch would drain.
func demandNodes(layoutOf map[string]string, drained map[string]map[string]bool) []string {
	set := map[string]bool{}
	for n := range layoutOf {
		set[n] = true
	}
	for _, ns := range drained {
		for n := range ns {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// nearCompletion says whether the pod belongs to a Job that has three quarters of its
// completions (at least two) behind it: evicting it would throw most of a job away.
func (pd podDemand) nearCompletion(ctx context.Context, p *corev1.Pod, memo map[types.NamespacedName]bool) bool {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return false
	}
	key := types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}
	if v, ok := memo[key]; ok {
		return v
	}
	// Note: read from the API server, not the cache: a Job informer would hold every
	// Job of the cluster for the few whose pods a switch would evict.
	var job batchv1.Job
	v := false
	switch err := pd.c.APIReader.Get(ctx, key, &job); {
	case apierrors.IsNotFound(err):
	case err != nil:
		// Note: a Job that cannot be read may be near completion; the protection holds.
		v = true
	default:
		completions := int32(1)
		if job.Spec.Completions != nil {
			completions = *job.Spec.Completions
		}
		v = completions >= 2 && job.Status.Succeeded*4 >= completions*3
	}
	memo[key] = v
	return v
}

// evictable says whether a drain would evict the pod: not a DaemonSet's, not a mirror pod.
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	ref := metav1.GetControllerOf(p)
	return ref == nil || ref.Kind != "DaemonSet"
}

// podGPUs is how many of the GPU resource the pod requests: the larger of its containers'
// sum and its largest init container, as the scheduler counts.
func podGPUs(p *corev1.Pod, res corev1.ResourceName) int64 {
	quantity := func(c corev1.Container) int64 {
		if q, ok := c.Resources.Limits[res]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Requests[res]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, initMax int64
	for _, c := range p.Spec.Containers {
		sum += quantity(c)
	}
	for _, c := range p.Spec.InitContainers {
		initMax = max(initMax, quantity(c))
	}
	return max(sum, initMax)
}

// unschedulable says whether the scheduler found no node for the pod.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// nodeLayouts maps the pool's nodes to the layout they serve: the gpupool.dev/layout
// label gpupool sets when a node is ready for work and removes when it is parked. Nodes
// of a layout being switched to count as soon as they serve it, before the switch has
// completed, so that work already running there keeps the layout.
func (pd podDemand) nodeLayouts(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) (map[string]string, error) {
	var nodes corev1.NodeList
	if err := pd.c.Client.List(ctx, &nodes, client.MatchingLabels{LabelPool: pool.Name}); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		if l := n.Labels[LabelLayout]; l != "" && n.Labels[LabelParked] != "true" {
			out[n.Name] = l
		}
	}
	return out, nil
}

// drainedBySwitch is, for every other layout, the nodes a switch from the active layout
// to it drains: those of the active layout's workers that the other layout does not list
// with the same profile and number of vGPUs.
func drainedBySwitch(pool *gpupoolv1.GPUPoolProfile) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	active := layoutNamed(&pool.Spec, pool.Status.ActiveLayout)
	if active == nil {
		return out
	}
	nodeOf := map[string]string{}
	for _, w := range pool.Status.Workers {
		nodeOf[w.VM] = w.Node
	}
	for i := range pool.Spec.Layouts {
		to := &pool.Spec.Layouts[i]
		if to.Name == active.Name {
			continue
		}
		set := map[string]bool{}
		for _, w := range active.Workers {
			if n := nodeOf[w.VM]; n != "" && !keeps(to, w) {
				set[n] = true
			}
		}
		out[to.Name] = set
	}
	return out
}

// keptByEveryOther is, for every layout, the nodes of its workers that every other
// layout lists with the same profile and number of vGPUs: shared nodes that no switch
// away from the layout drains.
func keptByEveryOther(pool *gpupoolv1.GPUPoolProfile) map[string]map[string]bool {
	nodeOf := map[string]string{}
	for _, w := range pool.Status.Workers {
		nodeOf[w.VM] = w.Node
	}
	out := map[string]map[string]bool{}
	for i := range pool.Spec.Layouts {
		l := &pool.Spec.Layouts[i]
		set := map[string]bool{}
		for _, w := range l.Workers {
			n := nodeOf[w.VM]
			if n == "" || len(pool.Spec.Layouts) < 2 {
				continue
			}
			all := true
			for j := range pool.Spec.Layouts {
				if j != i && !keeps(&pool.Spec.Layouts[j], w) {
					all = false
					break
				}
			}
			if all {
				set[n] = true
			}
		}
		out[l.Name] = set
	}
	return out
}

func keeps(l *gpupoolv1.Layout, w gpupoolv1.Worker) bool {
	for _, o := range l.Workers {
		if o.VM == w.VM {
			return o.Profile == w.Profile && max(o.VGPUs, 1) == max(w.VGPUs, 1)
		}
	}
	return false
}

// announceDemand emits the events of demand's decisions on the pool: a switch announced
// ahead, an announced switch cancelled, and demand held back by a guard rail, each once.
func (r *GPUPoolProfileReconciler) announceDemand(before, after *gpupoolv1.GPUPoolProfile) {
	was, now := before.Status.Demand, after.Status.Demand
	if now == nil {
		return
	}
	var wasSwitch *gpupoolv1.DemandSwitch
	wasMessage := ""
	if was != nil {
		wasSwitch, wasMessage = was.Switch, was.Message
	}
	switch sw := now.Switch; {
	case sw != nil && (wasSwitch == nil || wasSwitch.Layout != sw.Layout || !wasSwitch.At.Equal(&sw.At)):
		r.emit(after, corev1.EventTypeNormal, "DemandSwitchAnnounced", "demand switch to layout %s starts at %s, after the warning: %s",
			sw.Layout, sw.At.UTC().Format(time.RFC3339), sw.Message)
	case sw == nil && wasSwitch != nil && (after.Status.Transition == nil || after.Status.Transition.To != wasSwitch.Layout):
		r.emit(after, corev1.EventTypeNormal, "DemandSwitchCancelled", "%s", now.Message)
	}
	if strings.Contains(now.Message, kueueNotObserved) && !strings.Contains(wasMessage, kueueNotObserved) {
		r.emit(after, corev1.EventTypeWarning, "KueueDemandNotObserved", "%s", now.Message)
	}
	if now.Message != wasMessage && strings.Contains(now.Message, "does not switch:") {
		r.emit(after, corev1.EventTypeNormal, "DemandHeldBack", "%s", now.Message)
	}
}
