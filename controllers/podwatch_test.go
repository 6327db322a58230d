package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
)

// scriptedPods is a podSource the test answers call by call: each list, watch, event
// read and pause is a request on calls that waits for the test's answer, so that the
// watch's goroutine and the test take turns and nothing depends on timing.
type scriptedPods struct {
	calls chan *podCall
}

type podCall struct {
	kind    string // list, watch, next, pause
	version string // list, watch: from which version
	timeout time.Duration
	answer  chan podAnswer
}

type podAnswer struct {
	pods    []corev1.Pod
	version string
	typ     watch.EventType
	obj     runtime.Object
	err     error
	resume  bool // pause: go on (false: as if ctx ended)
}

func (s *scriptedPods) ask(c *podCall) podAnswer {
	c.answer = make(chan podAnswer, 1)
	s.calls <- c
	return <-c.answer
}

func (s *scriptedPods) list(_ context.Context, version string) ([]corev1.Pod, string, error) {
	a := s.ask(&podCall{kind: "list", version: version})
	return a.pods, a.version, a.err
}

func (s *scriptedPods) watch(_ context.Context, version string, timeout time.Duration) (podEvents, error) {
	a := s.ask(&podCall{kind: "watch", version: version, timeout: timeout})
	if a.err != nil {
		return nil, a.err
	}
	return scriptedEvents{s}, nil
}

func (s *scriptedPods) pause(_ context.Context, d time.Duration) bool {
	return s.ask(&podCall{kind: "pause", timeout: d}).resume
}

type scriptedEvents struct{ s *scriptedPods }

func (e scriptedEvents) next() (watch.EventType, runtime.Object, error) {
	a := e.s.ask(&podCall{kind: "next"})
	return a.typ, a.obj, a.err
}
func (e scriptedEvents) close() {}

func swPod(name, version string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", ResourceVersion: version},
		Spec: corev1.PodSpec{NodeName: "n1"}}
}

var (
	errGone     = apierrors.NewResourceExpired("too old resource version: 5 (10)")
	errTooLarge = func() error {
		e := apierrors.NewTimeoutError("Too large resource version", 1)
		e.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
		return e
	}()
)

func goneStatus() runtime.Object {
	st := errGone.Status()
	return &st
}

// step is one call the watch is expected to make and the answer it gets; advance moves
// the clock before the answer (how long the watch ran).
type step struct {
	kind, version string
	answer        podAnswer
	advance       time.Duration
	// wantPause is the wait a pause asks.
	wantPause time.Duration
}

