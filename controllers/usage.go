package controllers

import (
	"context"
	"errors"
	"maps"
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
	"github.com/gpupool/gpupool/internal/demand"
)

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolusages,verbs=get;list;create;update;delete

// DefaultUsageInterval is how often pools' GPUPoolUsage are written at most
// (--accounting-write-interval): what a crash can lose of the pods that end while the
// manager is down, and one write per pool per five minutes at rest.
const DefaultUsageInterval = 5 * time.Minute

// usageCallTimeout bounds each API call of the accounting: a hung call must not hold a
// pool's ledger, which its pass waits for.
const usageCallTimeout = 15 * time.Second

// defaultRetentionDays is spec.accounting.retentionDays' default.
const defaultRetentionDays = 35

// account adds what this pass saw to the pool's ledger; the flusher writes it. It
// decides nothing and calls the API only to read the pool's days when it starts
// accounting the pool, and a claim pod's claims once per pod.
func (r *GPUPoolProfileReconciler) account(ctx context.Context, s *scope) {
	st := r.usage.last(s.pool)
	zone := scheduleZone(&s.pool.Spec)
	if st == nil {
		var ok bool
		if st, ok = r.resumeUsage(ctx, s.pool, zone); !ok {
			return
		}
		r.usage.remember(s.pool, st)
	}
	items, complete := r.usageItems(ctx, s, st)
	st.mu.Lock()
	defer st.mu.Unlock()
	// The same zone read again is another *Location: the ledger keeps its own unless
	// the zone changed.
	if st.ledger.Zone.String() != zone.String() {
		st.ledger.Zone = zone
	}
	st.keep = defaultRetentionDays
	if a := s.pool.Spec.Accounting; a != nil && a.RetentionDays > 0 {
		st.keep = a.RetentionDays
	}
	if !complete {
		// A node's pods are not known yet (its watch has not synced): this pass's time
		// is accounted by the next one, from Through.
		return
	}
	st.unobserved = false
	st.ledger.Advance(s.now, items)
}

// accountUnobserved marks a pool whose pass could not see its world (paused, vCenter
// not read): the flusher stops carrying its last pass on until a pass sees it again,
// which accounts the time in between with what it finds then.
func (r *GPUPoolProfileReconciler) accountUnobserved(pool *gpupoolv1.GPUPoolProfile) {
	if st := r.usage.last(pool); st != nil {
		st.mu.Lock()
		st.unobserved = true
		st.mu.Unlock()
	}
}

// flushUsage accounts every observed pool up to now with what its last pass saw, and
// writes the days that changed. A pool at rest has no pass for hours (nothing wakes
// one), and what its last pass saw still holds: a change of a node, a pod or a task
// would have woken a pass. The manager runs it every UsageInterval (usageFlusher); it
// reads neither vCenter nor the pools' world.
func (r *GPUPoolProfileReconciler) flushUsage(ctx context.Context) {
	now := r.Clock.Now()
	for _, st := range r.usage.all() {
		st.mu.Lock()
		if !st.unobserved {
			st.ledger.Hold(now)
		}
		days := st.ledger.Dirty()
		pending := make([]pendingUsage, 0, len(days))
		for _, d := range days {
			pending = append(pending, pendingUsage{day: d, fresh: d.Fresh, obj: r.usageObject(st, d)})
		}
		st.mu.Unlock()
		r.persistUsage(ctx, st, pending, now)
	}
}

// pendingUsage is a day to write, as built under the ledger's lock.
type pendingUsage struct {
	day   *accounting.Day
	fresh bool
	obj   *gpupoolv1.GPUPoolUsage
}

