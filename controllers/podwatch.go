package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// A node's pod watch runs in one goroutine, which lists the node's pods, watches them
// from the list's version and decodes the stream itself; the HTTP/2 stream that carries
// it is the only other goroutine. client-go's reflector and stream watcher took four per
// node (the reflector's loop, its resync timer, the decoder, the stream): at 64 hosts the
// 1,024-1,280 watched nodes' goroutines held 27 MB of stacks (pprof, docs/performance.md).

// podSource lists a node's pods and watches them from a version.
type podSource interface {
	// list lists the node's pods as of version: "0" any (the API server's watch cache),
	// a version not older than it (the watch cache too), "" now (a consistent read).
	list(ctx context.Context, version string) (pods []corev1.Pod, listed string, err error)
	// watch streams the changes after version until the API server ends the stream
	// (after timeout) or ctx ends.
	watch(ctx context.Context, version string, timeout time.Duration) (podEvents, error)
}

// podEvents is a watch's stream: next blocks until the next event, or returns an error
// (io.EOF: the stream ended).
type podEvents interface {
	next() (watch.EventType, runtime.Object, error)
	close()
}

// podWatchBackoff bounds the waits between failed lists and watches: doubling from the
// first to the last, each drawn up to twice as long (client-go's reflector: 0.8 s to
// 30 s, jitter 1), so that the watches of a thousand nodes failing together (an API
// server restarting) do not come back together.
var podWatchBackoff = [2]time.Duration{time.Second, 30 * time.Second}

// undecodable is an event the watch cannot apply (not a pod, an unknown type, bytes
// that do not decode): the node's pods are listed again rather than watched from the
// same version, which would send it again.
type undecodable struct{ err error }

func (u undecodable) Error() string { return u.err.Error() }
func (u undecodable) Unwrap() error { return u.err }

// runPodWatch keeps store in step with src until ctx ends: a list, then watches from the
// last version seen, renewed when the API server ends one (after timeout to twice
// timeout), as client-go's reflector does. The first list is served by the API server's
// watch cache ("0"); a version the API server no longer keeps (410) is listed again at
// once from the watch cache, not older than the last version seen, and as of now only
// when the watch cache refuses that too. A failure waits (podWatchBackoff, at least what
// the API server asks: Retry-After), as does a watch that ends at once after a fresh
// list; a watch that delivered an event, or ended cleanly after a second or more,
// resets the wait. clk tells how long a watch ran; pause waits d, or returns false when
// ctx ends first.
func runPodWatch(ctx context.Context, src podSource, store *podStore, timeout time.Duration, clk clock.PassiveClock,
	pause func(ctx context.Context, d time.Duration) bool) {
	var (
		version  string // the last version seen
		listFrom = "0"  // what the next list asks for: "0" any, a version, "" now
		fresh    bool   // the watch is the first after a list
		fails    int
	)
	wait := func(err error) bool {
		fails++
		d := min(podWatchBackoff[0]<<min(fails-1, 16), podWatchBackoff[1])
		d += time.Duration(rand.Int64N(int64(d)))
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			d = max(d, time.Duration(s)*time.Second)
		}
		return pause(ctx, d)
	}
	relist := true
	for ctx.Err() == nil {
		if relist {
			v, err := listInto(ctx, src, store, listFrom)
			if err != nil {
				if versionGone(err) && listFrom != "" {
					listFrom = "" // the watch cache has not that version: as of now, at once
					continue
				}
				if !wait(err) {
					return
				}
				continue
			}
			version, relist, fresh = v, false, true
		}
		began := clk.Now()
		ev, err := src.watch(ctx, version, timeout+time.Duration(rand.Int64N(int64(timeout)+1)))
		applied := false
		if err == nil {
			version, applied, err = follow(ev, store, version)
			ev.close()
		}
		if ctx.Err() != nil {
			return
		}
		// A clean end right away (an API server going down) is no sign of health.
		healthy := applied || (err == nil && clk.Since(began) >= time.Second)
		if healthy {
			fails = 0
		}
		gone := versionGone(err) || errors.As(err, new(undecodable))
		if gone {
			relist, listFrom = true, version
		}
		// A version gone is listed again at once, unless the list just gave it: a watch
		// cache that lags would have every node list again and again.
		if !healthy && (!gone || fresh) && !wait(err) {
			return
		}
		fresh = false
	}
}