// TestRunPodWatch drives a node's pod watch through the API server's answers a watch
// meets: renewals, versions the server no longer keeps (as a refused watch or as an
// error event), failed lists and watches (the waits double up to 30 s and a healthy
// watch resets them), a stream that ends at once, events of other types, and the end
// of its context, checking each call's kind and version, the store after each script,
// and that the goroutine ends.
func TestRunPodWatch(t *testing.T) {
	const timeout = 30 * time.Minute
	listed := func(version string, pods ...*corev1.Pod) podAnswer {
		a := podAnswer{version: version}
		for _, p := range pods {
			a.pods = append(a.pods, *p)
		}
		return a
	}
	ev := func(typ watch.EventType, obj runtime.Object) podAnswer { return podAnswer{typ: typ, obj: obj} }
	eof := podAnswer{err: io.EOF}
	broken := podAnswer{err: errors.New("connection reset by peer")}
	refused := podAnswer{err: apierrors.NewServiceUnavailable("the server is shutting down")}
	cases := []struct {
		name  string
		steps []step
		want  []string // the store's pods (name@version) at the end
		wakes int      // how many times the store said that what a drain waits for changed
	}{
		{name: "events apply, a renewal resumes from the last version without a list", steps: []step{
			{kind: "list", version: "0", answer: listed("10", swPod("a", "8"), swPod("b", "9"))},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev(watch.Added, swPod("c", "11"))},
			{kind: "next", answer: ev(watch.Modified, swPod("a", "12"))},
			{kind: "next", answer: ev(watch.Deleted, swPod("b", "13"))},
			{kind: "next", answer: eof, advance: timeout},
			{kind: "watch", version: "13"},
			{kind: "next", answer: ev(watch.Bookmark, swPod("", "20"))},
			{kind: "next", answer: eof, advance: timeout},
			{kind: "watch", version: "20"},
		}, want: []string{"a@12", "c@11"}, wakes: 1},
		{name: "a renewal refused as too old lists again", steps: []step{
			{kind: "list", version: "0", answer: listed("10", swPod("a", "8"), swPod("b", "9"))},
			{kind: "watch", version: "10"},
			{kind: "next", answer: eof, advance: timeout},
			{kind: "watch", version: "10", answer: podAnswer{err: errGone}},
			{kind: "list", version: "10", answer: listed("30", swPod("a", "8"), swPod("d", "25"))},
			{kind: "watch", version: "30"},
		}, want: []string{"a@8", "d@25"}, wakes: 1},
		{name: "an expired error event lists again", steps: []step{
			{kind: "list", version: "0", answer: listed("10", swPod("a", "8"))},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev(watch.Modified, swPod("a", "11"))},
			{kind: "next", answer: ev(watch.Error, goneStatus())},
			{kind: "list", version: "11", answer: listed("40")},
			{kind: "watch", version: "40"},
		}, want: nil, wakes: 1},
		{name: "failed lists wait, doubling up to 30 s", steps: []step{
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 2 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 4 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 8 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 16 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 30 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: 30 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "0", answer: listed("10", swPod("a", "8"))},
			{kind: "watch", version: "10"},
		}, want: []string{"a@8"}},
		{name: "a failed watch waits and resumes from its version; an event resets the wait", steps: []step{
			{kind: "list", version: "0", answer: listed("10", swPod("a", "8"))},
			{kind: "watch", version: "10", answer: podAnswer{err: refused.err}},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
			{kind: "next", answer: broken},
			{kind: "pause", wantPause: 2 * time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev(watch.Added, swPod("b", "12"))},
			{kind: "next", answer: broken},
			{kind: "watch", version: "12"},
			{kind: "next", answer: broken},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "12"},
		}, want: []string{"a@8", "b@12"}},
		{name: "a stream that ends at once, again and again, waits", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10"},
			{kind: "next", answer: eof},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
			{kind: "next", answer: eof},
			{kind: "pause", wantPause: 2 * time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
			{kind: "next", answer: eof, advance: 2 * time.Second},
			{kind: "watch", version: "10"},
		}},
		{name: "what is not a pod, or an unknown event, lists again", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev(watch.Added, &corev1.Node{})},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "10", answer: listed("10")},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev("SURPRISE", swPod("a", "11"))},
			{kind: "pause", wantPause: 2 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "10", answer: listed("10")},
			{kind: "watch", version: "10"},
		}},
		{name: "a version gone right after its list waits before listing again", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10", answer: podAnswer{err: errGone}},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "10", answer: listed("12")},
			{kind: "watch", version: "12", answer: podAnswer{err: errGone}},
			{kind: "pause", wantPause: 2 * time.Second, answer: podAnswer{resume: true}},
			{kind: "list", version: "12", answer: listed("12")},
			{kind: "watch", version: "12"},
			{kind: "next", answer: ev(watch.Added, swPod("c", "13"))},
			{kind: "next", answer: ev(watch.Error, goneStatus())},
			{kind: "list", version: "13", answer: listed("20", swPod("c", "13"))},
			{kind: "watch", version: "20"},
		}, want: []string{"c@13"}},
		{name: "a version the watch cache refuses too is listed as of now, at once", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10"},
			{kind: "next", answer: eof, advance: timeout},
			{kind: "watch", version: "10", answer: podAnswer{err: errGone}},
			{kind: "list", version: "10", answer: podAnswer{err: errTooLarge}},
			{kind: "list", version: "", answer: listed("20", swPod("d", "19"))},
			{kind: "watch", version: "20"},
		}, want: []string{"d@19"}},
		{name: "the wait the API server asks is kept", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10", answer: podAnswer{err: apierrors.NewTooManyRequests("slow down", 7)}},
			{kind: "pause", wantPause: 7 * time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
		}},
		{name: "another error event waits and resumes from its version", steps: []step{
			{kind: "list", version: "0", answer: listed("10")},
			{kind: "watch", version: "10"},
			{kind: "next", answer: ev(watch.Error, &metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError})},
			{kind: "pause", wantPause: time.Second, answer: podAnswer{resume: true}},
			{kind: "watch", version: "10"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			src := &scriptedPods{calls: make(chan *podCall)}
			clk := testingclock.NewFakePassiveClock(time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC))
			wakes := 0
			store := newPodStore(func() { wakes++ })
			done := make(chan struct{})
			go func() {
				defer close(done)
				runPodWatch(ctx, src, store, timeout, clk, src.pause)
			}()
			for i, s := range c.steps {
				call := <-src.calls
				if call.kind != s.kind || ((s.kind == "watch" || s.kind == "list") && call.version != s.version) {
					t.Fatalf("call %d: %s from %q, want %s from %q", i, call.kind, call.version, s.kind, s.version)
				}
				if s.kind == "watch" && (call.timeout < timeout || call.timeout > 2*timeout) {
					t.Errorf("call %d: a watch of %s, want %s to %s", i, call.timeout, timeout, 2*timeout)
				}
				if s.kind == "pause" && (call.timeout < s.wantPause || call.timeout >= 2*s.wantPause) {
					t.Errorf("call %d: a pause of %s, want %s up to twice as long", i, call.timeout, s.wantPause)
				}
				clk.SetTime(clk.Now().Add(s.advance))
				call.answer <- s.answer
			}
			// The watch's next call is under way: the context's end answers it, and
			// the goroutine ends.
			cancel()
			call := <-src.calls
			call.answer <- podAnswer{err: context.Canceled}
			<-done
			var got []string
			for _, p := range store.pods() {
				got = append(got, p.Name+"@"+p.ResourceVersion)
			}
			slices.Sort(got)
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("store %v, want %v", got, c.want)
			}
			if wakes != c.wakes {
				t.Errorf("%d wake-ups, want %d", wakes, c.wakes)
			}
		})
	}
}