func (r *GPUPoolProfileReconciler) usageObject(st *usageState, d *accounting.Day) *gpupoolv1.GPUPoolUsage {
	u := accounting.ToUsage(st.pool, st.ledger.Zone, d)
	u.OwnerReferences = []metav1.OwnerReference{{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile",
		Name: st.pool, UID: st.uid, Controller: ptr.To(true)}}
	return u
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
// cannot be listed is not accounted on this pass: a ledger started afresh would count
// the time since that day's through as unknown.
func (r *GPUPoolProfileReconciler) resumeUsage(ctx context.Context, gpp *gpupoolv1.GPUPoolProfile, zone *time.Location) (*usageState, bool) {
	days, err := r.listUsages(ctx, gpp.Name, gpp.UID)
	if err != nil {
		log.FromContext(ctx).Info("Not accounting GPU-hours on this pass: listing the pool's GPUPoolUsage failed", "error", err.Error())
		return nil, false
	}
	l, err := accounting.Resume(zone, days)
	if err != nil {
		// A day gpupool cannot read back (edited by hand): a new ledger goes on from
		// now, and its day of that name is merged with the persisted one when written.
		log.FromContext(ctx).Info("Starting GPU-hour accounting afresh: the latest GPUPoolUsage cannot be read", "error", err.Error())
		l = accounting.New(zone, time.Time{})
	}
	pool := gpp.Name
	l.OnAdd = func(it accounting.Item, secs float64) { countUsage(pool, it, secs) }
	return &usageState{ledger: l, pool: pool, uid: gpp.UID, keep: defaultRetentionDays, versions: map[string]string{},
		claimGPUs: map[types.UID]int64{}}, true
}

// listUsages lists the pool's GPUPoolUsage from the API server (they are not cached:
// only a ledger's start and retention read them): those of the pool's UID, not of an
// earlier pool of the name the garbage collector has not deleted yet.
func (r *GPUPoolProfileReconciler) listUsages(ctx context.Context, pool string, uid types.UID) ([]gpupoolv1.GPUPoolUsage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageCallTimeout)
	defer cancel()
	var list gpupoolv1.GPUPoolUsageList
	if err := r.usageReader().List(ctx, &list, client.MatchingLabels{gpupoolv1.LabelPool: pool}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, u := range list.Items {
		if u.Pool == pool && ownedBy(&u, uid) {
			out = append(out, u)
		}
	}
	return out, nil
}

func (r *GPUPoolProfileReconciler) usageReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// ownedBy says whether a GPUPoolUsage's controller is the pool of that UID.
func ownedBy(u *gpupoolv1.GPUPoolUsage, uid types.UID) bool {
	ref := metav1.GetControllerOf(u)
	return ref != nil && ref.UID == uid
}

// persistUsage writes the days built under the lock, oldest first, then, under the
// lock again, marks the days that failed to be written again, forgets the ended days
// that were, and deletes the days past retention once a day.
func (r *GPUPoolProfileReconciler) persistUsage(ctx context.Context, st *usageState, pending []pendingUsage, now time.Time) {
	var latest string
	type outcome struct {
		day    *accounting.Day
		merge  *accounting.Day
		failed bool
	}
	var outs []outcome
	stale := false
	for _, p := range pending {
		merge, err := r.writeUsage(ctx, st, p)
		stale = stale || errors.Is(err, errStaleUsage)
		if err != nil {
			log.FromContext(ctx).Info("Writing GPUPoolUsage failed; the next flush tries again", "usage", p.obj.Name, "error", err.Error())
		} else if merge == nil {
			latest = p.day.Name
		}
		outs = append(outs, outcome{day: p.day, merge: merge, failed: err != nil})
	}
	st.mu.Lock()
	for _, o := range outs {
		switch {
		case o.merge != nil:
			// A persisted day of the name the ledger made afresh: its sums are kept and
			// the ledger's added; written on the next flush.
			o.day.Merge(o.merge)
			st.ledger.Touch(o.day.Name)
		case o.failed:
			st.ledger.Touch(o.day.Name)
		default:
			o.day.Fresh = false
		}
	}
	st.ledger.Forget(now)
	prune := latest != "" && latest != st.pruned
	if prune {
		st.pruned = latest
	}
	keep := st.keep
	st.mu.Unlock()
	if stale {
		// Another manager accounted the pool further: the next pass starts again from
		// what is persisted.
		r.usage.forget(st.pool)
		return
	}
	if prune {
		r.pruneUsage(ctx, st, latest, keep)
	}
}

// errStaleUsage: another manager wrote the day further than this one has accounted it.
var errStaleUsage = errors.New("a newer write of the day by another manager: not written over")

// writeUsage creates the day's object or replaces it, with the resourceVersion of its
// last write by this manager. The object is read once when its version is not known
// (another leader wrote last, or it is new to this manager): a day the ledger made
// afresh whose name is taken by a persisted day of the pool is returned to be merged,
// not written; a day another manager has accounted further is not written over; one
// of an earlier pool of the name is.
func (r *GPUPoolProfileReconciler) writeUsage(ctx context.Context, st *usageState, p pendingUsage) (*accounting.Day, error) {
	ctx, cancel := context.WithTimeout(ctx, usageCallTimeout)
	defer cancel()
	u := p.obj
	if rv := st.versions[u.Name]; rv != "" {
		u.ResourceVersion = rv
		err := r.Client.Update(ctx, u)
		if err == nil {
			st.versions[u.Name] = u.ResourceVersion
			return nil, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, err
		}
		u.ResourceVersion = ""
		delete(st.versions, u.Name)
	}
	err := r.Client.Create(ctx, u)
	if apierrors.IsAlreadyExists(err) {
		var cur gpupoolv1.GPUPoolUsage
		if err := r.usageReader().Get(ctx, client.ObjectKeyFromObject(u), &cur); err != nil {
			return nil, err
		}
		if ownedBy(&cur, st.uid) {
			if p.fresh {
				d, _, err := accounting.FromUsage(&cur)
				if err != nil {
					return nil, err
				}
				return d, nil
			}
			if cur.Through.After(u.Through.Time) {
				return nil, errStaleUsage
			}
		}
		u.ResourceVersion = cur.ResourceVersion
		err = r.Client.Update(ctx, u)
	}
	if err != nil {
		return nil, err
	}
	st.versions[u.Name] = u.ResourceVersion
	return nil, nil
}

// pruneUsage deletes the pool's days older than keep days before today.
func (r *GPUPoolProfileReconciler) pruneUsage(ctx context.Context, st *usageState, today string, keep int32) {
	days, err := r.listUsages(ctx, st.pool, st.uid)
	if err != nil {
		return
	}
	for i := range days {
		if accounting.Expired(days[i].Day, today, keep) {
			dctx, cancel := context.WithTimeout(ctx, usageCallTimeout)
			err := r.Client.Delete(dctx, &days[i])
			cancel()
			if client.IgnoreNotFound(err) != nil {
				log.FromContext(ctx).Info("Deleting an expired GPUPoolUsage failed", "usage", days[i].Name, "error", err.Error())
			}
		}
	}
}

// usageItems is what counts on this pass (poolUsageItems from the pass's world) with
// the pods of the pool's running nodes from their watches; false when a watch has not
// synced yet, or a claim pod's claims cannot be read.
func (r *GPUPoolProfileReconciler) usageItems(ctx context.Context, s *scope, st *usageState) ([]accounting.Item, bool) {
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
	claims, ok := r.claimPodGPUs(ctx, s.pool, pods, st)
	if !ok {
		return nil, false
	}
	return poolUsageItems(s.pool, &s.w, pods, claims, r.tenantOf(ctx, s.pool)), true
}

// claimPodGPUs is, with readiness.dra, how many devices of the pool's class each
// unfinished pod with resource claims on the pool's running nodes asks for: read once
// per pod from the API server, remembered while the pod runs.
func (r *GPUPoolProfileReconciler) claimPodGPUs(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, pods map[string][]corev1.Pod, st *usageState) (map[types.UID]int64, bool) {
	dra := pool.Spec.Readiness.DRA
	if dra == nil {
		clear(st.claimGPUs)
		return nil, true
	}
	seen := map[types.UID]bool{}
	for _, ps := range pods {
		for i := range ps {
			p := &ps[i]
			if len(p.Spec.ResourceClaims) == 0 || demand.Finished(p) {
				continue
			}
			seen[p.UID] = true
			if _, ok := st.claimGPUs[p.UID]; ok {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, usageCallTimeout)
			n, err := demand.PodClaimDevices(cctx, r.usageReader(), dra.DeviceClassName, p)
			cancel()
			if err != nil {
				log.FromContext(ctx).Info("Not accounting GPU-hours on this pass: a pod's resource claims cannot be read", "pod", p.Namespace+"/"+p.Name, "error", err.Error())
				return nil, false
			}
			st.claimGPUs[p.UID] = n
		}
	}
	maps.DeleteFunc(st.claimGPUs, func(uid types.UID, _ int64) bool { return !seen[uid] })
	return st.claimGPUs, true
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
