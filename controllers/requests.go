package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/requests"
	"github.com/gpupool/gpupool/internal/text"
)

// The pool's side of GPUPoolRequests (docs/gitops.md): what a pass reads of them, how
// they enter the decision (the effective spec: the forced layout as spec.override, the
// pause as spec.paused), and their status, events and garbage collection. What they
// mean is internal/requests' (Resolve), a pure function.

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolrequests,verbs=list;watch;delete
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolrequests/status,verbs=patch

// DefaultRequestRetention is how long a request stays after it reached a final phase
// (Completed, Expired, Superseded) when RequestRetention is 0: long enough to read what
// happened the day before, short enough that requests do not pile up.
const DefaultRequestRetention = 24 * time.Hour

// requeueRequests is how soon a pass looks again when the requests could not be read.
const requeueRequests = 30 * time.Second

// poolRequests are the requests of the pool, read from the cache.
func (r *GPUPoolProfileReconciler) poolRequests(ctx context.Context, pool string) ([]gpupoolv1.GPUPoolRequest, error) {
	var all gpupoolv1.GPUPoolRequestList
	if err := r.Client.List(ctx, &all); err != nil {
		return nil, fmt.Errorf("listing GPUPoolRequests: %w", err)
	}
	out := all.Items[:0]
	for _, q := range all.Items {
		if q.Spec.Pool == pool {
			out = append(out, q)
		}
	}
	return out, nil
}

// effective is the pool with its requests applied to a copy of its spec (the pool
// itself when no request is in force): what the decision reads. Its status is the
// pool's own, to be read only.
func effective(pool *gpupoolv1.GPUPoolProfile, res requests.Result) *gpupoolv1.GPUPoolProfile {
	spec := requests.Effective(&pool.Spec, res)
	if spec == &pool.Spec {
		return pool
	}
	eff := *pool
	eff.Spec = *spec
	return &eff
}

// resolveRequests reads the pool's requests and decides what they mean at now. A
// failed read leaves the pool to its spec (the zero Result) and says to look again.
func (r *GPUPoolProfileReconciler) resolveRequests(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) ([]gpupoolv1.GPUPoolRequest, requests.Result, error) {
	reqs, err := r.poolRequests(ctx, pool.Name)
	if err != nil {
		return nil, requests.Result{}, err
	}
	return reqs, requests.Resolve(&pool.Spec, reqs, now), nil
}

// requestsPhase reads the pool's requests (before desire: they enter its decision),
// writes their status and deletes those past their retention. It never stops the pass:
// requests that cannot be read leave the pool to its spec until the next look.
func (r *GPUPoolProfileReconciler) requestsPhase(ctx context.Context, s *scope) (outcome, error) {
	reqs, res, err := r.resolveRequests(ctx, s.pool, s.now)
	if err != nil {
		log.FromContext(ctx).Error(err, "Reading the pool's requests; following its spec")
		return outcome{after: requeueRequests}, nil
	}
	s.requests = res
	if res.Paused() {
		s.facts.pausedBy = "request " + res.Pausing[len(res.Pausing)-1].Name
	}
	next := r.recordRequests(ctx, s.pool, reqs, res, s.now)
	if !res.Next.IsZero() {
		next = execute.Soonest(next, max(res.Next.Sub(s.now), time.Second))
	}
	return outcome{after: next}, nil
}

