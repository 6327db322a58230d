package localenv

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/vgpusim"
)

// timeline records, while a switch runs, when the last node of the pool reached each
// milestone of a transition, from watches of the nodes and the benchmark's pods: where
// a switch's time goes, for the reader of the benchmark.
type timeline struct {
	start  time.Time
	target string // the workload label value of the layout switched to

	mu   sync.Mutex
	last map[string]time.Duration
	seen map[string]int
	// old and fresh are the per-node times of the nodes the switch parks and brings up,
	// by name, for the reaction times (switchTrace).
	old, fresh map[string]*nodeTrace
	// cordoned is each node's cordon as last seen, and cordons how often it went from
	// schedulable to cordoned since the watch first saw it (onceCheck).
	cordoned map[string]bool
	cordons  map[string]int
}

// Milestones, in the order a switch reaches them.
var milestones = []struct{ key, what string }{
	{"cordoned", "cordoned"},
	{"podsGone", "evicted pods gone"},
	{"off", "old nodes off"},
	{"ready", "new nodes Ready"},
	{"gpus", "GPUs advertised"},
	{"labelled", "relabelled"},
	{"uncordoned", "uncordoned"},
}

// watchTimeline starts recording; cancel ctx to stop. A watch the API server drops (it
// drops a watch whose reader falls behind) is opened again.
func (e *Env) watchTimeline(ctx context.Context, target string) (*timeline, error) {
	t := &timeline{start: time.Now(), target: target, last: map[string]time.Duration{}, seen: map[string]int{},
		old: map[string]*nodeTrace{}, fresh: map[string]*nodeTrace{}, cordoned: map[string]bool{}, cordons: map[string]int{}}
	wasCordoned := map[string]bool{}
	onNode := func(ev watch.Event) {
		n, ok := ev.Object.(*corev1.Node)
		if !ok || (!strings.HasPrefix(n.Name, "day-") && !strings.HasPrefix(n.Name, "night-")) {
			return
		}
		inTarget := n.Labels["lab.example/workload"] == target
		t.traceNode(n, inTarget)
		if n.Spec.Unschedulable {
			wasCordoned[n.Name] = true
			if !inTarget {
				t.mark("cordoned", n.Name)
			}
		}
		if !cluster.Ready(n) && !inTarget {
			t.mark("off", n.Name)
		}
		if n.Annotations[cluster.AnnotationSimPower] == "poweredOn" && cluster.Ready(n) && strings.HasPrefix(n.Name, layoutPrefix(target)) {
			t.mark("ready", n.Name)
			if cluster.AdvertisedGPUs(n) != "0" {
				t.mark("gpus", n.Name)
			}
			if inTarget {
				t.mark("labelled", n.Name)
				if !n.Spec.Unschedulable && wasCordoned[n.Name] {
					t.mark("uncordoned", n.Name)
				}
			}
		}
	}
	onPod := func(ev watch.Event) {
		if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
			t.mark("podsGone", p.Name)
			t.podGone(p.Spec.NodeName)
		}
	}
	go e.follow(ctx, &corev1.NodeList{}, nil, onNode)
	go e.follow(ctx, &corev1.PodList{}, []client.ListOption{client.InNamespace("bench")}, onPod)
	return t, nil
}

// follow watches list's kind and hands each event to on, until ctx ends. When the API
// server closes the watch (its timeout, or a watcher too slow for a burst of events, as
// 1,024 pods deleted at once on two busy cores), it is opened again from the last
// resourceVersion seen, so that no event in between is lost: a pod deletion missed
// would make its node's drain look as if it ended only at the park. Only when that
// version has expired (410) does it start again from the current state, and says so.
func (e *Env) follow(ctx context.Context, list client.ObjectList, opts []client.ListOption, on func(watch.Event)) {
	rv := ""
	for ctx.Err() == nil {
		w, err := e.Client.Watch(ctx, list, append(slices.Clone(opts), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})...)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = e.watchExpired(list, rv)
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if st, ok := ev.Object.(*metav1.Status); ok && (st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired) {
					rv = e.watchExpired(list, rv)
				}
				break
			}
			if m, ok := ev.Object.(metav1.Object); ok && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
			on(ev)
		}
		w.Stop()
	}
}

// watchExpired says that a watch could not resume from rv, and returns the version to
// watch from instead: now.
func (e *Env) watchExpired(list client.ObjectList, rv string) string {
	e.logf("==> the watch of %T could not resume from resourceVersion %s (expired): events in between are lost", list, rv)
	return ""
}

// layoutPrefix is the name prefix of the nodes of the layout whose workload label is
// target.
func layoutPrefix(target string) string {
	if target == "training" {
		return "night-"
	}
	return "day-"
}

// traceNode records the first time a node of the switch reached a precondition or an
// action (nodeTrace), on this clock.
func (t *timeline) traceNode(n *corev1.Node, inTarget bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if was, seen := t.cordoned[n.Name]; seen && !was && n.Spec.Unschedulable {
		t.cordons[n.Name]++
	}
	t.cordoned[n.Name] = n.Spec.Unschedulable
	if !strings.HasPrefix(n.Name, layoutPrefix(t.target)) {
		if n.Spec.Unschedulable && t.old[n.Name] == nil {
			t.old[n.Name] = &nodeTrace{Cordoned: now}
		}
		return
	}
	ready := n.Annotations[cluster.AnnotationSimPower] == "poweredOn" && cluster.Ready(n) && cluster.AdvertisedGPUs(n) != "0"
	tr := t.fresh[n.Name]
	if tr == nil && ready {
		tr = &nodeTrace{ReadyForWork: now}
		t.fresh[n.Name] = tr
	}
	if tr != nil && tr.Done.IsZero() && ready && inTarget && !n.Spec.Unschedulable {
		tr.Done = now
	}
}

// podGone records the deletion of a benchmark pod on a node the switch parks.
func (t *timeline) podGone(node string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr := t.old[node]; tr != nil && now.After(tr.PodsGone) {
		tr.PodsGone = now
	}
}

// trace is the switch as the watches saw it, with vgpusim's tasks started from start on.
func (t *timeline) trace(start time.Time, tasks []vgpusim.TaskRecord) *switchTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := &switchTrace{Start: start, Old: map[string]*nodeTrace{}, New: map[string]*nodeTrace{}, HostOf: benchHostOf, Cordons: maps.Clone(t.cordons)}
	for name, n := range t.old {
		c := *n
		tr.Old[name] = &c
	}
	for name, n := range t.fresh {
		c := *n
		tr.New[name] = &c
	}
	for _, task := range tasks {
		if !tr.local(task.Start).Before(start) {
			tr.Tasks = append(tr.Tasks, task)
		}
	}
	return tr
}

// benchHostOf is the host index in a benchmark VM's name (day-HH-g-k, night-HH-g).
func benchHostOf(vm string) string {
	parts := strings.Split(vm, "-")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// mark records that one more object reached the milestone (first time only per object).
func (t *timeline) mark(key, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := key + "/" + name
	if _, done := t.last[k]; done {
		return
	}
	d := time.Since(t.start)
	t.last[k] = d
	t.seen[key]++
	if d > t.last[key] {
		t.last[key] = d
	}
}

// String says when the last object reached each milestone, and how many did.
func (t *timeline) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, m := range milestones {
		if n := t.seen[m.key]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%d)", m.what, t.last[m.key].Round(100*time.Millisecond), n))
		}
	}
	return strings.Join(parts, ", ")
}
