package controllers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// idle waits until the pool's batch, if any, has ended, and keeps it for wait (tests:
// a write counts for the pass that decided it).
func (b *stateBatches) idle(pool string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	sb := b.pools[pool]
	b.mu.Unlock()
	if sb != nil {
		<-sb.done
	}
}

// marksOf are state labels to write, the warnings left as they are.
func marksOf(states ...string) []nodeMarks {
	out := make([]nodeMarks, len(states))
	for i, st := range states {
		out[i] = nodeMarks{state: st}
	}
	return out
}

func batchNodes(names ...string) []*corev1.Node {
	out := make([]*corev1.Node, len(names))
	for i, n := range names {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, ResourceVersion: "rv-" + n}}
	}
	return out
}

// TestStateBatches: a batch runs past the call that starts it; wait returns the labels
// that landed, with the version each node was read at, and forgets the batch; a second
// batch of a pool starts only once the first has ended (its patches find the first's
// all returned, however the goroutines are scheduled); a pool without a batch, or no
// batches at all (nil), waits for nothing.
func TestStateBatches(t *testing.T) {
	var nilBatches *stateBatches
	if errs, landed := nilBatches.wait("p"); errs != nil || landed != nil {
		t.Fatal("nil batches returned something")
	}
	b := newStateBatches(t.Context())
	if errs, landed := b.wait("p"); errs != nil || landed != nil {
		t.Fatal("a pool without a batch returned something")
	}
	release := make(chan struct{})
	var firstReturned atomic.Int32
	b.start("p", batchNodes("a", "b"), marksOf("parked", "ready"), func(context.Context, *corev1.Node, nodeMarks) error {
		<-release
		firstReturned.Add(1)
		return nil
	})
	seen := make(chan int32, 1)
	second := make(chan struct{})
	go func() {
		defer close(second)
		b.start("p", batchNodes("c"), marksOf("pending"), func(context.Context, *corev1.Node, nodeMarks) error {
			seen <- firstReturned.Load()
			return nil
		})
	}()
	close(release)
	<-second
	errs, landed := b.wait("p")
	if n := <-seen; n != 2 {
		t.Fatalf("the second batch patched when %d of the first's 2 patches had returned", n)
	}
	if len(errs) != 0 || len(landed) != 1 || landed["c"] != (landedState{readAt: "rv-c", marks: nodeMarks{state: "pending"}}) {
		t.Fatalf("second batch: errs %v landed %v", errs, landed)
	}
	if errs, landed := b.wait("p"); errs != nil || landed != nil {
		t.Fatal("wait did not forget the batch")
	}
}

// TestStateBatchReportsFailures: what a batch found comes back to the next wait.
func TestStateBatchReportsFailures(t *testing.T) {
	b := newStateBatches(t.Context())
	b.start("p", batchNodes("a", "bad"), marksOf("parked", "ready"), func(_ context.Context, n *corev1.Node, _ nodeMarks) error {
		if n.Name == "bad" {
			return errors.New("refused")
		}
		return nil
	})
	errs, landed := b.wait("p")
	if len(errs) != 1 || errs[0].Error() != "refused" || len(landed) != 1 || landed["a"] != (landedState{readAt: "rv-a", marks: nodeMarks{state: "parked"}}) {
		t.Fatalf("errs %v landed %v", errs, landed)
	}
}