// listInto lists the node's pods as of version into store and returns the list's
// version.
//
// Note: runPodWatch's goroutine waits for a node's next pod event for hours, and a
// goroutine's stack is halved at a collection only while it uses under a quarter of
// it: with the list's locals in runPodWatch's frame and the decoding in next's, the
// waiting goroutine used just over a quarter of the 8 KiB its decoding had grown it to,
// and every watched node kept 8 KiB of stack instead of 4 (docs/performance.md, "The runs
// of 2026-12-06, 17:00"). What the wait does not need stays out of the frames it waits
// in (and noinline keeps it so).
//
//go:noinline
func listInto(ctx context.Context, src podSource, store *podStore, version string) (string, error) {
	pods, v, err := src.list(ctx, version)
	if err != nil {
		return "", err
	}
	objs := make([]any, len(pods))
	for i := range pods {
		objs[i] = &pods[i]
	}
	_ = store.Replace(objs, v) // a plain store's Replace does not fail
	return v, nil
}

// pauseOn is runPodWatch's pause on a clock.
func pauseOn(clk clock.Clock) func(context.Context, time.Duration) bool {
	return func(ctx context.Context, d time.Duration) bool {
		t := clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		}
	}
}

// follow applies a watch's events to store until the stream ends. It returns the last
// version seen, whether an event was applied, and the error that ended the stream (nil
// at a clean end).
func follow(ev podEvents, store *podStore, version string) (string, bool, error) {
	applied := false
	for {
		typ, obj, err := ev.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return version, applied, err
		}
		if typ == watch.Error {
			return version, applied, apierrors.FromObject(obj)
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return version, applied, undecodable{fmt.Errorf("a pod watch sent a %T", obj)}
		}
		switch typ {
		case watch.Added, watch.Modified:
			_ = store.Update(pod)
		case watch.Deleted:
			_ = store.Delete(pod)
		case watch.Bookmark:
		default:
			return version, applied, undecodable{fmt.Errorf("a pod watch sent an event of type %q", typ)}
		}
		version = pod.ResourceVersion
		applied = true
	}
}

// versionGone is the API server's answer to a list or watch from a version it no longer
// keeps (410 Gone or Expired), or does not have yet: the node's pods are listed again.
func versionGone(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// apiPods is a node's pods on the API server. The watch is asked over the clientset's
// own HTTP client (its connections, credentials and user agent) and decoded in the
// caller's goroutine: the clientset must be backed by a REST client (not a fake).
type apiPods struct {
	cs  kubernetes.Interface
	sel string
	// rc is the clientset's core REST client; nil when it has none with an HTTP client.
	rc *rest.RESTClient
}

func newAPIPods(cs kubernetes.Interface, node string) apiPods {
	a := apiPods{cs: cs, sel: fields.OneTermEqualSelector("spec.nodeName", node).String()}
	if rc, ok := cs.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil && rc.Client != nil {
		a.rc = rc
	}
	return a
}

func (a apiPods) list(ctx context.Context, version string) ([]corev1.Pod, string, error) {
	l, err := a.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: a.sel, ResourceVersion: version})
	if err != nil {
		return nil, "", err
	}
	return l.Items, l.ResourceVersion, nil
}

// podWatchAccept asks for protobuf, as client-go's typed clients do, JSON else.
const podWatchAccept = "application/vnd.kubernetes.protobuf, application/json"

func (a apiPods) watch(ctx context.Context, version string, timeout time.Duration) (podEvents, error) {
	secs := int64(timeout / time.Second)
	// No bookmarks (see nodePodsWatchTimeout).
	opts := &metav1.ListOptions{Watch: true, FieldSelector: a.sel, ResourceVersion: version, TimeoutSeconds: &secs}
	if a.rc == nil {
		return nil, errors.New("watching pods needs a clientset backed by a REST client")
	}
	u := a.rc.Get().Resource("pods").VersionedParams(opts, scheme.ParameterCodec).URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", podWatchAccept)
	resp, err := a.rc.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, statusError(resp, body)
	}
	// No content type, or one that does not parse: the first the client knows (JSON),
	// as client-go's watch does.
	mediaType, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	objects, events, framer, err := podWatchNegotiator.StreamDecoder(mediaType, params)
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	return &frameEvents{frames: framer.NewFrameReader(resp.Body), events: events, objects: objects}, nil
}

