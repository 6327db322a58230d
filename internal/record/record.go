// Package record turns what a watch of a pool and of the cluster's pods sees into a
// trace (internal/trace): kubectl gpupool record feeds it, with its own clock, and
// writes what Finish returns. It decides nothing and reads nothing itself: the command
// gives it each pod with the GPUs it asks for, and the pool as it changes.
package record

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
)

// switchRoom is how many events of MaxEvents the pods leave to switches.
const switchRoom = 10_000

// HistoryBefore is how far before the recording's start the pool's history is kept in
// the trace: the day maxSwitchesPerDay counts, longer than any cooldown or minDwell a
// replay must respect from the first instant.
const HistoryBefore = 24 * time.Hour

// Recorder builds one trace. It is not safe for concurrent use: the command serialises
// its watches' events.
type Recorder struct {
	t      trace.Trace
	shapes demand.Shapes
	// Scope says which pods demand counts; Tenant names a namespace's tenant. The
	// command sets them (from the namespaces' labels) and may renew them.
	Scope  demand.Scope
	Tenant func(namespace string) string
	// maxPods bounds the pods recorded; pods beyond it are not (Header.Truncated).
	maxPods int
	pods    map[types.UID]*seen
	// names are the pods by the name the trace gives them (a name may come back).
	names map[string]*seen
	// held are the Workloads held when last read, by namespace/name.
	held map[string]*seen
	// arrivals counts the pods and Workloads recorded, against maxPods.
	arrivals int
	// switches are the Switch events by transition ID, to mark their end.
	switches map[string]int
	// last is the latest instant recorded: a clock stepped back (NTP) does not put
	// events out of order.
	last time.Time
}

// at is now as the trace records it: wall time only (what JSON keeps), never before an
// instant already recorded.
func (r *Recorder) at(now time.Time) time.Time {
	now = now.Round(0)
	if now.Before(r.last) {
		return r.last
	}
	r.last = now
	return now
}

// full: one more event would pass MaxEvents (the pods' bound keeps room for switches).
func (r *Recorder) full() bool {
	if len(r.t.Events) < trace.MaxEvents {
		return false
	}
	r.t.Header.Truncated = true
	return true
}

// seen is what has been recorded of a pod.
type seen struct {
	name           string
	started, ended bool
}

// New starts a trace of pool at start: its spec and active layout, the capacity its
// layouts' workers give, its history of the day before and a switch in flight.
func New(pool *gpupoolv1.GPUPoolProfile, start time.Time, maxPods int) *Recorder {
	// A pod or Workload makes at most three events; the rest of MaxEvents is the
	// switches'.
	r := &Recorder{shapes: demand.ShapesOf(pool), maxPods: min(maxPods, trace.MaxEvents/3-switchRoom), pods: map[types.UID]*seen{}, names: map[string]*seen{},
		switches: map[string]int{}, Tenant: func(ns string) string { return ns }, last: start.Round(0)}
	start = start.Round(0)
	h := trace.Header{Pool: pool.Name, Start: start, End: start, Active: pool.Status.ActiveLayout, Spec: *pool.Spec.DeepCopy(),
		Capacity: map[string]trace.Capacity{}}
	for i := range pool.Spec.Layouts {
		if c, ok := replay.LayoutCapacity(&pool.Spec.Layouts[i]); ok {
			h.Capacity[pool.Spec.Layouts[i].Name] = c
		}
	}
	r.t.Header = h
	// The history is the operator's clock: a switch of the day before matters to a
	// replay only through cooldown, minDwell and maxSwitchesPerDay, which an offset of
	// seconds barely moves.
	for _, rec := range pool.Status.History {
		if rec.StartTime.Time.Before(start.Add(-HistoryBefore)) || !rec.StartTime.Time.Before(start) {
			continue
		}
		ev := trace.Event{At: rec.StartTime.Time, Kind: trace.Switch, From: rec.From, To: rec.To, Reason: rec.Reason,
			Aborted: rec.Result == gpupoolv1.TransitionAborted}
		if rec.Result == gpupoolv1.TransitionCompleted && !rec.EndTime.IsZero() {
			ev.Finished = rec.EndTime.Time
		}
		r.switches[rec.ID] = len(r.t.Events)
		r.t.Events = append(r.t.Events, ev)
	}
	if tr := pool.Status.Transition; tr != nil && tr.ID != "" {
		if _, ok := r.switches[tr.ID]; !ok && tr.StartTime.Time.Before(start) {
			// In flight when the recording starts: it started on the operator's clock.
			r.switches[tr.ID] = len(r.t.Events)
			r.t.Events = append(r.t.Events, trace.Event{At: tr.StartTime.Time, Kind: trace.Switch, From: pool.Status.ActiveLayout, To: tr.To, Reason: tr.Reason})
		}
	}
	r.Pool(start, pool)
	return r
}