// TestStatesToWrite: a node is written its state unless it carries the value and the
// pool's record, as read, or as the pool's last batch wrote them after the pass read the
// node (the read is at the version the batch started from): then what the batch wrote
// counts, not the read.
func TestStatesToWrite(t *testing.T) {
	node := func(name, rv, state, owner string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if state != "" {
			n.Labels[LabelState] = state
		}
		if owner != "" {
			n.Annotations[AnnotationMarkedBy] = owner
		}
		return n
	}
	ready := nodes.StateFacts{PoweredOn: true, NodeReady: true, InLayout: true} // "ready"
	cases := []struct {
		name   string
		node   *corev1.Node
		landed map[string]landedState
		write  bool
	}{
		{"carries it", node("n", "5", "ready", "p"), nil, false},
		{"no label", node("n", "5", "", ""), nil, true},
		{"other value", node("n", "5", "pending", "p"), nil, true},
		{"other owner", node("n", "5", "ready", "q"), nil, true},
		{"landed after the read", node("n", "5", "pending", "p"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "ready"}}}, false},
		{"landed, read since", node("n", "6", "pending", "p"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "ready"}}}, true},
		{"landed another value", node("n", "5", "pending", "p"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "reconfiguring"}}}, true},
		{"read shows it, but the batch wrote another value since", node("n", "5", "ready", "p"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "pending"}}}, true},
		{"read shows it, the batch wrote another value before the read", node("n", "6", "ready", "p"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "pending"}}}, false},
		{"landed after the read, another owner read", node("n", "5", "pending", "q"), map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "ready"}}}, false},
		{"landed on another node", node("n", "5", "pending", "p"), map[string]landedState{"m": {readAt: "5", marks: nodeMarks{state: "ready"}}}, true},
	}
	for _, c := range cases {
		got := statesToWrite(map[string]nodes.StateFacts{"vm": ready}, map[string]*corev1.Node{"vm": c.node}, "p", nil, c.landed)
		if _, w := got["vm"]; w != c.write || (w && got["vm"] != "ready") {
			t.Errorf("%s: %v, want written: %t", c.name, got, c.write)
		}
	}
}

// TestStateBatchWaitNode: a write to a node waits for the batches' writes to that node
// only, of every pool: a node no batch writes waits for nothing (it would hang here while
// the batches are held), one that two pools' batches write waits until both writes have
// returned. The batches' writes are held a while after the waiter starts, so that a
// wait that returned early would log before them.
func TestStateBatchWaitNode(t *testing.T) {
	b := newStateBatches(t.Context())
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	logged := func(what string) {
		mu.Lock()
		order = append(order, what)
		mu.Unlock()
	}
	for _, pool := range []string{"p", "q"} {
		b.start(pool, batchNodes("a", "b-"+pool), marksOf("parked", "ready"), func(_ context.Context, n *corev1.Node, _ nodeMarks) error {
			if n.Name == "a" {
				<-release
				logged(pool + " wrote a")
			}
			return nil
		})
	}
	b.waitNode("c") // in no batch
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	b.waitNode("a")
	logged("a free")
	b.wait("p")
	b.wait("q")
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(order, "a free"); i != 2 {
		t.Errorf("order %v: the wait for a returned before both batches' writes to a", order)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.nodes) != 0 {
		t.Errorf("writes left recorded after the batches: %v", b.nodes)
	}
}

