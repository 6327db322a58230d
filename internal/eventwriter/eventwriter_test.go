package eventwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2030, 3, 4, 5, 6, 7, 0, time.UTC)

// call is one request the sink got.
type call struct {
	op        string // create, patch
	ev        *eventsv1.Event
	ns, name  string
	count     int32 // a patch's series count
	lastSeen  time.Time
	patchBody []byte
}

// fakeSink reports each request on calls and answers it with answer (nil: success).
// While hold is open, every request waits for it to close.
type fakeSink struct {
	calls  chan call
	mu     sync.Mutex
	answer func(call) error
	hold   chan struct{}
}

func (f *fakeSink) answerWith(a func(call) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

func newSink() *fakeSink { return &fakeSink{calls: make(chan call, 10000)} }

func (f *fakeSink) do(c call) error {
	if f.hold != nil {
		<-f.hold
	}
	f.calls <- c
	f.mu.Lock()
	a := f.answer
	f.mu.Unlock()
	if a != nil {
		return a(c)
	}
	return nil
}

func (f *fakeSink) Create(_ context.Context, ev *eventsv1.Event) error {
	return f.do(call{op: "create", ev: ev.DeepCopy(), ns: ev.Namespace, name: ev.Name})
}

func (f *fakeSink) Patch(_ context.Context, ns, name string, body []byte) error {
	var p struct{ Series eventsv1.EventSeries }
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	return f.do(call{op: "patch", ns: ns, name: name, count: p.Series.Count, lastSeen: p.Series.LastObservedTime.Time, patchBody: body})
}

// next is the sink's next request, or fails the test when none comes.
func (f *fakeSink) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no request to the sink")
		return call{}
	}
}

func node(name, rv string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv}}
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"}}
}

// start runs a writer on sink with one worker (events in order) and a fake clock; stop
// ends it and waits for its workers, after which the test may read their state.
func start(t *testing.T, sink Sink, o Options) (w *Writer, clk *clocktesting.FakeClock, stop func()) {
	t.Helper()
	clk = clocktesting.NewFakeClock(t0)
	o.Controller, o.Clock, o.Log = "gpupool", clk, logr.Discard()
	if o.Workers == 0 {
		o.Workers = 1
	}
	w = New(sink, clientgoscheme.Scheme, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return w, clk, stop
}

// TestEventIsClientGos records events of every shape with client-go's events recorder
// and with the Writer, and compares what each sends: the same events (but their
// generated names and times), the same first repeat's series patch.
func TestEventIsClientGos(t *testing.T) {
	type rec struct {
		regarding, related        runtime.Object
		typ, reason, action, note string
	}
	var recs []rec
	objs := []runtime.Object{node("n1", "1"), node("n2", "5"), configMap("apps", "cm"), node("n1", "2")}
	for i := range 40 {
		r := rec{regarding: objs[i%len(objs)], typ: []string{corev1.EventTypeNormal, corev1.EventTypeWarning}[i%2],
			reason: fmt.Sprintf("Reason%d", i%3), action: fmt.Sprintf("Action%d", i%5), note: fmt.Sprintf("note %d", i)}
		if i%3 == 0 {
			r.related = configMap("apps", "pool")
		}
		recs = append(recs, r)
	}
	// Distinct events only (repeats fold differently in time: compared below).
	seen := map[key]bool{}
	var distinct []rec
	// One writer never started: build takes back what each Eventf queued.
	probe := New(newSink(), clientgoscheme.Scheme, Options{Controller: "gpupool", Instance: "i", Clock: clocktesting.NewFakeClock(t0)})
	for _, r := range recs {
		ev := probe.build(t, r.regarding, r.related, r.typ, r.reason, r.action, r.note)
		if !seen[keyOf(ev)] {
			seen[keyOf(ev)] = true
			distinct = append(distinct, r)
		}
	}

	upstream := &upstreamSink{events: make(chan *eventsv1.Event, 100), patches: make(chan []byte, 100)}
	b := events.NewBroadcaster(upstream)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	theirs := b.NewRecorder(clientgoscheme.Scheme, "gpupool")

	sink := newSink()
	ours, _, _ := start(t, sink, Options{})
	for _, r := range distinct {
		theirs.Eventf(r.regarding, r.related, r.typ, r.reason, r.action, "%s", r.note)
		ours.Eventf(r.regarding, r.related, r.typ, r.reason, r.action, "%s", r.note)
	}
	norm := func(ev *eventsv1.Event) string {
		ev = ev.DeepCopy()
		ev.Name, ev.EventTime = "", metav1.MicroTime{}
		b, _ := json.Marshal(ev)
		return string(b)
	}
	want, got := map[string]int{}, map[string]int{}
	for range distinct {
		select {
		case ev := <-upstream.events:
			want[norm(ev)]++
		case <-time.After(10 * time.Second):
			t.Fatal("client-go's recorder wrote fewer events")
		}
		c := sink.next(t)
		if c.op != "create" {
			t.Fatalf("request %s, want create", c.op)
		}
		got[norm(c.ev)]++
	}
	if !maps.Equal(want, got) {
		t.Fatalf("events differ from client-go's:\nclient-go %v\nwriter    %v", want, got)
	}

	// A repeat: client-go patches the series at once with count 2; so does the Writer.
	r := distinct[0]
	ours.Eventf(r.regarding, r.related, r.typ, r.reason, r.action, "%s", "again")
	theirs.Eventf(r.regarding, r.related, r.typ, r.reason, r.action, "%s", "again")
	c := sink.next(t)
	var up []byte
	select {
	case up = <-upstream.patches:
	case <-time.After(10 * time.Second):
		t.Fatal("client-go's recorder sent no patch")
	}
	var theirsPatch, oursPatch map[string]map[string]any
	if err := json.Unmarshal(up, &theirsPatch); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(c.patchBody, &oursPatch); err != nil {
		t.Fatal(err)
	}
	if c.op != "patch" || oursPatch["series"]["count"] != theirsPatch["series"]["count"] || len(oursPatch) != len(theirsPatch) ||
		len(oursPatch["series"]) != len(theirsPatch["series"]) {
		t.Fatalf("first repeat: writer sent %s %s, client-go %s", c.op, c.patchBody, up)
	}
}

// upstreamSink is client-go's events.EventSink for TestEventIsClientGos.
type upstreamSink struct {
	events  chan *eventsv1.Event
	patches chan []byte
}

func (u *upstreamSink) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	u.events <- ev.DeepCopy()
	return ev, nil
}

