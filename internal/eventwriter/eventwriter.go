// Package eventwriter writes gpupool's events.k8s.io Events as client-go's events
// recorder does (the same Event, the same folding of repeated events into a series, the
// same retries), in memory bounded by its options rather than by how many events a
// switch makes.
//
// Why not client-go's broadcaster (what controller-runtime's GetEventRecorder gives): it
// keeps a deep copy of every event it wrote for six minutes, to fold a repeat into it,
// and starts two goroutines per event, which wait for the client's rate limiter. The
// regarding object's reference carries its resourceVersion, so the events of a switch on
// its nodes rarely repeat: at 64 hosts a switch's few thousand events held 12 MB of the
// manager's 56 MB live heap at its peak (docs/performance.md, "The runs of 2026-12-06,
// 17:00"). Here a series is remembered by a hash of what makes events repeats, the
// event's name and two counts; the events wait in a bounded queue for a few workers; an
// event that finds its worker's share of the queue full is dropped and counted
// (gpupool_events_dropped_total), as client-go's broadcaster drops events its watchers
// cannot take (it never blocks its caller, the pass).
//
// Where it differs from client-go's: a series whose event the API server no longer has
// goes on in the repeat at hand, written with the series' count (client-go writes the
// first event again); a refresh that fails is tried again at the next sweep.
package eventwriter

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
)

// As client-go's events broadcaster: a series is finished (its last count written, then
// forgotten) six minutes after its last event; a series still going has its count
// written every thirty minutes; an event the API server cannot be reached for is tried
// twelve times, ten seconds apart (jittered).
const (
	FinishTime  = 6 * time.Minute
	RefreshTime = 30 * time.Minute
	MaxTries    = 12
	RetryAfter  = 10 * time.Second
)

// Defaults of Options.
//
// The queue takes a 256-host switch's burst (a cordon event per node of a pass, about
// 4,000): at 64 hosts 1,024 waiting events were too few for the cordons of one pass
// (docs/performance.md, "The runs of 2026-12-06, 17:00"). A waiting event is about 1 KB;
// the queue's own room 40 bytes a place.
const (
	DefaultWorkers   = 8
	DefaultQueue     = 8192
	DefaultMaxSeries = 4096
	// tick is how often a worker looks for series to finish or refresh.
	tick = time.Minute
)

// Sink is where events go: the events.k8s.io API.
type Sink interface {
	Create(ctx context.Context, ev *eventsv1.Event) error
	// Patch applies a strategic merge patch to the event namespace/name.
	Patch(ctx context.Context, namespace, name string, patch []byte) error
}

// APISink writes to the events.k8s.io API of a client.
type APISink struct {
	Client eventsclient.EventsV1Interface
}