// TestStateBatchTakeNode: the ready follower's write to a node takes over its pool's
// batch write to that node not yet started (never made, neither landed nor failed, and
// the follower does not wait for the batch's other writes), but waits for a write under
// way and for another pool's, which are made.
func TestStateBatchTakeNode(t *testing.T) {
	b := newStateBatches(t.Context())
	release := make(chan struct{})
	began := make(chan string, 64)
	var mu sync.Mutex
	patched := map[string]bool{}
	hold := func(_ context.Context, n *corev1.Node, _ nodeMarks) error {
		began <- n.Name
		<-release
		mu.Lock()
		patched[n.Name] = true
		mu.Unlock()
		return nil
	}
	// One more node than the batch writes at once: the last waits for a free writer.
	var names []string
	for i := range 16 + 1 {
		names = append(names, string(rune('a'+i)))
	}
	wants := slices.Repeat(marksOf("pending"), len(names))
	b.start("p", batchNodes(names...), wants, hold)
	running := map[string]bool{}
	for range 16 {
		running[<-began] = true
	}
	var queued, under string
	for _, n := range names {
		if !running[n] {
			queued = n
		} else if under == "" {
			under = n
		}
	}
	b.takeNode(queued, "p") // returns with every started write still held
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.takeNode(under, "p")
	}()
	close(release)
	<-done
	mu.Lock()
	if !patched[under] {
		t.Errorf("the follower's write to %s did not wait for the batch's write under way", under)
	}
	mu.Unlock()
	errs, landed := b.wait("p")
	mu.Lock()
	defer mu.Unlock()
	if patched[queued] {
		t.Errorf("the batch wrote %s after the follower took it over", queued)
	}
	if _, ok := landed[queued]; ok || len(errs) != 0 || len(landed) != 16 {
		t.Errorf("landed %v errs %v: want the 16 writes made, not the one taken over", landed, errs)
	}

	// Another pool's follower does not take over p's write not yet started: it waits
	// for it to be made.
	b2 := newStateBatches(t.Context())
	release2 := make(chan struct{})
	began2 := make(chan string, 64)
	var made atomic.Bool
	b2.start("p", batchNodes(names...), wants, func(_ context.Context, n *corev1.Node, _ nodeMarks) error {
		began2 <- n.Name
		<-release2
		if n.Name == queued {
			made.Store(true)
		}
		return nil
	})
	running = map[string]bool{}
	for range 16 {
		running[<-began2] = true
	}
	for _, n := range names {
		if !running[n] {
			queued = n
		}
	}
	wait := b2.takeOver(queued, "q")
	if len(wait) != 1 || wait[0].skipped {
		t.Errorf("another pool's follower took over p's write to %s not yet started (waits for %v)", queued, wait)
	}
	close(release2)
	for _, w := range wait {
		<-w.done
	}
	if !made.Load() {
		t.Errorf("another pool's follower took over p's write to %s", queued)
	}
	b2.wait("p")
	if len(b.nodes)+len(b2.nodes) != 0 {
		t.Errorf("writes left recorded: %v %v", b.nodes, b2.nodes)
	}
}

// TestMarksLandedApartByKind: what a batch wrote counts for the kind of mark it wrote
// only: a batch that wrote a node's warning alone says nothing of its state label, and
// one that wrote its state alone nothing of its warning. The node, read before the
// batch's write landed, carries the wanted label and warning; a batch that wrote only
// the other kind must not make the pass write them again.
func TestMarksLandedApartByKind(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "5", Labels: map[string]string{LabelState: "ready"},
		Annotations: map[string]string{AnnotationMarkedBy: "p"}}}
	nodes.SetWarning(n, monday1950, true)
	ready := nodes.StateFacts{PoweredOn: true, NodeReady: true, InLayout: true}
	facts, byVM, want := map[string]nodes.StateFacts{"vm": ready}, map[string]*corev1.Node{"vm": n}, map[string]time.Time{"vm": monday1950}
	warnOnly := map[string]landedState{"n": {readAt: "5", marks: nodeMarks{warn: warnChange{set: true, on: true, at: monday1950}}}}
	if got := statesToWrite(facts, byVM, "p", nil, warnOnly); len(got) != 0 {
		t.Errorf("a landed warning took for the state label: %v", got)
	}
	stateOnly := map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "ready"}}}
	if got := warningsToWrite(want, byVM, stateOnly); len(got) != 0 {
		t.Errorf("a landed state label took for the warning: %v", got)
	}
	// And each kind the batch wrote counts over the read.
	if got := statesToWrite(facts, byVM, "p", nil, map[string]landedState{"n": {readAt: "5", marks: nodeMarks{state: "pending"}}}); got["vm"] != "ready" {
		t.Errorf("a landed state label did not count: %v", got)
	}
	if got := warningsToWrite(want, byVM, map[string]landedState{"n": {readAt: "5", marks: nodeMarks{warn: warnChange{set: true}}}}); !got["vm"].set || !got["vm"].on {
		t.Errorf("a landed warning did not count: %v", got)
	}
}