// Pool records the pool's switches as they are seen: a transition seen for the first
// time starts at now (the recorder's clock, as the pods' events are); one gone from
// status.transition ends at now, as its history entry says it ended.
func (r *Recorder) Pool(now time.Time, pool *gpupoolv1.GPUPoolProfile) {
	now = r.at(now)
	if tr := pool.Status.Transition; tr != nil && tr.ID != "" {
		i, ok := r.switches[tr.ID]
		if !ok && !r.full() {
			i, ok = len(r.t.Events), true
			r.switches[tr.ID] = i
			r.t.Events = append(r.t.Events, trace.Event{At: now, Kind: trace.Switch, From: pool.Status.ActiveLayout, To: tr.To, Reason: tr.Reason})
		}
		if ok && tr.AbortedTime != nil {
			// Aborted: it stays in status.transition until the next one, and made nothing.
			r.t.Events[i].Aborted = true
		}
	}
	for _, rec := range pool.Status.History {
		i, ok := r.switches[rec.ID]
		if !ok || !r.t.Events[i].Finished.IsZero() || r.t.Events[i].Aborted {
			continue
		}
		if tr := pool.Status.Transition; tr != nil && tr.ID == rec.ID {
			continue // an aborted switch stays in status.transition until the next
		}
		ev := &r.t.Events[i]
		switch rec.Result {
		case gpupoolv1.TransitionCompleted:
			ev.Finished = now
		case gpupoolv1.TransitionAborted:
			ev.Aborted = true
		default:
			ev.Aborted = true // superseded: it made no layout
		}
	}
}

// Pod records what the pod shows now: its arrival (the first time it is seen asking for
// gpus of the pool's GPUs), its start (bound and running), its end (finished, or
// deleted before). A pod first seen after the recording started arrived now; one that
// was there before arrived at the start.
func (r *Recorder) Pod(now time.Time, p *corev1.Pod, gpus int64, deleted bool) {
	now = r.at(now)
	s := r.pods[p.UID]
	if s == nil {
		if gpus <= 0 || deleted || demand.Finished(p) {
			return
		}
		if r.arrivals >= r.maxPods {
			r.t.Header.Truncated = true
			return
		}
		r.arrivals++
		s = &seen{name: p.Namespace + "/" + p.Name}
		if prev := r.names[s.name]; prev != nil && !prev.ended {
			// A pod of the name again (a StatefulSet's replica made anew): the one
			// before went, though its deletion was not seen.
			r.end(now, prev, trace.Deleted)
		}
		r.pods[p.UID], r.names[s.name] = s, s
		r.t.Events = append(r.t.Events, r.arrival(now, p, s.name, gpus))
	}
	if s.ended {
		return
	}
	if !s.started && !deleted && p.Spec.NodeName != "" && (p.Status.Phase == corev1.PodRunning || demand.Finished(p)) {
		s.started = true
		r.t.Events = append(r.t.Events, trace.Event{At: now, Kind: trace.Start, Pod: s.name})
	}
	switch {
	case p.Status.Phase == corev1.PodSucceeded:
		r.end(now, s, trace.Succeeded)
	case p.Status.Phase == corev1.PodFailed:
		r.end(now, s, trace.Failed)
	case deleted:
		r.end(now, s, trace.Deleted)
	}
}

func (r *Recorder) end(now time.Time, s *seen, outcome string) {
	s.ended = true
	r.t.Events = append(r.t.Events, trace.Event{At: now, Kind: trace.End, Pod: s.name, Outcome: outcome})
}

func (r *Recorder) arrival(now time.Time, p *corev1.Pod, name string, gpus int64) trace.Event {
	ev := trace.Event{At: now, Kind: trace.Arrive, Pod: name, Tenant: r.Tenant(p.Namespace), GPUs: gpus,
		Constraints: trace.ConstraintsOf(p), Counts: r.Scope.Counts(p),
		DoNotDisrupt: p.Annotations[gpupoolv1.AnnotationDoNotDisrupt] == "true"}
	if ref := metav1.GetControllerOf(p); ref != nil {
		// Its controller (a Job, a JobSet, a RayJob...) is what a Workload is made for.
		ev.Job, ev.Group = ref.Kind == "Job", string(ref.UID)
	}
	for _, l := range r.t.Header.Spec.Layouts {
		if r.shapes.Serves(l.Name, p) {
			ev.Layouts = append(ev.Layouts, l.Name)
		}
	}
	return ev
}

// Workloads records the Workloads the pool's admission check holds now (all of them, as
// controllers.HeldWorkloads reads them): one first seen arrives, waiting for its layouts;
// one held before and not now ends, admitted (or deleted: the trace cannot tell, and a
// replay releases it when its layout is ready either way).
func (r *Recorder) Workloads(now time.Time, held []demand.Held) {
	now = r.at(now)
	if r.held == nil {
		r.held = map[string]*seen{}
	}
	still := map[string]bool{}
	for _, h := range held {
		name := WorkloadName(h.Namespace, h.Name)
		still[name] = true
		if r.held[name] != nil || h.GPUs <= 0 {
			continue // known, or asking nothing of the pool's GPU resource
		}
		if r.arrivals >= r.maxPods || r.full() {
			r.t.Header.Truncated = true
			continue
		}
		r.arrivals++
		r.held[name] = &seen{name: name}
		r.t.Events = append(r.t.Events, trace.Event{At: now, Kind: trace.Arrive, Pod: name, Tenant: r.Tenant(h.Namespace), GPUs: h.GPUs,
			Layouts: h.Layouts, Workload: true, Job: true, Group: h.Owner, Counts: r.Scope.Selects(h.Namespace)})
	}
	for name, s := range r.held {
		if !still[name] {
			r.end(now, s, trace.Admitted)
			delete(r.held, name)
		}
	}
}

// WorkloadName is how a trace names a Workload, apart from pods: workload:ns/name.
func WorkloadName(namespace, name string) string { return "workload:" + namespace + "/" + name }

// Finish ends the trace at now: the events sorted, the period closed. The recorder is
// not to be used after.
func (r *Recorder) Finish(now time.Time) *trace.Trace {
	r.t.Header.End = r.at(now)
	t := &trace.Trace{Header: r.t.Header, Events: slices.Clone(r.t.Events)}
	t.Sort()
	return t
}