func (u *upstreamSink) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return ev, nil
}

func (u *upstreamSink) Patch(_ context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	u.patches <- data
	return ev, nil
}

// build is the event Eventf queues, for the tests.
func (w *Writer) build(t *testing.T, regarding, related runtime.Object, typ, reason, action, note string) *eventsv1.Event {
	t.Helper()
	w.Eventf(regarding, related, typ, reason, action, "%s", note)
	for _, s := range w.shards {
		select {
		case it := <-s.queue:
			return it.ev
		default:
		}
	}
	t.Fatal("nothing queued")
	return nil
}

// sync1 waits until the worker has handled everything recorded before (a distinct
// event recorded now is written after them: one worker) and returns the requests made
// meanwhile.
func sync1(t *testing.T, w *Writer, sink *fakeSink, n int) []call {
	t.Helper()
	w.Eventf(configMap("sync", fmt.Sprintf("s%d", n)), nil, corev1.EventTypeNormal, "Sync", "Sync", "sync")
	var before []call
	for range 1000 {
		c := sink.next(t)
		if c.op == "create" && c.ns == "sync" {
			return before
		}
		before = append(before, c)
	}
	t.Fatal("no sync event")
	return nil
}

// TestSeries: repeats fold into the first event's series. The first repeat is written
// at once (count 2); later ones when the series has not been seen for FinishTime (its
// last count), or when it goes on, every RefreshTime; a finished series is forgotten, so
// its next repeat is an event of its own.
func TestSeries(t *testing.T) {
	sink := newSink()
	w, clk, _ := start(t, sink, Options{})
	n := node("n1", "3")
	rec := func() { w.Eventf(n, nil, corev1.EventTypeNormal, "Cordoned", "Cordoned", "cordoned n1") }

	rec()
	first := sink.next(t)
	if first.op != "create" || first.ev.Series != nil || first.ev.Namespace != "default" || first.ev.Regarding.Name != "n1" {
		t.Fatalf("first event: %+v", first)
	}
	clk.Step(time.Second)
	rec()
	if c := sink.next(t); c.op != "patch" || c.name != first.name || c.count != 2 || !c.lastSeen.Equal(t0.Add(time.Second)) {
		t.Fatalf("first repeat: %+v, want a patch of %s to count 2", c, first.name)
	}
	for range 3 {
		clk.Step(time.Second)
		rec()
	}
	if got := sync1(t, w, sink, 0); len(got) != 0 {
		t.Fatalf("repeats after the first: %+v, want nothing written", got)
	}

	// Not seen for FinishTime: its count (5) is written, and it is forgotten.
	lastSeen := clk.Now()
	clk.Step(FinishTime)
	if c := sink.next(t); c.op != "patch" || c.name != first.name || c.count != 5 || !c.lastSeen.Equal(lastSeen) {
		t.Fatalf("finish: %+v, want a patch of %s to count 5", c, first.name)
	}
	// The sync event (seen once, no count to write) is forgotten without a request.
	rec()
	if c := sink.next(t); c.op != "create" || c.name == first.name {
		t.Fatalf("after finish: %+v, want a new event", c)
	}

	// A series that goes on: its count is written every RefreshTime.
	m := node("m1", "9")
	w.Eventf(m, nil, corev1.EventTypeWarning, "Stalled", "Stalled", "stalled")
	mc := sink.next(t)
	w.Eventf(m, nil, corev1.EventTypeWarning, "Stalled", "Stalled", "stalled")
	if c := sink.next(t); c.op != "patch" || c.count != 2 {
		t.Fatalf("first repeat: %+v", c)
	}
	var patches []int32
	for i := range 40 {
		clk.Step(time.Minute)
		w.Eventf(m, nil, corev1.EventTypeWarning, "Stalled", "Stalled", "stalled")
		for _, c := range sync1(t, w, sink, 100+i) {
			if c.op == "patch" && c.name == mc.name {
				patches = append(patches, c.count)
			}
		}
	}
	// The 30th minute's sweep comes before or after that minute's repeat, or after the
	// next one (a tick and a queued event are taken in either order): counts 2 + 29 to
	// 2 + 31, once in 40 minutes.
	if len(patches) != 1 || patches[0] < 31 || patches[0] > 33 {
		t.Fatalf("refresh patches %v, want one count of 31-33 in 40 minutes", patches)
	}
}

