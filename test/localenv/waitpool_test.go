package localenv

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
)

// endAfterFirst is a watch that the API server ends after its first event, as it ends a
// watch at its timeout or drops a watcher too slow for a burst.
type endAfterFirst struct {
	watch.Interface
	out chan watch.Event
}

func newEndAfterFirst(w watch.Interface) *endAfterFirst {
	e := &endAfterFirst{Interface: w, out: make(chan watch.Event, 1)}
	go func() {
		defer close(e.out)
		if ev, ok := <-w.ResultChan(); ok {
			e.out <- ev
		}
		w.Stop()
	}()
	return e
}

func (e *endAfterFirst) ResultChan() <-chan watch.Event { return e.out }

// thenDo passes a watch's events on and calls do once the first is handed over: a
// change made while the watch is open.
type thenDo struct {
	watch.Interface
	out chan watch.Event
}

func newThenDo(w watch.Interface, do func()) *thenDo {
	t := &thenDo{Interface: w, out: make(chan watch.Event)}
	go func() {
		defer close(t.out)
		first := true
		for ev := range w.ResultChan() {
			t.out <- ev
			if first {
				first = false
				do()
			}
		}
	}()
	return t
}

func (t *thenDo) ResultChan() <-chan watch.Event { return t.out }

// TestWaitPool: the bench's and the e2e tests' wait for a pool, on a real API server.
// It ends at once when the pool already holds; it ends on the change that makes it hold
// and on no other pool's; it ends with the reason when ctx ends first. When the API
// server ends its watch, it resumes from the last version seen, so that a state the pool
// passes through between two watches is seen (from no version it would see only the
// state after); when that version has expired (410), it starts again from the pool as it
// is, and says so.
func TestWaitPool(t *testing.T) {
	env, cfg, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool := func(name string) *gpupoolv1.GPUPoolProfile {
		p := samplePool(t)
		p.Name = name
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var mu sync.Mutex // setOverride runs in the tests and in their watch hooks
	setOverride := func(p *gpupoolv1.GPUPoolProfile, layout string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		before := p.DeepCopy()
		p.Spec.Override = &gpupoolv1.Override{Layout: layout}
		if layout == "" {
			p.Spec.Override = nil
		}
		if err := c.Patch(ctx, p, client.MergeFrom(before)); err != nil {
			t.Error(err) // not Fatal: the watch hooks call it from their goroutines
		}
	}
	overridden := func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Override != nil }
	a, b := pool("wait-a"), pool("wait-b")

	// Calls Watch through hooks: before[i] runs before the i-th watch opens, wrap[i]
	// wraps what it returns.
	type hooks struct {
		before []func() error
		wrap   []func(watch.Interface) watch.Interface
	}
	envWith := func(h *hooks, log *bytes.Buffer) *Env {
		var mu sync.Mutex
		n := 0
		wc := interceptor.NewClient(c, interceptor.Funcs{Watch: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			mu.Lock()
			i := n
			n++
			mu.Unlock()
			if i < len(h.before) && h.before[i] != nil {
				if err := h.before[i](); err != nil {
					return nil, err
				}
			}
			w, err := cl.Watch(ctx, list, opts...)
			if err == nil && i < len(h.wrap) && h.wrap[i] != nil {
				w = h.wrap[i](w)
			}
			return w, err
		}})
		return &Env{Client: wc, Options: Options{Log: log}}
	}
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 30*time.Second) // a guard against a hang, not a measure
	}

	t.Run("holds already", func(t *testing.T) {
		setOverride(a, "day")
		defer setOverride(a, "")
		wctx, cancel := bounded()
		defer cancel()
		if err := envWith(&hooks{}, nil).waitPool(wctx, a.Name, "an override", overridden); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the change that makes it hold, not another pool's", func(t *testing.T) {
		// b holds before the watch opens; a is changed once the watch has handed over
		// its first event: a watch of every pool would end the wait on b.
		setOverride(b, "day")
		h := &hooks{wrap: []func(watch.Interface) watch.Interface{func(w watch.Interface) watch.Interface {
			return newThenDo(w, func() { setOverride(a, "day") })
		}}}
		defer setOverride(a, "")
		defer setOverride(b, "")
		wctx, cancel := bounded()
		defer cancel()
		saw := ""
		err := envWith(h, nil).waitPool(wctx, a.Name, "an override", func(p *gpupoolv1.GPUPoolProfile) bool {
			if overridden(p) {
				saw = p.Name
			}
			return overridden(p)
		})
		if err != nil || saw != a.Name {
			t.Fatalf("waitPool = %v on the override of %q; want the override of %s", err, saw, a.Name)
		}
	})

	t.Run("ctx ends first", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		h := &hooks{before: []func() error{nil, func() error { cancel(); return nil }},
			wrap: []func(watch.Interface) watch.Interface{func(w watch.Interface) watch.Interface { return newEndAfterFirst(w) }}}
		err := envWith(h, nil).waitPool(wctx, a.Name, "an override that never comes", overridden)
		if err == nil || !strings.Contains(err.Error(), "an override that never comes") || !strings.Contains(err.Error(), context.Canceled.Error()) {
			t.Fatalf("waitPool = %v, want the wait and ctx's error", err)
		}
	})

	t.Run("resumes from the last version when the watch ends", func(t *testing.T) {
		// The first watch ends after the pool's Added; the pool is overridden and the
		// override removed before the second opens: only a watch from the first's
		// version sees the override.
		h := &hooks{
			before: []func() error{nil, func() error { setOverride(a, "day"); setOverride(a, ""); return nil }},
			wrap:   []func(watch.Interface) watch.Interface{func(w watch.Interface) watch.Interface { return newEndAfterFirst(w) }},
		}
		wctx, cancel := bounded()
		defer cancel()
		if err := envWith(h, nil).waitPool(wctx, a.Name, "an override", overridden); err != nil {
			t.Fatalf("the override made and removed between two watches was not seen: %v", err)
		}
	})

	t.Run("starts again from now when the version expired", func(t *testing.T) {
		var log bytes.Buffer
		gone := apierrors.NewResourceExpired("too old resource version")
		h := &hooks{
			before: []func() error{nil, func() error { setOverride(a, "day"); return gone }},
			wrap:   []func(watch.Interface) watch.Interface{func(w watch.Interface) watch.Interface { return newEndAfterFirst(w) }},
		}
		defer setOverride(a, "")
		wctx, cancel := bounded()
		defer cancel()
		if err := envWith(h, &log).waitPool(wctx, a.Name, "an override", overridden); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log.String(), "could not resume") {
			t.Fatalf("the expired watch was not reported: %q", log.String())
		}
	})
}
