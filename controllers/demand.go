package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/plan"
)

// The controller's side of demand (spec.demand): what to read it through, and what a
// pass does with the decision (status, metrics, logs, events). Observing the demand and
// turning it into plan.Decide's input and status.demand is internal/demand's.

// wanted is the layout wanted now, and what demand leaves for the pass to publish.
type wanted struct {
	decision plan.Decision
	// demand is status.demand after the decision; clearDemand says to drop it (the spec
	// has no demand). Neither, and status.demand stays as it is (a paused pool).
	demand      *gpupoolv1.DemandStatus
	clearDemand bool
	// recheck is when demand's timers or guards run out next, or a missing source is
	// looked at again (zero: none).
	recheck time.Time
	// observed is the demand observed (nil: none, or not observed); missing the sources
	// that counted as none.
	observed map[string]plan.LayoutDemand
	missing  []string
	// unobserved: the demand could not be read; the schedule decided (demand.Unobserved).
	unobserved error
	// in is what demand decided on, with the timers it returned (nil: not observed).
	in *plan.DemandInput
}

// want decides which layout is wanted at now: plan.Desired, or with spec.demand,
// plan.Decide over the demand observed in the cluster (reading the caches only, never
// vCenter). It writes nothing, neither the pool nor metrics, logs or events: the pass
// (desire) and the preview (Preview) both call it, so that they decide alike. kv is the
// pass's read of Kueue, filled here if not yet read.
func (r *GPUPoolProfileReconciler) want(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time, kv *kueueView) (wanted, error) {
	if pool.Spec.Demand == nil || pool.Spec.Paused {
		d, err := plan.Desired(&pool.Spec, now)
		return wanted{decision: d, clearDemand: pool.Spec.Demand == nil}, err
	}
	v, err := r.viewDemand(ctx, pool, now, kv)
	if err != nil {
		return wanted{}, err
	}
	if v.Unobserved != nil {
		d, st, err := demand.Unobserved(pool, now, v.Unobserved)
		// The pass looks again soon.
		return wanted{decision: d, demand: st, recheck: now.Add(requeueBlocked), unobserved: v.Unobserved}, err
	}
	in := *v.In
	in.Timers = v.Decision.Timers
	w := wanted{decision: v.Decision.Decision, demand: v.Status, recheck: v.Decision.Recheck, observed: v.In.Observed, missing: v.Missing, in: &in}
	if len(v.Missing) > 0 {
		// The other sources decided; the missing one is looked at again soon.
		if again := now.Add(requeueKueue); w.recheck.IsZero() || again.Before(w.recheck) {
			w.recheck = again
		}
	}
	return w, nil
}

// desire decides which layout is wanted now (want), and publishes status.demand and the
// demand metrics.
func (r *GPUPoolProfileReconciler) desire(ctx context.Context, s *scope) (plan.Decision, error) {
	pool := s.pool
	var kv kueueView // what demand reads of Kueue, once a pass
	// The decision reads the spec with the pool's requests applied (requestsPhase).
	w, err := r.want(ctx, effective(pool, s.requests), s.now, &kv)
	if err != nil {
		return w.decision, err
	}
	switch {
	case w.clearDemand:
		pool.Status.Demand = nil
		forgetDemandMetrics(pool.Name)
	case w.demand != nil || w.observed != nil:
		if w.observed != nil {
			r.logMissing(ctx, pool, w.missing)
			publishDemandMetrics(pool.Name, pool.Spec.Layouts, w.observed)
		}
		if w.demand != nil && pool.Status.Demand != nil {
			// An announced count step stays, while its layout is still wanted and sized,
			// until sizeCounts decides on it again (once observe has read the world).
			if st := pool.Status.Demand.Step; st != nil && st.Layout == w.decision.Layout && sized(&pool.Spec, st.Layout) {
				w.demand.Step = st
			}
		}
		pool.Status.Demand = w.demand
	}
	s.demandRecheck, s.demandIn = w.recheck, w.in
	return w.decision, nil
}

