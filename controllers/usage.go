package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolusages,verbs=get;list;create;update;delete

// DefaultUsageInterval is how often a pool's GPUPoolUsage is written at most (and when
// a day ends; --accounting-write-interval): what a crash can lose of the pods that end
// while the manager is down, and one write per pool per five minutes at rest.
const DefaultUsageInterval = 5 * time.Minute

// defaultRetentionDays is spec.accounting.retentionDays' default.
const defaultRetentionDays = 35

// usageState is one pool's accounting between passes. The pass and the flusher
// (flushUsage) share it.
type usageState struct {
	mu     sync.Mutex
	ledger *accounting.Ledger
	// pool, uid and keep are the pool's, as its last pass saw them: the owner of its
	// GPUPoolUsage and how many days are kept.
	pool string
	uid  types.UID
	keep int32
	// persisted is when the ledger was last written (on the manager's clock).
	persisted time.Time
	// pruned is the day retention last ran for.
	pruned string
	// versions are the resourceVersions of the days this manager wrote last, by name.
	versions map[string]string
}

// account adds what this pass saw to the pool's ledger and writes the days it changed
// every UsageInterval, and when a day has ended. It decides nothing: a failure is
// logged and the next pass tries again.
func (r *GPUPoolProfileReconciler) account(ctx context.Context, s *scope) {
	st := r.usage.last(s.pool)
	zone := usageZone(&s.pool.Spec)
	if st == nil {
		var ok bool
		if st, ok = r.resumeUsage(ctx, s, zone); !ok {
			return
		}
		r.usage.remember(s.pool, st)
	}
	items, complete := r.usageItems(ctx, s)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ledger.Zone = zone
	st.keep = defaultRetentionDays
	if a := s.pool.Spec.Accounting; a != nil && a.RetentionDays > 0 {
		st.keep = a.RetentionDays
	}
	if !complete {
		// A node's pods are not known yet (its watch has not synced): this pass's time
		// is accounted by the next one, from Through.
		return
	}
	st.ledger.Advance(s.now, items)
	r.persistIfDue(ctx, st, s.now)
}

// persistIfDue writes the pool's changed days when UsageInterval has passed since the
// last write or a day has ended. st.mu is held.
func (r *GPUPoolProfileReconciler) persistIfDue(ctx context.Context, st *usageState, now time.Time) {
	every := r.UsageInterval
	if every <= 0 {
		every = DefaultUsageInterval
	}
	dayEnded := len(st.ledger.Days) > 1
	if now.Sub(st.persisted) < every && !dayEnded {
		return
	}
	r.persistUsage(ctx, st, now)
}

// flushUsage accounts every pool up to now with what its last pass saw, and writes what
// is due. A pool at rest has no pass for hours (nothing wakes one), and what its last
// pass saw still holds: a change of a node, a pod or a task would have woken a pass.
// The manager runs it every UsageInterval (usageFlusher); it reads neither vCenter nor
// the cluster.
func (r *GPUPoolProfileReconciler) flushUsage(ctx context.Context) {
	now := r.Clock.Now()
	for _, st := range r.usage.all() {
		st.mu.Lock()
		st.ledger.Hold(now)
		r.persistIfDue(ctx, st, now)
		st.mu.Unlock()
	}
}

// usageFlusher runs flushUsage every UsageInterval while the manager leads.
func (r *GPUPoolProfileReconciler) usageFlusher(ctx context.Context) error {
	every := r.UsageInterval
	if every <= 0 {
		every = DefaultUsageInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.flushUsage(ctx)
		}
	}
}

// resumeUsage starts a pool's ledger from its latest persisted day. A pool whose days
// cannot be listed is not accounted on this pass: a ledger started afresh would write
// over the day's persisted sums.
func (r *GPUPoolProfileReconciler) resumeUsage(ctx context.Context, s *scope, zone *time.Location) (*usageState, bool) {
	days, err := r.poolUsages(ctx, s.pool.Name)
	if err != nil {
		log.FromContext(ctx).Info("Not accounting GPU-hours on this pass: listing the pool's GPUPoolUsage failed", "error", err.Error())
		return nil, false
	}
	l, err := accounting.Resume(zone, days)
	if err != nil {
		// A day gpupool cannot read back (edited by hand) is not added to; a new ledger
		// goes on from now, and that day is written over when it is today.
		log.FromContext(ctx).Info("Starting GPU-hour accounting afresh: the latest GPUPoolUsage cannot be read", "error", err.Error())
		l = accounting.New(zone, time.Time{})
	}
	pool := s.pool.Name
	l.OnAdd = func(it accounting.Item, secs float64) { countUsage(pool, it, secs) }
	return &usageState{ledger: l, pool: pool, uid: s.pool.UID, persisted: s.now, versions: map[string]string{}}, true
}