var podWatchNegotiator = runtime.NewClientNegotiator(scheme.Codecs.WithoutConversion(), corev1.SchemeGroupVersion)

// statusError is the API server's refusal of a watch as an error: its Status when the
// body holds one (410 Expired: list again), else the code and body; a Retry-After
// header (429, 503) is the wait it asks (apierrors.SuggestsClientDelay).
func statusError(resp *http.Response, body []byte) error {
	after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if obj, err := runtime.Decode(scheme.Codecs.UniversalDeserializer(), body); err == nil {
		if st, ok := obj.(*metav1.Status); ok {
			if after > 0 && (st.Details == nil || st.Details.RetryAfterSeconds == 0) {
				if st.Details == nil {
					st.Details = &metav1.StatusDetails{}
				}
				st.Details.RetryAfterSeconds = int32(min(after, 3600))
			}
			return &apierrors.StatusError{ErrStatus: *st}
		}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, corev1.Resource("pods"), "", string(body), min(after, 3600), true)
}

// frameEvents is a watch decoded in the caller's goroutine, one frame at a time into a
// buffer of its own of 512 bytes (a bookmark, a small event) or, for a larger event, one
// shared by every node's watch (framePool). client-go's stream decoder keeps a
// buffer per watch, grown to the largest event it read: at 64 hosts the 1,024 watches'
// buffers held 6 MB of the heap (pprof during a switch), for streams that are idle but
// for a few events a switch.
type frameEvents struct {
	head    [512]byte
	frames  io.ReadCloser
	events  runtime.Decoder // metav1.WatchEvent
	objects runtime.Decoder // what an event holds
}

// maxFrame is the largest event read (client-go's stream decoder's bound); the API
// server's objects are far smaller (etcd's 1.5 MB).
const maxFrame = 16 << 20

// framePool holds the frame buffers; one grown past 64 KiB is not kept.
var framePool = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

func (f *frameEvents) next() (watch.EventType, runtime.Object, error) {
	// The wait for the next event reads into the watch's own small buffer: a pooled one
	// is taken only for an event that does not fit, once it is coming. The wait's frame
	// holds nothing else (listInto says why).
	n, err := f.frames.Read(f.head[:])
	return f.decode(n, err)
}

// decode reads the rest of an event whose first n bytes next read (err: what that read
// said) and decodes it. Not inlined into next, whose frame the wait holds.
//
//go:noinline
func (f *frameEvents) decode(n int, err error) (watch.EventType, runtime.Object, error) {
	frame := f.head[:n]
	if errors.Is(err, io.ErrShortBuffer) {
		bp := framePool.Get().(*[]byte)
		defer func() {
			if cap(*bp) <= 64<<10 {
				framePool.Put(bp)
			}
		}()
		copy(*bp, f.head[:n])
		for errors.Is(err, io.ErrShortBuffer) {
			if n == len(*bp) {
				if n >= maxFrame {
					return "", nil, fmt.Errorf("a pod watch's event is over %d bytes", maxFrame)
				}
				*bp = append(*bp, make([]byte, n)...)
			}
			var m int
			m, err = f.frames.Read((*bp)[n:])
			n += m
		}
		frame = (*bp)[:n]
	}
	if err != nil {
		return "", nil, err
	}
	var got metav1.WatchEvent
	if _, _, err := f.events.Decode(frame, nil, &got); err != nil {
		return "", nil, undecodable{fmt.Errorf("a pod watch's event: %w", err)}
	}
	// The event's object is copied out of the buffer by both decoders (protobuf, JSON).
	obj, err := runtime.Decode(f.objects, got.Object.Raw)
	if err != nil {
		return "", nil, undecodable{fmt.Errorf("a pod watch's event: %w", err)}
	}
	return watch.EventType(got.Type), obj, nil
}

func (f *frameEvents) close() { _ = f.frames.Close() }
