package eventwriter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestOnAPIServer writes through the events.k8s.io API of a real API server: a node's
// event lands in "default", a namespaced object's in its namespace, with what client-go's
// recorder would write; a repeat is the first event's series (count 2 at once, the last
// count once the series is finished); an event the API server refuses (an action over
// 128 characters) is counted, not retried.
func TestOnAPIServer(t *testing.T) {
	env, cfg, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewAPISink(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The sink asks the API server, then reports what it asked.
	spy := &spySink{Sink: sink, calls: make(chan string, 100)}
	clk := clocktesting.NewFakeClock(t0) // the API server checks no event's times against its own
	w := New(spy, clientgoscheme.Scheme, Options{Controller: "gpupool", Instance: "gpupool-a", Clock: clk, Log: logr.Discard(), Workers: 1})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Start(wctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wait := func(want string) {
		t.Helper()
		select {
		case got := <-spy.calls:
			if !strings.HasPrefix(got, want) {
				t.Fatalf("request %s, want %s", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s", want)
		}
	}

	n := node("gpu-1", "5")
	pool := configMap("apps", "pool")
	w.Eventf(n, pool, corev1.EventTypeNormal, "Cordoned", "Cordoned", "cordoned %s", "gpu-1")
	wait("create default/gpu-1.")
	w.Eventf(configMap("apps", "cm"), nil, corev1.EventTypeWarning, "Stalled", "Stalled", "stalled")
	wait("create apps/cm.")
	for range 3 {
		clk.Step(time.Second)
		w.Eventf(n, pool, corev1.EventTypeNormal, "Cordoned", "Cordoned", "again")
	}
	wait("patch default/gpu-1.")

	rejected := testutil.ToFloat64(dropped.WithLabelValues(causeRejected))
	w.Eventf(n, nil, corev1.EventTypeNormal, "Long", strings.Repeat("a", 129), "x")
	wait("create default/gpu-1.")
	w.Eventf(configMap("apps", "sync"), nil, corev1.EventTypeNormal, "Sync", "Sync", "sync")
	wait("create apps/sync.")
	if got := testutil.ToFloat64(dropped.WithLabelValues(causeRejected)) - rejected; got != 1 {
		t.Fatalf("rejected %v, want 1 (and not retried)", got)
	}

	events := func(ns string) []eventsv1.Event {
		t.Helper()
		l, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	var cordoned *eventsv1.Event
	for _, e := range events("default") {
		if e.Reason == "Cordoned" {
			cordoned = &e
		}
	}
	if cordoned == nil {
		t.Fatal("no Cordoned event in default")
	}
	if cordoned.Regarding.Kind != "Node" || cordoned.Regarding.Name != "gpu-1" || cordoned.Related == nil || cordoned.Related.Name != "pool" ||
		cordoned.Note != "cordoned gpu-1" || cordoned.ReportingController != "gpupool" || cordoned.ReportingInstance != "gpupool-a" ||
		cordoned.Series == nil || cordoned.Series.Count != 2 {
		t.Fatalf("Cordoned event %+v", cordoned)
	}
	if got := events("apps"); len(got) != 2 {
		t.Fatalf("%d events in apps, want 2", len(got))
	}

	// Not seen for FinishTime: the series' last count (4) is written.
	clk.Step(FinishTime + tick)
	wait("patch default/gpu-1.")
	e, err := cs.EventsV1().Events("default").Get(ctx, cordoned.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Series == nil || e.Series.Count != 4 || e.Note != "cordoned gpu-1" {
		t.Fatalf("finished series %+v, note %q: want count 4, the first note", e.Series, e.Note)
	}
}

type spySink struct {
	Sink
	calls chan string
}

func (s *spySink) Create(ctx context.Context, ev *eventsv1.Event) error {
	err := s.Sink.Create(ctx, ev)
	s.calls <- "create " + ev.Namespace + "/" + ev.Name
	return err
}

func (s *spySink) Patch(ctx context.Context, ns, name string, body []byte) error {
	err := s.Sink.Patch(ctx, ns, name, body)
	s.calls <- "patch " + ns + "/" + name
	return err
}