// TestStepMarksKeepTheAnnouncedStart: a step's patch puts the warning the pass wants on
// its node, but a drain under way keeps the earlier start its node carries as it is
// patched (the pass may have read the node before the last batch's warning landed);
// a later start, a warning ahead of a switch (in the future) and no warning wanted are
// written as decided.
func TestStepMarksKeepTheAnnouncedStart(t *testing.T) {
	now := monday1950
	earlier, later, ahead := now.Add(-time.Minute), now.Add(time.Minute), now.Add(10*time.Minute)
	cases := []struct {
		name    string
		carried *time.Time // the node's warning as patched (nil: none)
		want    *time.Time // the pass's (nil: none)
		result  *time.Time // the node's after the patch (nil: none)
	}{
		{"no warning carried", nil, &now, &now},
		{"an earlier start carried", &earlier, &now, &earlier},
		{"a later start carried", &later, &now, &now},
		{"the same start", &now, &now, &now},
		{"ahead of a switch, another carried", &earlier, &ahead, &ahead},
		{"none wanted", &earlier, nil, nil},
	}
	for _, c := range cases {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}}
		if c.carried != nil {
			nodes.SetWarning(n, *c.carried, true)
		}
		warn := map[string]time.Time{}
		if c.want != nil {
			warn["vm"] = *c.want
		}
		stepMarks(nil, warn, "p", now)("vm", false, n)
		at, has := nodes.DrainAt(n)
		switch {
		case c.result == nil && nodes.HasAnyWarning(n):
			t.Errorf("%s: the node keeps a warning: %v", c.name, n.Annotations)
		case c.result != nil && (!has || !at.Equal(*c.result) || !nodes.HasWarning(n, *c.result)):
			t.Errorf("%s: the node announces %v (%t), want %v", c.name, at, has, *c.result)
		}
	}
}

// TestWarningsToWrite: a node is written its warning unless it carries the one wanted
// (announcing the same drain start, to the second, annotation and taint) or none when
// none is wanted (neither annotation nor taint), as read, or as the pool's last batch
// wrote it after the pass read the node; every combination of what the node carries,
// what the batch wrote and what is wanted.
func TestWarningsToWrite(t *testing.T) {
	at, other := monday1950, monday1950.Add(time.Hour)
	type carried struct {
		name  string
		apply func(*corev1.Node)
		has   *time.Time // the warning it carries whole (nil: none)
		any   bool       // any part of one
	}
	carries := []carried{
		{"nothing", func(*corev1.Node) {}, nil, false},
		{"the warning", func(n *corev1.Node) { nodes.SetWarning(n, at, true) }, &at, true},
		{"another drain's", func(n *corev1.Node) { nodes.SetWarning(n, other, true) }, &other, true},
		{"the annotation alone", func(n *corev1.Node) {
			nodes.SetWarning(n, at, true)
			n.Spec.Taints = nil
		}, nil, true},
		{"the taint alone", func(n *corev1.Node) {
			nodes.SetWarning(n, at, true)
			delete(n.Annotations, gpupoolv1.AnnotationDrainAt)
		}, nil, true},
	}
	landings := []struct {
		name string
		l    *warnChange // nil: none after the read
		rv   string      // the version the batch read the node at
	}{
		{"no batch", nil, ""},
		{"wrote it, after the read", &warnChange{set: true, on: true, at: at.Add(300 * time.Millisecond)}, "5"},
		{"took it off, after the read", &warnChange{set: true}, "5"},
		{"wrote another, after the read", &warnChange{set: true, on: true, at: other}, "5"},
		{"wrote it, before the read", &warnChange{set: true, on: true, at: at}, "4"},
	}
	wants := []struct {
		name string
		want map[string]time.Time
	}{{"wanted", map[string]time.Time{"vm": at}}, {"not wanted", nil}}
	for _, c := range carries {
		for _, l := range landings {
			for _, w := range wants {
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "5", Annotations: map[string]string{}}}
				c.apply(n)
				has, anyPart := c.has, c.any
				var landed map[string]landedState
				if l.l != nil {
					landed = map[string]landedState{"n": {readAt: l.rv, marks: nodeMarks{warn: *l.l}}}
					if l.rv == "5" {
						has, anyPart = nil, l.l.on
						if l.l.on {
							has = &l.l.at
						}
					}
				}
				_, warn := w.want["vm"]
				carriesWanted := has != nil && has.Truncate(time.Second).Equal(at)
				write := warn != carriesWanted || (!warn && anyPart)
				got := warningsToWrite(w.want, map[string]*corev1.Node{"vm": n}, landed)
				g, ok := got["vm"]
				if ok != write || (ok && (g != warnChange{set: true, on: warn, at: w.want["vm"]})) {
					t.Errorf("node carries %s, batch %s, %s: got %+v (%t), want written: %t", c.name, l.name, w.name, g, ok, write)
				}
			}
		}
	}
}