// TestRepeatOfEventGone: a series whose event the API server no longer has (a patch
// answered NotFound) goes on in the repeat, written with the series' count.
func TestRepeatOfEventGone(t *testing.T) {
	sink := newSink()
	sink.answer = func(c call) error {
		if c.op == "patch" {
			return apierrors.NewNotFound(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, c.name)
		}
		return nil
	}
	w, clk, _ := start(t, sink, Options{})
	n := node("n1", "3")
	w.Eventf(n, nil, corev1.EventTypeNormal, "Drained", "Drained", "first")
	first := sink.next(t)
	clk.Step(time.Second)
	w.Eventf(n, nil, corev1.EventTypeNormal, "Drained", "Drained", "second")
	if c := sink.next(t); c.op != "patch" {
		t.Fatalf("%+v, want the patch", c)
	}
	c := sink.next(t)
	if c.op != "create" || c.name == first.name || c.ev.Note != "second" || c.ev.Series == nil || c.ev.Series.Count != 2 {
		t.Fatalf("%+v, want the repeat created in its place with the series' count (2)", c)
	}
	// The new event is the series now: its next repeat waits for the series' end.
	sink.answerWith(nil)
	w.Eventf(n, nil, corev1.EventTypeNormal, "Drained", "Drained", "third")
	if got := sync1(t, w, sink, 0); len(got) != 0 {
		t.Fatalf("%+v, want the third kept for the series' end", got)
	}
	clk.Step(FinishTime + tick)
	if p := sink.next(t); p.op != "patch" || p.name != c.name || p.count != 3 {
		t.Fatalf("%+v, want a patch of %s to 3", p, c.name)
	}
}