// TestRunPodWatchEndsWhilePaused: a watch waiting after a failure ends with its context.
func TestRunPodWatchEndsWhilePaused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &scriptedPods{calls: make(chan *podCall)}
	clk := testingclock.NewFakeClock(time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC))
	done := make(chan struct{})
	go func() {
		defer close(done)
		runPodWatch(ctx, src, newPodStore(func() {}), time.Minute, clk, pauseOn(clk))
	}()
	call := <-src.calls
	call.answer <- podAnswer{err: fmt.Errorf("refused")}
	cancel()
	<-done // pauseOn returns at the context's end: the fake clock never moves
}

func TestVersionGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errGone, true},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonGone}}, true},
		{errTooLarge, true},
		{apierrors.NewTimeoutError("slow", 1), false},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"), false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := versionGone(c.err); got != c.want {
			t.Errorf("versionGone(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestFrameEventsDecodesTheAPIServersStreams: a watch stream as the API server writes it,
// in protobuf and in JSON, with events that fit the watch's own buffer (a bookmark),
// that need a shared one, and that outgrow it (an annotation of 100 KiB), decodes to
// the same events in order, then ends (io.EOF); a stream cut inside an event is an
// error, not a clean end.
func TestFrameEventsDecodesTheAPIServersStreams(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	events := []watch.Event{
		{Type: watch.Bookmark, Object: swPod("", "5")},
		{Type: watch.Added, Object: swPod("a", "6")},
		{Type: watch.Modified, Object: func() runtime.Object {
			p := swPod("a", "7")
			p.Annotations = map[string]string{"big": big}
			return p
		}()},
		{Type: watch.Added, Object: func() runtime.Object {
			p := swPod("b", "8")
			p.Annotations = map[string]string{"mid": big[:9<<10]}
			return p
		}()},
		{Type: watch.Deleted, Object: swPod("a", "9")},
	}
	for _, mediaType := range []string{"application/vnd.kubernetes.protobuf", "application/json"} {
		t.Run(mediaType, func(t *testing.T) {
			info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
			if !ok || info.StreamSerializer == nil {
				t.Fatalf("no stream serializer for %s", mediaType)
			}
			objects := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
			var stream bytes.Buffer
			enc := streaming.NewEncoder(info.StreamSerializer.NewFrameWriter(&stream), info.StreamSerializer.Serializer)
			for _, e := range events {
				raw, err := runtime.Encode(objects, e.Object)
				if err != nil {
					t.Fatal(err)
				}
				if err := enc.Encode(&metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: raw}}); err != nil {
					t.Fatal(err)
				}
			}
			decode := func(b []byte) *frameEvents {
				objs, evs, framer, err := podWatchNegotiator.StreamDecoder(mediaType, map[string]string{"stream": "watch"})
				if err != nil {
					t.Fatal(err)
				}
				return &frameEvents{frames: framer.NewFrameReader(io.NopCloser(bytes.NewReader(b))), events: evs, objects: objs}
			}
			f := decode(stream.Bytes())
			// All events read first, then compared: a decoder whose objects pointed into
			// the shared buffer would show the later events' bytes.
			var got []watch.Event
			for i := range events {
				typ, obj, err := f.next()
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				got = append(got, watch.Event{Type: typ, Object: obj})
			}
			for i, want := range events {
				gp, ok := got[i].Object.(*corev1.Pod)
				wp := want.Object.(*corev1.Pod)
				if got[i].Type != want.Type || !ok || gp.Name != wp.Name || gp.ResourceVersion != wp.ResourceVersion ||
					gp.Annotations["big"] != wp.Annotations["big"] || gp.Annotations["mid"] != wp.Annotations["mid"] {
					t.Fatalf("event %d: %s %T, want %s of pod %s@%s", i, got[i].Type, got[i].Object, want.Type, wp.Name, wp.ResourceVersion)
				}
			}
			if _, _, err := f.next(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the last event: %v, want io.EOF", err)
			}
			// Cut inside the big event: an error, not a clean end.
			cut := decode(stream.Bytes()[:stream.Len()-len(big)])
			var err error
			for range len(events) + 1 {
				if _, _, err = cut.next(); err != nil {
					break
				}
			}
			if err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("a stream cut inside an event ended with %v, want an error", err)
			}
		})
	}
}