// viewDemand observes the demand of the pool's selected namespaces and decides
// (demand.Observer.View). The pool is not changed.
func (r *GPUPoolProfileReconciler) viewDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time, kv *kueueView) (demand.View, error) {
	o := demand.Observer{Namespaces: r.Client, Sources: r.demandSources(now, kv), WarnAhead: plan.WarnAhead(&pool.Spec)}
	return o.View(ctx, pool, now)
}

// demandSources are the sources of a pool's demand, read through the reconciler's caches:
// the pods (pending ones from the lean pod cache, the nodes' from their watches) and the
// Workloads gpupool's check holds (the pass's read of Kueue, kv).
func (r *GPUPoolProfileReconciler) demandSources(now time.Time, kv *kueueView) []demand.Source {
	return []demand.Source{
		r.podSource(),
		r.claimSource(),
		demand.Workloads{Held: func(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) ([]demand.Held, error) {
			return r.heldForDemand(ctx, pool, now, kv)
		}},
	}
}

// podSource is the pods' demand, read through the lean pod cache (pendingPods), the
// nodes' pod watches (podsOnNode) and, for Jobs, the API server.
func (r *GPUPoolProfileReconciler) podSource() demand.Pods {
	return demand.Pods{Nodes: r.Client, Jobs: r.APIReader, Pending: r.pendingPods, OnNode: r.podsOnNode}
}

// heldForDemand are the Workloads gpupool's check holds for the pool, as demand counts
// them. Whether Kueue is served is asked again at most once per kueueRecheck
// (kueueWatch.ensure).
func (r *GPUPoolProfileReconciler) heldForDemand(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time, kv *kueueView) ([]demand.Held, error) {
	served, err := r.kueueWatch.ensure(now)
	if err == nil && !served {
		err = fmt.Errorf("the API server does not serve %s", KueueGroupVersion)
	}
	if err != nil {
		return nil, err
	}
	if err := r.readKueue(ctx, pool, kv); err != nil {
		return nil, err
	}
	return heldDemand(pool, kv), nil
}

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
	if strings.Contains(now.Message, demand.WorkloadsNotObserved) && !strings.Contains(wasMessage, demand.WorkloadsNotObserved) {
		r.emit(after, corev1.EventTypeWarning, "KueueDemandNotObserved", "%s", now.Message)
	}
	if now.Message != wasMessage && strings.Contains(now.Message, "does not switch:") {
		r.emit(after, corev1.EventTypeNormal, "DemandHeldBack", "%s", now.Message)
	}
}

// pendingPods lists the pods not bound to a node that may request res: through the
// cache's index when the client reads from the manager's cache (podsIndexed), else
// (a client straight to the API server: the tests that call Reconcile directly) every
// unbound pod, by the spec.nodeName field selector the API server serves. The pods are
// the cache's own: read them, never change them.
func (r *GPUPoolProfileReconciler) pendingPods(ctx context.Context, res corev1.ResourceName) ([]corev1.Pod, error) {
	var pods corev1.PodList
	sel := client.MatchingFields{podNodeNameField: ""}
	if r.podsIndexed {
		sel = client.MatchingFields{podPendingResourceField: string(res)}
	}
	if err := r.Client.List(ctx, &pods, sel, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pending pods: %w", err)
	}
	return pods.Items, nil
}

// claimSource is the demand of pods with resource claims (readiness.dra): pending ones
// from the lean pod cache (pendingClaimPods), the nodes' from their watches, the claims
// and templates from the API server.
func (r *GPUPoolProfileReconciler) claimSource() demand.Claims {
	return demand.Claims{Nodes: r.Client, Claims: r.APIReader, Pending: r.pendingClaimPods, OnNode: r.podsOnNode}
}

// pendingClaimPods lists the pods not bound to a node that have resource claims, through
// the cache's index as pendingPods does, else every unbound pod (a client straight to
// the API server), which the Claims source filters. The pods are the cache's own.
func (r *GPUPoolProfileReconciler) pendingClaimPods(ctx context.Context) ([]corev1.Pod, error) {
	if !r.podsIndexed {
		return r.pendingPods(ctx, "")
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{podPendingResourceField: pendingClaimsKey}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return pods.Items, nil
}