// TestKeys: events that differ in any of type, action, reason, reporting controller or
// instance, regarding or related (resourceVersion included) are not repeats; the note
// does not count.
func TestKeys(t *testing.T) {
	base := &eventsv1.Event{Type: "Normal", Action: "a", Reason: "r", ReportingController: "c", ReportingInstance: "i",
		Regarding: corev1.ObjectReference{Kind: "Node", Name: "n", UID: "u", APIVersion: "v1", ResourceVersion: "1"},
		Note:      "note"}
	k := keyOf(base)
	mutations := map[string]func(e *eventsv1.Event){
		"type":          func(e *eventsv1.Event) { e.Type = "Warning" },
		"action":        func(e *eventsv1.Event) { e.Action = "b" },
		"reason":        func(e *eventsv1.Event) { e.Reason = "s" },
		"controller":    func(e *eventsv1.Event) { e.ReportingController = "d" },
		"instance":      func(e *eventsv1.Event) { e.ReportingInstance = "j" },
		"kind":          func(e *eventsv1.Event) { e.Regarding.Kind = "Pod" },
		"namespace":     func(e *eventsv1.Event) { e.Regarding.Namespace = "x" },
		"name":          func(e *eventsv1.Event) { e.Regarding.Name = "m" },
		"uid":           func(e *eventsv1.Event) { e.Regarding.UID = "v" },
		"apiVersion":    func(e *eventsv1.Event) { e.Regarding.APIVersion = "v2" },
		"rv":            func(e *eventsv1.Event) { e.Regarding.ResourceVersion = "2" },
		"fieldPath":     func(e *eventsv1.Event) { e.Regarding.FieldPath = "spec" },
		"related":       func(e *eventsv1.Event) { e.Related = &corev1.ObjectReference{} },
		"related named": func(e *eventsv1.Event) { e.Related = &corev1.ObjectReference{Name: "n"} },
		// Lengths are part of the hash: moving a character between fields is another key.
		"boundary": func(e *eventsv1.Event) { e.Action, e.Reason = "ar", "" },
	}
	keys := map[key]string{k: "base"}
	for name, mut := range mutations {
		e := base.DeepCopy()
		mut(e)
		mk := keyOf(e)
		if other, dup := keys[mk]; dup {
			t.Errorf("%s: same key as %s", name, other)
		}
		keys[mk] = name
	}
	e := base.DeepCopy()
	e.Note, e.Name, e.EventTime = "another note", "x.1", metav1.NewMicroTime(t0)
	if keyOf(e) != k {
		t.Error("note, name and time changed the key")
	}
}

// TestQueueBounded: with the API server stalled, Eventf never blocks; what the queue
// cannot take is dropped and counted; once the API server answers, the queued events are
// written.
func TestQueueBounded(t *testing.T) {
	sink := newSink()
	sink.hold = make(chan struct{})
	w, _, _ := start(t, sink, Options{Queue: 8})
	before := testutil.ToFloat64(dropped.WithLabelValues(causeQueueFull))
	for i := range 100 {
		w.Eventf(node(fmt.Sprintf("n%d", i), "1"), nil, corev1.EventTypeNormal, "Cordoned", "Cordoned", "x")
	}
	// The worker holds one event (waiting on the sink), the queue 8: 8 or 9 taken, as the
	// worker took its first before the queue filled or after.
	drops := int(testutil.ToFloat64(dropped.WithLabelValues(causeQueueFull)) - before)
	if taken := 100 - drops; taken < 8 || taken > 9 {
		t.Fatalf("%d taken, %d dropped of 100: want 8-9 taken (the queue and the one in flight)", taken, drops)
	}
	close(sink.hold)
	for range 100 - drops {
		if c := sink.next(t); c.op != "create" {
			t.Fatalf("%+v, want a create", c)
		}
	}
	if got := sync1(t, w, sink, 0); len(got) != 0 {
		t.Fatalf("%d more requests", len(got))
	}
}

