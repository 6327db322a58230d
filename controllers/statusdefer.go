package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
)

// A pass's status write may wait (issue 37). At 64 hosts a pool's status is a 300-430 KB
// object that the API server decodes, patches, validates and encodes whole for every
// write, 1-2 s of a pass at p50 inside a switch (BenchmarkStatusWrite,
// docs/performance.md), and most passes of a switch change only what can be observed
// again: a task's id (the intent stored before the task was asked finds it, and the
// starts keep their answers until a write stores them: execute.Starts.Commit), a task
// ended, a step begun, the workers' words, the plan's preview. Such a pass leaves its
// write for up to StatusInterval after the oldest change it left unwritten; the next
// pass starts from what it decided (resume), so that nothing is decided twice, and the
// first pass that must write, or the first after the interval, writes everything left.
//
// Written at once, whatever the interval: every intent (a start is asked only once its
// intent is stored), a guest asked to shut down, a failed step's attempts, a worker
// added or removed, and everything beyond the workers a reader acts on (transition,
// phase, conditions' status and reason, history, layouts, demand, Kueue's). A pool the
// Kueue controller writes (kueueWrites) always writes at once, as a pass that errs.
//
// What a crash loses is what a failed write loses today: the next manager reads the
// status as stored, finds the task ids from the intents (vCenter's recent tasks) and
// begins its steps again; the events of the passes whose write was lost may be told
// again. "Up to StatusInterval" counts from the start of the pass that left the oldest
// change to the start of the pass that writes it: that pass's own time comes on top.

// DefaultStatusInterval is how long the manager lets a pass leave changes that can be
// observed again unwritten (--status-write-interval).
const DefaultStatusInterval = 5 * time.Second

// unwrittenStatus is what a pool's last pass decided and did not write.
type unwrittenStatus struct {
	// base is the pool as stored when the pass decided (the base of the write that
	// stores it); its resourceVersion and status tell whether another writer came since.
	base *gpupoolv1.GPUPoolProfile
	// status is what the pass decided.
	status gpupoolv1.GPUPoolProfileStatus
	// since is when the oldest change left unwritten was decided, on Clock.
	since time.Time
}

// resume starts a pass from the status the pool's last pass left unwritten, when the
// pool as read is the one that pass decided on: its resourceVersion, or (a spec or
// metadata write came since) the same status. It returns the pool as stored, the base
// of the pass's status write, and when the oldest change left unwritten was decided;
// nil and the zero time when the pass starts from the pool as read. Status another
// writer changed since drops what was left unwritten, as a failed write would.
func (r *GPUPoolProfileReconciler) resume(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) (*gpupoolv1.GPUPoolProfile, time.Time) {
	u := r.unwritten.last(pool)
	if u == nil {
		return nil, time.Time{}
	}
	r.unwritten.forget(pool.Name) // the pass owns it now; it leaves it again or writes it
	if pool.ResourceVersion != u.base.ResourceVersion && !equality.Semantic.DeepEqual(pool.Status, u.base.Status) {
		log.FromContext(ctx).V(1).Info("The pool's status changed since the last pass left its write: what it left is observed again", "since", u.since)
		return nil, time.Time{}
	}
	stored := &gpupoolv1.GPUPoolProfile{TypeMeta: pool.TypeMeta, ObjectMeta: *pool.ObjectMeta.DeepCopy(), Status: pool.Status}
	execute.Restore(pool, &u.status)
	return stored, u.since
}

// leaveUnwritten reports whether the pass may leave its status write (mustWrite), and
// then remembers what it decided for the next pass and returns when that pass must
// write it at the latest.
func (r *GPUPoolProfileReconciler) leaveUnwritten(s *scope, failed bool) (time.Duration, bool) {
	if r.StatusInterval <= 0 || failed || s.starts.Len() > 0 || kueueWrites(s.pool) || kueueWrites(s.stored) {
		return 0, false
	}
	since := s.unwrittenSince
	if since.IsZero() {
		since = s.now
	}
	due := since.Add(r.StatusInterval)
	if !s.now.Before(due) || mustWrite(&s.stored.Status, &s.pool.Status) != "" {
		return 0, false
	}
	r.unwritten.remember(s.pool, &unwrittenStatus{base: s.stored, status: *s.pool.Status.DeepCopy(), since: since})
	statusWrites.WithLabelValues(s.pool.Name, "deferred").Inc()
	return due.Sub(s.now), true
}

// mustWrite names what in next, against the status as stored, must be written at once,
// or "" when all of it may wait (see the top of this file).
func mustWrite(stored, next *gpupoolv1.GPUPoolProfileStatus) string {
	a, b := *stored, *next
	a.Workers, b.Workers = nil, nil
	a.Progress, b.Progress = "", ""
	a.Plan, b.Plan = nil, nil
	a.Conditions, b.Conditions = nil, nil
	if !equality.Semantic.DeepEqual(a, b) {
		return "status beyond the workers"
	}
	if why := conditionsMustWrite(stored.Conditions, next.Conditions); why != "" {
		return why
	}
	if len(stored.Workers) != len(next.Workers) {
		return "workers added or removed"
	}
	for i := range next.Workers {
		if why := workerMustWrite(&stored.Workers[i], &next.Workers[i]); why != "" {
			return next.Workers[i].VM + ": " + why
		}
	}
	return ""
}

// conditionsMustWrite: a condition's words may wait, its status and reason may not.
func conditionsMustWrite(stored, next []metav1.Condition) string {
	if len(stored) != len(next) {
		return "conditions added or removed"
	}
	for i := range next {
		a, b := stored[i], next[i]
		if a.Type != b.Type || a.Status != b.Status || a.Reason != b.Reason || a.ObservedGeneration != b.ObservedGeneration || !a.LastTransitionTime.Equal(&b.LastTransitionTime) {
			return "condition " + b.Type
		}
	}
	return ""
}

// workerMustWrite: of a worker, its place, power, profile, step and words may wait (they
// are observed or planned again: a step begun again after a crash only starts its
// timeouts later); its task may wait only when its id is all that came (the intent finds
// it again) or it ended (observed again); a guest asked to shut down, a failed step's
// attempts, and a step begun again since the one stored (its stored start is older:
// after a crash its timeouts would end sooner than decided) may not.
func workerMustWrite(stored, next *gpupoolv1.WorkerStatus) string {
	switch {
	case stored.VM != next.VM:
		return "workers reordered"
	case !equality.Semantic.DeepEqual(stored.GuestShutdownTime, next.GuestShutdownTime):
		return "guest shutdown"
	case stored.Attempts != next.Attempts || !equality.Semantic.DeepEqual(stored.NextRetryTime, next.NextRetryTime):
		return "attempts"
	case stored.Step == next.Step && stored.StepStartTime != nil && next.StepStartTime != nil && !stored.StepStartTime.Equal(next.StepStartTime):
		return "step begun again"
	}
	t, u := stored.Task, next.Task
	switch {
	case u == nil, t != nil && equality.Semantic.DeepEqual(*t, *u):
		return "" // no task, ended, or as stored
	case t == nil:
		return "task intent"
	}
	idOnly := *u
	idOnly.ID = ""
	if t.ID == "" && u.ID != "" && equality.Semantic.DeepEqual(*t, idOnly) {
		return "" // the id of the intent stored
	}
	return "task"
}
