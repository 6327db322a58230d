package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/eventwriter"
)

// TestEventsNameEveryNode runs two 4-node switches with the manager's recorder
// (internal/eventwriter, writing events.k8s.io Events as the operator's user, so with its
// generated RBAC)
// and reads the Events back from the API server. The events API folds events that share
// reason and object into one series that keeps the first note, so that is where lost
// nodes would show: every day node's cordon, drain, park and uncordon must be an Event
// of its own, regarding the node, related to the pool, and the pool keeps a summary of
// each transition that names the nodes.
func TestEventsNameEveryNode(t *testing.T) {
	h := newHarness(t, "evn-")
	cs, err := kubernetes.NewForConfig(operatorConfig)
	h.must(err)
	w := eventwriter.New(eventwriter.APISink{Client: cs.EventsV1()}, testScheme, eventwriter.Options{Controller: "gpupool"})
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	h.eventSink = w

	pool := h.dayNight()
	h.create(pool)
	// Monday 07:00 is night: the four running day VMs are drained and parked (the first
	// switch, from the VMs as found); at 07:50 day comes back: they are powered on,
	// relabelled and uncordoned.
	h.converge(pool.Name, "night", 60)
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.converge(pool.Name, "day", 60)

	var want []string
	for i := 1; i <= 4; i++ {
		node := fmt.Sprintf("%sday-%d", h.prefix, i)
		for _, reason := range []string{"Cordoned", "Drained", "SuspendStarted", "SuspendSucceeded", "PowerOnStarted", "Relabelled", "Uncordoned"} {
			want = append(want, "Node/"+node+" "+reason)
		}
	}
	want = append(want, "GPUPoolProfile/"+pool.Name+" TransitionStarted", "GPUPoolProfile/"+pool.Name+" TransitionCompleted")
	got := h.waitEvents(pool.Name, want)

	for _, e := range got {
		if e.Regarding.Kind == "Node" && (e.Related == nil || e.Related.Kind != "GPUPoolProfile" || e.Related.Name != pool.Name) {
			t.Errorf("event %s on node %s: related %+v, want the pool", e.Reason, e.Regarding.Name, e.Related)
		}
		if e.Regarding.Kind == "Node" && !strings.Contains(e.Note, e.Regarding.Name) {
			t.Errorf("event %s on node %s does not name it: %q", e.Reason, e.Regarding.Name, e.Note)
		}
	}
	// The pool's summaries name every node: what the first switch parks, what the second
	// brings back.
	var started, completed []string
	for _, e := range got {
		switch {
		case e.Regarding.Kind != "GPUPoolProfile":
		case e.Reason == "TransitionStarted":
			started = append(started, e.Note)
		case e.Reason == "TransitionCompleted":
			completed = append(completed, e.Note)
		}
	}
	// Each transition keeps its own summaries (their actions name the transition).
	p := h.prefix
	day := func(verb string) string {
		return fmt.Sprintf("%[2]s 4 %[3]s (%[1]sday-1, %[1]sday-2, %[1]sday-3, %[1]sday-4)", p, verb, map[bool]string{true: "VMs", false: "nodes"}[verb == "park" || verb == "power on"])
	}
	containsAll(t, "TransitionStarted", started, day("cordon and drain"), day("park"), fmt.Sprintf("power on 1 VM (%snight-1)", p),
		fmt.Sprintf("cordon and drain 1 node (%snight-1)", p), day("power on"), day("uncordon"))
	containsAll(t, "TransitionCompleted", completed,
		fmt.Sprintf("1 node (%[1]snight-1) serving it, 4 nodes (%[1]sday-1, %[1]sday-2, %[1]sday-3, %[1]sday-4) parked", p),
		fmt.Sprintf("4 nodes (%[1]sday-1, %[1]sday-2, %[1]sday-3, %[1]sday-4) serving it, 1 node (%[1]snight-1) parked", p))
	for _, n := range slices.Concat(started, completed) {
		if strings.Contains(n, "\n") {
			t.Errorf("a pool event of several lines (kubectl events prints a table): %q", n)
		}
	}
	if len(started) != 2 || len(completed) != 2 {
		t.Errorf("%d TransitionStarted and %d TransitionCompleted events on the pool, want one of each per transition (2)", len(started), len(completed))
	}
}

// waitEvents watches the Events related to the pool or on its nodes until every one of
// want ("Kind/name reason") is there, and returns them. The broadcaster writes them
// asynchronously, so the test waits for them with a deadline.
func (h *harness) waitEvents(pool string, want []string) []eventsv1.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	key := func(e eventsv1.Event) string { return e.Regarding.Kind + "/" + e.Regarding.Name + " " + e.Reason }
	ours := func(e eventsv1.Event) bool {
		return e.Regarding.Name == pool || (e.Related != nil && e.Related.Name == pool)
	}
	for {
		var list eventsv1.EventList
		h.must(k8s.List(ctx, &list))
		var got []eventsv1.Event
		have := map[string]bool{}
		for _, e := range list.Items {
			if ours(e) {
				got = append(got, e)
				have[key(e)] = true
			}
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return have[w] })
		if len(missing) == 0 {
			return got
		}
		w, err := k8s.Watch(ctx, &eventsv1.EventList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		h.must(err)
		select {
		case <-ctx.Done():
			w.Stop()
			h.t.Fatalf("events missing after 30s: %v", missing)
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				h.t.Logf("event watch: %v", ev.Object)
			}
		}
		w.Stop()
	}
}

func TestNamesCountsAndCuts(t *testing.T) {
	many := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for _, c := range []struct {
		items []string
		want  string
	}{
		{nil, "0 nodes"},
		{[]string{"a"}, "1 node (a)"},
		{[]string{"a", "b"}, "2 nodes (a, b)"},
		{many, "10 nodes (a, b, c, d, e, f, g, h and 2 more)"},
	} {
		if got := names(c.items, "node"); got != c.want {
			t.Errorf("names(%v) = %q, want %q", c.items, got, c.want)
		}
	}
	if got := counted("uncordon", nil, "node"); got != "" {
		t.Errorf("counted of none = %q, want empty", got)
	}
	if got := distinctAction("PowerOnStarted", strings.Repeat("v", 200)); len(got) != maxEventAction {
		t.Errorf("distinctAction of a long VM name has %d characters, want %d", len(got), maxEventAction)
	}
}