// TestSeriesBounded: past MaxSeries the least recently seen series is finished early
// (its count written) and forgotten; the writer remembers no more than MaxSeries.
func TestSeriesBounded(t *testing.T) {
	sink := newSink()
	w, clk, stop := start(t, sink, Options{MaxSeries: 4})
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{} // events recorded per node
	told := map[string]int32{} // what the API server has of each event, by its name
	nodeOf := map[string]string{}
	for range 400 {
		n := fmt.Sprintf("n%d", rng.IntN(12))
		counts[n]++
		clk.Step(time.Millisecond) // events of a node have names of their own
		w.Eventf(node(n, "1"), nil, corev1.EventTypeNormal, "Step", "Step", "x")
	}
	calls := sync1(t, w, sink, 0)
	stop()
	// What the sync event's create ended early comes after it.
	for len(sink.calls) > 0 {
		calls = append(calls, <-sink.calls)
	}
	patches := 0
	for _, c := range calls {
		switch c.op {
		case "create":
			told[c.name], nodeOf[c.name] = 1, c.ev.Regarding.Name
		case "patch":
			told[c.name] = c.count
			patches++
		}
	}
	if patches == 0 {
		t.Fatal("no series written")
	}
	if got := len(w.shards[0].series); got > 4 {
		t.Fatalf("%d series remembered, max 4", got)
	}
	// Every event recorded is told, or pending in a series still remembered.
	for name, c := range told {
		counts[nodeOf[name]] -= int(c)
	}
	for e := w.shards[0].order.Front(); e != nil; e = e.Next() {
		if se := e.Value.(*series); se.namespace == "default" {
			counts[nodeOf[se.name]] -= int(se.count - se.written)
		}
	}
	for n, c := range counts {
		if c != 0 {
			t.Errorf("%s: %d events neither told nor pending", n, c)
		}
	}
}

// errUnreachable is a failure to reach the API server (not an answer).
var errUnreachable = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

// TestRetries: an API server that cannot be reached is tried again RetryAfter apart,
// MaxTries in all, then the event is dropped and counted; an answer refusing the event is
// not retried.
func TestRetries(t *testing.T) {
	sink := newSink()
	fails := 3
	sink.answer = func(c call) error {
		switch {
		case c.ev != nil && c.ev.Reason == "Refused":
			return apierrors.NewBadRequest("invalid")
		case c.ev != nil && c.ev.Reason == "Never":
			return errUnreachable
		case fails > 0:
			fails--
			return errUnreachable
		}
		return nil
	}
	w, clk, _ := start(t, sink, Options{})
	// step advances the clock until the worker's next request.
	step := func() call {
		t.Helper()
		for range 2000 {
			select {
			case c := <-sink.calls:
				return c
			case <-time.After(5 * time.Millisecond):
				clk.Step(RetryAfter * 5 / 4)
			}
		}
		t.Fatal("no retry")
		return call{}
	}
	w.Eventf(node("n1", "1"), nil, corev1.EventTypeNormal, "Late", "Late", "x")
	sink.next(t)
	for range 3 {
		if c := step(); c.op != "create" || c.ev.Reason != "Late" {
			t.Fatalf("%+v, want the retry", c)
		}
	}
	if got := sync1(t, w, sink, 2); len(got) != 0 {
		t.Fatalf("written again after it succeeded: %+v", got)
	}

	rejected := testutil.ToFloat64(dropped.WithLabelValues(causeRejected))
	w.Eventf(node("n1", "1"), nil, corev1.EventTypeNormal, "Refused", "Refused", "x")
	sink.next(t)
	if got := sync1(t, w, sink, 0); len(got) != 0 {
		t.Fatalf("a refused event retried: %+v", got)
	}
	if got := testutil.ToFloat64(dropped.WithLabelValues(causeRejected)) - rejected; got != 1 {
		t.Fatalf("rejected counted %v, want 1", got)
	}

	unreachable := testutil.ToFloat64(dropped.WithLabelValues(causeUnreachable))
	w.Eventf(node("n1", "1"), nil, corev1.EventTypeNormal, "Never", "Never", "x")
	sink.next(t)
	for range MaxTries - 1 {
		step()
	}
	if got := sync1(t, w, sink, 1); len(got) != 0 {
		t.Fatalf("tried more than %d times: %+v", MaxTries, got)
	}
	if got := testutil.ToFloat64(dropped.WithLabelValues(causeUnreachable)) - unreachable; got != 1 {
		t.Fatalf("unreachable counted %v, want 1 after %d tries", got, MaxTries)
	}
}

// TestNotRecorded: an event of another type, or whose object has no reference, is not
// written.
func TestNotRecorded(t *testing.T) {
	sink := newSink()
	w, _, _ := start(t, sink, Options{})
	w.Eventf(node("n1", "1"), nil, "Info", "R", "A", "x")
	w.Eventf(&struct{ corev1.Node }{}, nil, corev1.EventTypeNormal, "R", "A", "x")
	if got := sync1(t, w, sink, 0); len(got) != 0 {
		t.Fatalf("written: %+v", got)
	}
}
