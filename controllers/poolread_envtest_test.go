package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// laggingPools stands in for the manager's cache of pools: it shows a pool as the API
// server had it when the cache last caught up, which it does on every other read (the
// first read finds nothing, as a cache that has not listed yet). It records, per pass,
// what the pass's read of its pool from the cache saw and how often the pass read the
// pool from the API server.
type laggingPools struct {
	mu    sync.Mutex
	reads int
	held  map[string]*gpupoolv1.GPUPoolProfile
	pass  poolReads
	// failEvery: every failEvery-th status write of a pool is made and then answered
	// with an error, as a write whose answer is lost.
	failEvery, statusWrites int
}

// poolReads is what one pass read: from the cache (missing: the cache did not have the
// pool; stale: the cache's version was older than the API server's) and from the API
// server (live); lost: a status write of the pass was made but answered with an error.
type poolReads struct {
	cached, missing, stale, lost bool
	live                         int
}

// begin returns what the pass since the last begin read, and starts the next pass's
// record.
func (l *laggingPools) begin() poolReads {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.pass
	l.pass = poolReads{}
	return last
}

// cache wraps the reconciler's client: its reads of pools lag as described above.
func (l *laggingPools) cache(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			p, ok := obj.(*gpupoolv1.GPUPoolProfile)
			if !ok {
				return c.Get(ctx, key, obj, opts...)
			}
			var cur gpupoolv1.GPUPoolProfile
			if err := c.Get(ctx, key, &cur, opts...); err != nil {
				return err
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.reads++
			held := l.held[key.Name]
			first := !l.pass.cached
			l.pass.cached = true
			if held == nil {
				l.held[key.Name] = cur.DeepCopy()
				l.pass.missing = l.pass.missing || first
				return apierrors.NewNotFound(gpupoolv1.GroupVersion.WithResource("gpupoolprofiles").GroupResource(), key.Name)
			}
			if l.reads%2 == 0 {
				held = cur.DeepCopy()
				l.held[key.Name] = held
			}
			if first {
				l.pass.stale = held.ResourceVersion != cur.ResourceVersion
			}
			held.DeepCopyInto(p)
			return nil
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*gpupoolv1.GPUPoolProfile); !ok || sub != "status" || l.failEvery == 0 {
				return nil
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.statusWrites++; l.statusWrites%l.failEvery == 0 {
				l.pass.lost = true
				return errors.New("injected: the status write was made, its answer lost")
			}
			return nil
		},
	})
}