// recordRequests writes each request's status as Resolve decided it (status writes
// only), tells the changes in events on the request and on the pool, and deletes the
// requests whose final phase is older than the retention. It returns when the next
// deletion is due (0: none).
func (r *GPUPoolProfileReconciler) recordRequests(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, reqs []gpupoolv1.GPUPoolRequest, res requests.Result, now time.Time) time.Duration {
	logger := log.FromContext(ctx)
	retention := cmp.Or(r.RequestRetention, DefaultRequestRetention)
	var next time.Duration
	for i := range reqs {
		q, v := &reqs[i], res.Verdicts[i]
		if end := q.Status.EndTime; end != nil {
			if due := end.Add(retention).Sub(now); due > 0 {
				next = execute.Soonest(next, due)
			} else {
				if err := r.Client.Delete(ctx, q); client.IgnoreNotFound(err) != nil {
					logger.Error(err, "Deleting an ended request", "request", q.Name)
				}
				continue
			}
		}
		before := q.DeepCopy()
		if !setRequestStatus(&q.Status, v, now) {
			continue
		}
		if err := r.Client.Status().Patch(ctx, q, client.MergeFrom(before)); err != nil {
			logger.Error(err, "Writing a request's status", "request", q.Name)
			continue
		}
		if q.Status.EndTime != nil {
			next = execute.Soonest(next, retention)
		}
		r.announceRequest(pool, q, before.Status.Phase)
	}
	return next
}

// setRequestStatus sets the request's status to the verdict and tells whether it
// changed. StartTime is when gpupool first took it into account, EndTime when it reached
// a final phase.
func setRequestStatus(st *gpupoolv1.GPUPoolRequestStatus, v requests.Verdict, now time.Time) bool {
	before := st.DeepCopy()
	st.Phase, st.Message = v.Phase, text.Cut(v.Message, 1024)
	st.ExpiresAt = nil
	if v.ExpiresAt != nil {
		st.ExpiresAt = &metav1.Time{Time: *v.ExpiresAt}
	}
	t := metav1.NewTime(now)
	if st.StartTime == nil {
		st.StartTime = &t // a duration counts from here (requests.Expiry)
	}
	if st.EndTime == nil && v.Phase != gpupoolv1.RequestActive && v.Phase != gpupoolv1.RequestInvalid {
		st.EndTime = &t
	}
	return !equality.Semantic.DeepEqual(before, st)
}

// announceRequest tells a request's new phase in an event on the request and one on
// the pool, so that both `kubectl describe` show it.
func (r *GPUPoolProfileReconciler) announceRequest(pool *gpupoolv1.GPUPoolProfile, q *gpupoolv1.GPUPoolRequest, was gpupoolv1.RequestPhase) {
	now := q.Status.Phase
	if now == was {
		return
	}
	typ := corev1.EventTypeNormal
	if now == gpupoolv1.RequestInvalid {
		typ = corev1.EventTypeWarning
	}
	reason := "Request" + string(now)
	note := fmt.Sprintf("%s request %s: %s", q.Spec.Action, q.Name, q.Status.Message)
	r.record(q, pool, typ, reason, reason, note)
	r.record(pool, q, typ, reason, reason, note)
}

// deleteRequests deletes the requests of a pool being deleted: nothing else would
// (their retention is the pool's pass), and a pool created again under the name must
// not inherit them.
func (r *GPUPoolProfileReconciler) deleteRequests(ctx context.Context, pool string) error {
	reqs, err := r.poolRequests(ctx, pool)
	if err != nil {
		return err
	}
	for i := range reqs {
		if err := r.Client.Delete(ctx, &reqs[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting request %s: %w", reqs[i].Name, err)
		}
	}
	return nil
}

// poolPaused tells whether the pool is paused: spec.paused, or a Pause request as the
// pool's last pass found it (its Paused condition). The Kueue controller and the demand
// watch read it: a pool paused by a request changes no quota and no check either.
func poolPaused(pool *gpupoolv1.GPUPoolProfile) bool {
	return pool.Spec.Paused || meta.IsStatusConditionTrue(pool.Status.Conditions, gpupoolv1.ConditionPaused)
}

// requestPools maps a request's creation or deletion to its pool.
func (r *GPUPoolProfileReconciler) requestPools() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		q, ok := o.(*gpupoolv1.GPUPoolRequest)
		if !ok {
			return nil
		}
		return poolsWhere(ctx, r.Client, func(p *gpupoolv1.GPUPoolProfile) bool { return p.Name == q.Spec.Pool })
	})
}