func (s APISink) Create(ctx context.Context, ev *eventsv1.Event) error {
	_, err := s.Client.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (s APISink) Patch(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := s.Client.Events(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// NewAPISink is an APISink on cfg, sharing httpClient's connections: its own rate
// limiter of cfg's QPS and burst, as controller-runtime's recorder had.
func NewAPISink(cfg *rest.Config, httpClient *http.Client) (APISink, error) {
	c, err := eventsclient.NewForConfigAndClient(rest.CopyConfig(cfg), httpClient)
	if err != nil {
		return APISink{}, fmt.Errorf("events client: %w", err)
	}
	return APISink{Client: c}, nil
}

// Options tune a Writer; zero values take the defaults.
type Options struct {
	// Controller is the events' reportingController; Instance their reportingInstance
	// (default Controller-hostname, as client-go's).
	Controller, Instance string
	// Workers write events at once, each its share of the series (default 8).
	Workers int
	// Queue is how many events wait for the workers (default 8,192), each worker's share
	// of it for the events its series (by key) give it: one more for a worker whose share
	// is full is dropped.
	Queue int
	// MaxSeries is how many written events are remembered to fold repeats into (default
	// 4,096); past it the least recently seen is finished early.
	MaxSeries int
	Clock     clock.WithTicker
	Log       logr.Logger
}

// Writer is an events.EventRecorder. Events recorded before Start wait in its queue.
type Writer struct {
	scheme *runtime.Scheme
	sink   Sink
	o      Options
	shards []*shard
	drops  atomic.Int64 // events dropped since logDrops last ran
}

var _ events.EventRecorder = (*Writer)(nil)

// New is a Writer of scheme's objects to sink.
func New(sink Sink, scheme *runtime.Scheme, o Options) *Writer {
	if o.Instance == "" {
		host, _ := os.Hostname()
		o.Instance = o.Controller + "-" + host
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	w := &Writer{scheme: scheme, sink: sink, o: o}
	for range o.Workers {
		w.shards = append(w.shards, &shard{
			w:      w,
			queue:  make(chan item, max(1, o.Queue/o.Workers)),
			series: map[key]*list.Element{},
			max:    max(1, o.MaxSeries/o.Workers),
		})
	}
	return w
}

// NeedLeaderElection is false: a manager starts the writer at once, so that what it
// records before it leads is written too.
func (w *Writer) NeedLeaderElection() bool { return false }

// DrainTimeout bounds how long Start still writes the queued events once its context
// has ended (a manager stopping stops its other runnables before its controllers, whose
// passes may still record).
const DrainTimeout = 5 * time.Second

// Start runs the workers until ctx ends, then writes what is queued for up to
// DrainTimeout. The counts of series not yet finished are not written (as client-go's
// broadcaster on Shutdown).
func (w *Writer) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range w.shards {
		wg.Go(func() { s.run(ctx) })
	}
	// The drops are logged apart from the workers, which may all be waiting on an API
	// server that cannot be reached, when events are dropped.
	wg.Go(func() {
		t := w.o.Clock.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				w.logDrops()
				return
			case <-t.C():
				w.logDrops()
			}
		}
	})
	wg.Wait()
	return nil
}

// Eventf records an event as client-go's events recorder does: its note formatted,
// regarding and related as references (an event whose regarding object has no
// reference, or of a type other than Normal and Warning, is logged and not recorded).
// It never blocks: an event the queue cannot take is dropped and counted.
func (w *Writer) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	now := w.o.Clock.Now()
	message := fmt.Sprintf(note, args...)
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		w.o.Log.Error(err, "Could not construct reference, will not report event", "eventType", eventtype, "reason", reason, "message", message)
		return
	}
	var rel *corev1.ObjectReference
	if related != nil {
		if rel, err = reference.GetReference(w.scheme, related); err != nil {
			w.o.Log.V(9).Info("Could not construct reference", "err", err)
			rel = nil
		}
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		w.o.Log.Error(nil, "Unsupported event type", "eventType", eventtype)
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: recordutil.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.o.Controller,
		ReportingInstance:   w.o.Instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             rel,
		Note:                message,
		Type:                eventtype,
	}
	// As controller-runtime's recorder logged the events it recorded.
	w.o.Log.V(1).Info("Event occurred", "object", ref.Namespace+"/"+ref.Name, "kind", ref.Kind, "apiVersion", ref.APIVersion,
		"type", eventtype, "reason", reason, "action", action, "note", message)
	k := keyOf(ev)
	s := w.shards[int(binary.BigEndian.Uint32(k[:4])%uint32(len(w.shards)))]
	select {
	case s.queue <- item{ev: ev, key: k}:
	default:
		// The first drop is logged at once, the rest counted and logged once a minute:
		// the log must not grow with what it reports.
		if w.drops.Add(1) == 1 {
			w.o.Log.Info("Events queue full, dropping events until it has room", "queue", w.o.Queue)
		}
		dropped.WithLabelValues(causeQueueFull).Inc()
	}
}

// logDrops logs how many events were dropped since the last time, if any.
func (w *Writer) logDrops() {
	if n := w.drops.Swap(0); n > 0 {
		w.o.Log.Info("Events dropped, the queue full", "dropped", n, "queue", w.o.Queue)
	}
}

// key is a hash of what makes events repeats (client-go's eventKey): type, action,
// reason, reporting controller and instance, the regarding and related references
// (resourceVersion and field path included). The note is not: a repeat keeps the first.
type key [sha256.Size]byte

func keyOf(ev *eventsv1.Event) key {
	h := sha256.New()
	var buf []byte
	add := func(ss ...string) {
		for _, s := range ss {
			buf = binary.AppendUvarint(buf[:0], uint64(len(s)))
			h.Write(buf)
			h.Write([]byte(s))
		}
	}
	addRef := func(r corev1.ObjectReference) {
		add(r.Kind, r.Namespace, r.Name, string(r.UID), r.APIVersion, r.ResourceVersion, r.FieldPath)
	}
	add(ev.Type, ev.Action, ev.Reason, ev.ReportingController, ev.ReportingInstance)
	addRef(ev.Regarding)
	if ev.Related != nil {
		add("related")
		addRef(*ev.Related)
	} else {
		add("")
	}
	var k key
	h.Sum(k[:0])
	return k
}

type item struct {
	ev  *eventsv1.Event
	key key
}

// series is a written event: its name, how many times it happened, how many the API
// server has been told.
type series struct {
	key             key
	namespace, name string
	count, written  int32
	last            time.Time // the last time it happened
	lastWrite       time.Time
}

// shard is one worker's share of the events (by key, so that a series' events are
// written in order, by one worker) and the series it remembers, least recently seen
// first.
type shard struct {
	w      *Writer
	queue  chan item
	series map[key]*list.Element
	order  list.List
	max    int
}