// TestAnnouncedDrains: the drain start a node announces is its annotation's, or what
// the pool's last batch wrote after the pass read it (a warning taken off announces
// none); a state label the batch wrote alone leaves the annotation's.
func TestAnnouncedDrains(t *testing.T) {
	warned := func(name, rv string, at time.Time) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Annotations: map[string]string{}}}
		nodes.SetWarning(n, at, true)
		return n
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", ResourceVersion: "5"}}
	byVM := map[string]*corev1.Node{"a": warned("a", "5", monday1950), "b": warned("b", "5", monday1950), "c": warned("c", "5", monday1950),
		"d": bare, "e": warned("e", "6", monday1950)}
	later := monday1950.Add(time.Minute)
	landed := map[string]landedState{
		"b":    {readAt: "5", marks: nodeMarks{warn: warnChange{set: true}}},
		"c":    {readAt: "5", marks: nodeMarks{state: "draining"}},
		"bare": {readAt: "5", marks: nodeMarks{warn: warnChange{set: true, on: true, at: later}}},
		"e":    {readAt: "5", marks: nodeMarks{warn: warnChange{set: true}}},
	}
	got := announcedDrains(byVM, landed)
	want := map[string]time.Time{"a": monday1950, "c": monday1950, "d": later, "e": monday1950}
	if len(got) != len(want) {
		t.Fatalf("announced %v, want %v", got, want)
	}
	for vm, at := range want {
		if !got[vm].Equal(at) {
			t.Errorf("%s announces %v, want %v", vm, got[vm], at)
		}
	}
}

// TestCarriedWarning: the warning a node carries for the passes that only take warnings
// off (withdrawWarnings) is the one read, or the one the last batch wrote after the read.
func TestCarriedWarning(t *testing.T) {
	warned := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w", ResourceVersion: "5", Annotations: map[string]string{}}}
	nodes.SetWarning(warned, monday1950, true)
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", ResourceVersion: "5"}}
	taintOnly := warned.DeepCopy()
	taintOnly.Name = "t"
	delete(taintOnly.Annotations, gpupoolv1.AnnotationDrainAt)
	later := monday1950.Add(time.Hour)
	cases := []struct {
		name   string
		n      *corev1.Node
		landed map[string]landedState
		warned bool
		at     *time.Time
	}{
		{"read, warned", warned, nil, true, &monday1950},
		{"read, none", bare, nil, false, nil},
		{"read, the taint alone", taintOnly, nil, true, nil},
		{"the batch wrote one after the read", bare, map[string]landedState{"b": {readAt: "5", marks: nodeMarks{warn: warnChange{set: true, on: true, at: later}}}}, true, &later},
		{"the batch took it off after the read", warned, map[string]landedState{"w": {readAt: "5", marks: nodeMarks{warn: warnChange{set: true}}}}, false, nil},
		{"the batch wrote a state alone", warned, map[string]landedState{"w": {readAt: "5", marks: nodeMarks{state: "ready"}}}, true, &monday1950},
		{"the batch wrote before the read", bare, map[string]landedState{"b": {readAt: "4", marks: nodeMarks{warn: warnChange{set: true, on: true, at: later}}}}, false, nil},
	}
	for _, c := range cases {
		w, at, ok := carriedWarning(c.n, c.landed)
		if w != c.warned || ok != (c.at != nil) || (ok && !at.Equal(*c.at)) {
			t.Errorf("%s: warned %t at %v (%t), want %t %v", c.name, w, at, ok, c.warned, c.at)
		}
	}
}