// TestStatusError: the API server's refusal of a watch, as a Status (JSON or protobuf) or
// a bare body, is an error the watch reads right: 410 lists again, and the Retry-After
// of a 429 or 503 is the wait asked, whether the Status says it or only the header.
func TestStatusError(t *testing.T) {
	status := func(code int32, reason metav1.StatusReason, after int32) *metav1.Status {
		st := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: code, Reason: reason}
		if after > 0 {
			st.Details = &metav1.StatusDetails{RetryAfterSeconds: after}
		}
		return st
	}
	encode := func(mediaType string, st *metav1.Status) []byte {
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
		b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, metav1.SchemeGroupVersion), st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, mediaType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		for _, c := range []struct {
			name      string
			code      int
			header    string
			body      []byte
			gone      bool
			wantAfter int
		}{
			{name: "expired", code: 410, body: encode(mediaType, status(410, metav1.StatusReasonExpired, 0)), gone: true},
			{name: "too many requests, in the status", code: 429, body: encode(mediaType, status(429, metav1.StatusReasonTooManyRequests, 4)), wantAfter: 4},
			{name: "too many requests, in the header", code: 429, header: "6", body: encode(mediaType, status(429, metav1.StatusReasonTooManyRequests, 0)), wantAfter: 6},
			{name: "unavailable, a bare body", code: 503, header: "3", body: []byte("try later"), wantAfter: 3},
			{name: "gone, a bare body", code: 410, body: []byte("gone"), gone: true},
			{name: "forbidden", code: 403, body: encode(mediaType, status(403, metav1.StatusReasonForbidden, 0))},
		} {
			resp := &http.Response{StatusCode: c.code, Header: http.Header{}}
			if c.header != "" {
				resp.Header.Set("Retry-After", c.header)
			}
			err := statusError(resp, c.body)
			after, ok := apierrors.SuggestsClientDelay(err)
			if versionGone(err) != c.gone || ok != (c.wantAfter > 0) || after != c.wantAfter {
				t.Errorf("%s, %s: %v: gone %v, delay %d (%v); want gone %v, delay %d", mediaType, c.name, err, versionGone(err), after, ok, c.gone, c.wantAfter)
			}
		}
	}
}