// poolUsages lists the pool's GPUPoolUsage from the API server (they are not cached:
// only a ledger's start and retention read them).
func (r *GPUPoolProfileReconciler) poolUsages(ctx context.Context, pool string) ([]gpupoolv1.GPUPoolUsage, error) {
	var list gpupoolv1.GPUPoolUsageList
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	if err := reader.List(ctx, &list, client.MatchingLabels{gpupoolv1.LabelPool: pool}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, u := range list.Items {
		if u.Pool == pool {
			out = append(out, u)
		}
	}
	return out, nil
}

// persistUsage writes the days the ledger changed, oldest first, and deletes the days
// past retention once a day. A day that cannot be written stays to be written. st.mu is
// held.
func (r *GPUPoolProfileReconciler) persistUsage(ctx context.Context, st *usageState, now time.Time) {
	l := st.ledger
	var latest string
	for _, d := range l.Dirty() {
		u := accounting.ToUsage(st.pool, l.Zone, d)
		u.OwnerReferences = []metav1.OwnerReference{{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile",
			Name: st.pool, UID: st.uid, Controller: ptr.To(true)}}
		if err := r.writeUsage(ctx, st, u); err != nil {
			log.FromContext(ctx).Info("Writing GPUPoolUsage failed; the next pass tries again", "usage", u.Name, "error", err.Error())
			l.Touch(d.Name)
			continue
		}
		latest = d.Name
	}
	st.persisted = now
	l.Forget(now)
	if latest != "" && latest != st.pruned {
		st.pruned = latest
		r.pruneUsage(ctx, st, latest)
	}
}

// writeUsage creates the day's object or replaces it, with the resourceVersion of its
// last write: the manager is its only writer. A version it does not know (another
// leader wrote last, or the object is new to this manager) is read once.
func (r *GPUPoolProfileReconciler) writeUsage(ctx context.Context, st *usageState, u *gpupoolv1.GPUPoolUsage) error {
	if rv := st.versions[u.Name]; rv != "" {
		u.ResourceVersion = rv
		err := r.Client.Update(ctx, u)
		if err == nil {
			st.versions[u.Name] = u.ResourceVersion
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		u.ResourceVersion = ""
	}
	err := r.Client.Create(ctx, u)
	if apierrors.IsAlreadyExists(err) {
		var cur gpupoolv1.GPUPoolUsage
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		if err = reader.Get(ctx, client.ObjectKeyFromObject(u), &cur); err != nil {
			return err
		}
		u.ResourceVersion = cur.ResourceVersion
		err = r.Client.Update(ctx, u)
	}
	if err != nil {
		return err
	}
	st.versions[u.Name] = u.ResourceVersion
	return nil
}

// pruneUsage deletes the pool's days older than its retention before today.
func (r *GPUPoolProfileReconciler) pruneUsage(ctx context.Context, st *usageState, today string) {
	days, err := r.poolUsages(ctx, st.pool)
	if err != nil {
		return
	}
	for i := range days {
		if accounting.Expired(days[i].Day, today, st.keep) {
			if err := r.Client.Delete(ctx, &days[i]); client.IgnoreNotFound(err) != nil {
				log.FromContext(ctx).Info("Deleting an expired GPUPoolUsage failed", "usage", days[i].Name, "error", err.Error())
			}
		}
	}
}

// usageZone is the zone the pool's days are in: the schedule's, else UTC.
func usageZone(spec *gpupoolv1.GPUPoolProfileSpec) *time.Location {
	if sc := spec.Schedule; sc != nil && sc.TimeZone != "" {
		if z, err := time.LoadLocation(sc.TimeZone); err == nil {
			return z
		}
	}
	return time.UTC
}

// usageItems is what counts on this pass (accounting.Items from the pass's world) with
// the pods of the pool's running nodes from their watches; false when a watch has not
// synced yet.
func (r *GPUPoolProfileReconciler) usageItems(ctx context.Context, s *scope) ([]accounting.Item, bool) {
	pods := map[string][]corev1.Pod{}
	for _, n := range s.w.Running() {
		if r.nodePods == nil {
			ps, err := r.podsOnNode(ctx, n)
			if err != nil {
				return nil, false
			}
			pods[n] = ps
			continue
		}
		ps, ok := r.nodePods.list(n)
		if !ok {
			return nil, false
		}
		pods[n] = ps
	}
	return poolUsageItems(s.pool, &s.w, pods, r.tenantOf(ctx, s.pool)), true
}

// tenantOf names a namespace's tenant: the value of spec.accounting.tenantLabel on the
// namespace (its metadata, from the manager's cache), else the namespace itself.
func (r *GPUPoolProfileReconciler) tenantOf(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) func(string) string {
	a := pool.Spec.Accounting
	if a == nil || a.TenantLabel == "" {
		return func(ns string) string { return ns }
	}
	known := map[string]string{}
	return func(ns string) string {
		if t, ok := known[ns]; ok {
			return t
		}
		var m metav1.PartialObjectMetadata
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		t := ns
		if err := r.Client.Get(ctx, client.ObjectKey{Name: ns}, &m); err == nil && m.Labels[a.TenantLabel] != "" {
			t = m.Labels[a.TenantLabel]
		}
		known[ns] = t
		return t
	}
}