func (s *shard) run(ctx context.Context) {
	t := s.w.o.Clock.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.drain()
			return
		case it := <-s.queue:
			s.record(ctx, it)
		case <-t.C():
			s.sweep(ctx)
		}
	}
}

// drain writes the events queued when the worker's context ended, for up to
// DrainTimeout.
func (s *shard) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case it := <-s.queue:
			s.record(ctx, it)
		default:
			return
		}
	}
}

// record writes an event, or folds it into the series of its repeats: the first repeat
// is written at once (count 2), later ones when the series is refreshed or finished.
func (s *shard) record(ctx context.Context, it item) {
	now := s.w.o.Clock.Now()
	count := int32(1)
	if e, ok := s.series[it.key]; ok {
		se := e.Value.(*series)
		se.count++
		se.last = now
		s.order.MoveToBack(e)
		if se.written > 1 {
			return
		}
		err := s.patch(ctx, se)
		if err == nil {
			return
		}
		s.forget(e)
		if !apierrors.IsNotFound(err) {
			return // refused, or the API server unreachable: counted
		}
		// The event is gone (expired on the API server): this one is written in its
		// place with the series' count, as client-go writes the first again.
		count = se.count
		it.ev.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(now)}
	}
	if !s.write(ctx, func() error { return s.w.sink.Create(ctx, it.ev) }) {
		return
	}
	if s.order.Len() >= s.max {
		s.finish(ctx, s.order.Front())
	}
	se := &series{key: it.key, namespace: it.ev.Namespace, name: it.ev.Name, count: count, written: count, last: now, lastWrite: now}
	s.series[it.key] = s.order.PushBack(se)
}

// sweep finishes the series not seen for FinishTime and writes the counts of those whose
// last write is RefreshTime old.
func (s *shard) sweep(ctx context.Context) {
	now := s.w.o.Clock.Now()
	for e := s.order.Front(); e != nil; {
		next := e.Next()
		se := e.Value.(*series)
		switch {
		case now.Sub(se.last) >= FinishTime:
			s.finish(ctx, e)
		case se.count > se.written && now.Sub(se.lastWrite) >= RefreshTime:
			// Gone: forgotten (its next repeat is an event of its own); not written:
			// tried again at the next sweep, or when it finishes.
			if err := s.patch(ctx, se); apierrors.IsNotFound(err) {
				s.forget(e)
			}
		}
		e = next
	}
}

// finish writes a series' last count, if the API server has not got it, and forgets it.
func (s *shard) finish(ctx context.Context, e *list.Element) {
	if se := e.Value.(*series); se.count > se.written {
		_ = s.patch(ctx, se) // forgotten either way: a series gone is not written again
	}
	s.forget(e)
}

func (s *shard) forget(e *list.Element) {
	delete(s.series, e.Value.(*series).key)
	s.order.Remove(e)
}

// patch writes a series' count (the patch client-go's recorder sends: the event with its
// series against the event without).
func (s *shard) patch(ctx context.Context, se *series) error {
	body, err := json.Marshal(map[string]eventsv1.EventSeries{"series": {Count: se.count, LastObservedTime: metav1.NewMicroTime(se.last)}})
	if err != nil {
		return err
	}
	var last error
	ok := s.write(ctx, func() error {
		last = s.w.sink.Patch(ctx, se.namespace, se.name, body)
		if apierrors.IsNotFound(last) {
			return nil // not worth retrying: told to the caller
		}
		return last
	})
	if !ok {
		return errNotWritten
	}
	if last == nil {
		se.written, se.lastWrite = se.count, s.w.o.Clock.Now()
	}
	return last
}

var errNotWritten = errors.New("event not written")

// write calls do until the API server answers, as client-go's recorder retries: an
// answer (a refusal too: it would refuse again) ends it, a failure to reach the API
// server is tried again, MaxTries times in all, RetryAfter apart (jittered); ctx ending
// gives up. It reports whether do succeeded.
func (s *shard) write(ctx context.Context, do func() error) bool {
	for try := 1; ; try++ {
		err := do()
		if err == nil {
			return true
		}
		var status apierrors.APIStatus
		var construct *rest.RequestConstructionError
		if errors.As(err, &status) || errors.As(err, &construct) {
			s.w.o.Log.Error(err, "Server rejected event (will not retry!)")
			dropped.WithLabelValues(causeRejected).Inc()
			return false
		}
		if try >= MaxTries {
			s.w.o.Log.Error(err, "Unable to write event (retry limit exceeded!)")
			dropped.WithLabelValues(causeUnreachable).Inc()
			return false
		}
		s.w.o.Log.Error(err, "Unable to write event (may retry after sleeping)")
		select {
		case <-ctx.Done():
			return false
		case <-s.w.o.Clock.After(wait.Jitter(RetryAfter, 0.25)):
		}
	}
}