// apiServer wraps the reconciler's APIReader: it counts the pass's reads of pools.
func (l *laggingPools) apiServer(c client.WithWatch) client.Reader {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*gpupoolv1.GPUPoolProfile); ok {
				l.mu.Lock()
				l.pass.live++
				l.mu.Unlock()
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// TestPassReadsPoolFromCacheAtItsOwnWrite: the one-host world switches day -> night ->
// day with a cache of pools that catches up on every other read only. A pass whose
// cache shows an older version of its pool than the API server's (the cache has not seen
// the last pass's write) reads the pool from the API server, and so does the first pass
// (nothing known yet); a pass whose cache shows the pool as the last pass wrote it does
// not, unless a write of the last pass was answered with an error (one in five is
// made and its answer lost: the reconciler cannot know which version it wrote). Each
// VM's operation is asked once per switch, and no pass fails but those whose answer
// was lost.
func TestPassReadsPoolFromCacheAtItsOwnWrite(t *testing.T) {
	h := newHarness(t, "prc-")
	h.tolerateErrors = true
	lag := &laggingPools{held: map[string]*gpupoolv1.GPUPoolProfile{}, failEvery: 5}
	h.client = lag.cache
	door := &startDoor{asked: map[string]int{}}
	door.cond = sync.NewCond(&door.mu)
	h.conn = &doorConnector{Connector: h.conn, door: door}
	h.reconciler().APIReader = lag.apiServer(operator)
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)

	passes, served, staleSeen, lost, lostBefore := 0, 0, 0, 0, false
	check := func() {
		r := lag.begin()
		if !r.cached {
			t.Fatalf("pass %d did not read its pool from the cache", passes)
		}
		switch {
		case r.missing || r.stale:
			staleSeen++
			if r.live == 0 {
				t.Errorf("pass %d acted on the cache's version of the pool, older than the API server's (missing %v, stale %v)", passes, r.missing, r.stale)
			}
		case r.live > 0 && !lostBefore:
			t.Errorf("pass %d read the pool from the API server %d time(s) though the cache held the pool as the last pass wrote it", passes, r.live)
		case r.live == 0:
			served++
		}
		if r.lost {
			lost++
		}
		lostBefore = r.lost
		passes++
	}
	asked := door.counts()
	for _, sw := range []struct {
		layout string
		at     func()
	}{
		{"day", func() {}},
		{"night", func() { h.clock.SetTime(monday1950) }},
		{"day", func() { h.clock.SetTime(tuesday0750) }},
	} {
		sw.at()
		reached := false
		for range 60 {
			res := h.reconcile(pool.Name)
			check()
			h.settle()
			if testworld.Reached(h.get(pool.Name), sw.layout) {
				reached = true
				break
			}
			h.clock.Step(testworld.Step(res))
		}
		if !reached {
			t.Fatalf("pool did not reach %s: %s", sw.layout, testworld.Conditions(h.get(pool.Name)))
		}
		now := door.counts()
		for vm, n := range now {
			if n-asked[vm] > 1 {
				t.Errorf("switch to %s: VM %s's operations asked %d times, want once", sw.layout, vm, n-asked[vm])
			}
		}
		asked = now
	}
	if h.errors > lost {
		t.Errorf("%d passes failed, %d of them with an answer lost (a conflict with the pass's own write?)", h.errors, lost)
	}
	// Each kind of read happened, or the test shows nothing.
	if served < 3 || staleSeen < 3 || lost < 1 {
		t.Errorf("of %d passes, %d were served by the cache, %d found it behind and %d lost a write's answer; want at least 3, 3 and 1", passes, served, staleSeen, lost)
	}
}

// TestStatusManagedFieldsDoNotGrowWithWorkers: the API server's record of who owns
// which field (metadata.managedFields) of a pool's status is as large for 1,024
// workers as for 4. With an entry per worker it was a third of a 1,280-VM pool, read,
// rebuilt and written again on every status write.
func TestStatusManagedFieldsDoNotGrowWithWorkers(t *testing.T) {
	h := newHarness(t, "mfs-")
	pool := h.dayNight()
	h.create(pool)
	c := client.WithFieldOwner(operator, FieldOwner)
	size := func(n int) int {
		t.Helper()
		p := h.get(pool.Name)
		before := p.DeepCopy()
		start := metav1.NewTime(monday1000)
		p.Status.Workers = make([]gpupoolv1.WorkerStatus, n)
		for i := range p.Status.Workers {
			vm := fmt.Sprintf("vm-%04d", i)
			p.Status.Workers[i] = gpupoolv1.WorkerStatus{VM: vm, Node: vm, Host: "esx-00", GPU: "0000:3b:00.0",
				Profile: "grid_p100-4q", PowerState: "poweredOn", Step: gpupoolv1.StepParkRequired, StepStartTime: &start,
				Task: &gpupoolv1.TaskReference{ID: "task-" + vm, Operation: "Suspend", StartTime: start}}
		}
		h.must(c.Status().Patch(h.ctx, p, client.MergeFrom(before)))
		var got gpupoolv1.GPUPoolProfile
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(p), &got))
		if len(got.Status.Workers) != n {
			t.Fatalf("status holds %d workers, want %d", len(got.Status.Workers), n)
		}
		for _, mf := range got.ManagedFields {
			if mf.Manager == FieldOwner && mf.Subresource == "status" && mf.FieldsV1 != nil {
				return len(mf.FieldsV1.GetRawBytes())
			}
		}
		t.Fatalf("no managedFields entry of %s for the status: %+v", FieldOwner, got.ManagedFields)
		return 0
	}
	small := size(4)
	large := size(1024)
	if large != small {
		t.Errorf("the status's managedFields take %d bytes with 1,024 workers and %d with 4; want the same", large, small)
	}
}
