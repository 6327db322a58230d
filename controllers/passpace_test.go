package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// pacedRecorder records what a handler adds, and when for.
type pacedRecorder struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []string
	after map[string]time.Duration
}

func (q *pacedRecorder) Add(r reconcile.Request) { q.added = append(q.added, r.Name) }
func (q *pacedRecorder) AddAfter(r reconcile.Request, d time.Duration) {
	if q.after == nil {
		q.after = map[string]time.Duration{}
	}
	q.after[r.Name] = d
}

// TestPassPace: every kind of event through a paced handler adds its pool at once when
// the pool's last pass began at least the interval ago (or never, or it was deleted),
// and after what is left of the interval otherwise, never more than the interval (a
// clock set back); an interval of 0 paces nothing and returns the handler itself.
func TestPassPace(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := newPassPace(time.Second)
	p.now = func() time.Time { return now }
	h := p.paced(&handler.EnqueueRequestForObject{})
	pool := func(name string) client.Object { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	fire := map[string]func(client.Object, *pacedRecorder){
		"create": func(o client.Object, q *pacedRecorder) {
			h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: o}, q)
		},
		"update": func(o client.Object, q *pacedRecorder) {
			h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: o, ObjectNew: o}, q)
		},
		"delete": func(o client.Object, q *pacedRecorder) {
			h.Delete(context.Background(), event.TypedDeleteEvent[client.Object]{Object: o}, q)
		},
		"generic": func(o client.Object, q *pacedRecorder) {
			h.Generic(context.Background(), event.TypedGenericEvent[client.Object]{Object: o}, q)
		},
	}
	for kind, f := range fire {
		begun := now
		cases := []struct {
			name  string
			setup func()
			want  time.Duration // 0: added at once
		}{
			{"never passed", func() { p.forget("p") }, 0},
			{"just began", func() { p.began("p") }, time.Second},
			{"began 300ms ago", func() { p.began("p"); now = now.Add(300 * time.Millisecond) }, 700 * time.Millisecond},
			{"began the interval ago", func() { p.began("p"); now = now.Add(time.Second) }, 0},
			{"began long ago", func() { p.began("p"); now = now.Add(time.Hour) }, 0},
			{"began in the clock's future", func() { p.began("p"); now = now.Add(-time.Hour) }, time.Second},
			{"deleted", func() { p.began("p"); p.forget("p") }, 0},
		}
		for _, c := range cases {
			now = begun
			c.setup()
			q := &pacedRecorder{}
			f(pool("p"), q)
			switch {
			case c.want == 0 && (len(q.added) != 1 || q.added[0] != "p" || len(q.after) != 0):
				t.Errorf("%s, %s: added %v, after %v; want p at once", kind, c.name, q.added, q.after)
			case c.want > 0 && (len(q.added) != 0 || q.after["p"] != c.want):
				t.Errorf("%s, %s: added %v, after %v; want p after %s", kind, c.name, q.added, q.after, c.want)
			}
			// Another pool is not held by this one's pass.
			q = &pacedRecorder{}
			f(pool("other"), q)
			if len(q.added) != 1 || len(q.after) != 0 {
				t.Errorf("%s, %s: another pool added %v, after %v; want at once", kind, c.name, q.added, q.after)
			}
		}
	}

	var unpaced handler.EventHandler = &handler.EnqueueRequestForObject{}
	if got := newPassPace(0).paced(unpaced); got != unpaced {
		t.Errorf("an interval of 0 wrapped the handler: %T", got)
	}
	var none *passPace
	none.began("p")
	none.forget("p")
	if d := none.delay("p"); d != 0 {
		t.Errorf("no pace delays by %s", d)
	}
}

// TestPassPaceOnThePriorityQueue: through the manager's own kind of queue (controller-
// runtime's priority queue), a paced wake is not ready before its delay, and one of a
// pool never passed is ready at once.
func TestPassPaceOnThePriorityQueue(t *testing.T) {
	p := newPassPace(time.Hour)
	q := priorityqueue.New[reconcile.Request]("pace")
	defer q.ShutDown()
	h := p.paced(&handler.EnqueueRequestForObject{})
	ev := func(name string) event.TypedGenericEvent[client.Object] {
		return event.TypedGenericEvent[client.Object]{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	}
	p.began("p")
	for _, add := range []func(){
		func() { h.Generic(context.Background(), ev("p"), q) },
		func() {
			h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: ev("p").Object}, q)
		},
		func() {
			h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: ev("p").Object, ObjectNew: ev("p").Object}, q)
		},
	} {
		add()
		if n := q.Len(); n != 0 {
			t.Fatalf("%d requests ready before the pool's delay", n)
		}
	}
	h.Generic(context.Background(), ev("q"), q)
	if n := q.Len(); n != 1 {
		t.Fatalf("%d requests ready for a pool never passed, want 1", n)
	}
}

// TestReconcileRecordsWhenAPassBegins: a pass of a pool holds its paced wakes for the
// interval; a pass that finds the pool gone forgets it.
func TestReconcileRecordsWhenAPassBegins(t *testing.T) {
	h := newHarness(t, "ppb-")
	pool := h.pool("pace", h.layout("day", "day-1=grid_p100-4q"))
	h.create(pool)
	r := h.reconciler()
	r.pace = newPassPace(time.Hour)
	h.reconcile(pool.Name)
	if d := r.pace.delay(pool.Name); d <= 0 || d > time.Hour {
		t.Fatalf("after a pass, a wake of the pool waits %s, want up to an hour", d)
	}
	h.must(k8s.Delete(h.ctx, pool))
	for i := 0; i < 5 && r.pace.delay(pool.Name) > 0; i++ { // the finalizer's passes, then NotFound
		h.reconcile(pool.Name)
	}
	if d := r.pace.delay(pool.Name); d != 0 {
		t.Fatalf("after the pool was gone, a wake of it waits %s, want 0", d)
	}
}
