package controllers

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/plan"
)

// BenchmarkPass measures one pass's own cost on an n-VM site held in memory: observe
// (credentials, inventory, the node list from a fake client that lists as the informer
// cache does, without copies for observe: cachedNodes; the VM and node matching), decide (node states, plan.Build)
// and what the pass computes from the plan (the workers' status, the plan preview, the
// conditions). Writes and vSphere calls are not in it. "day-to-night" plans the
// switch of every VM; "steady" finds the day layout in place.
//
// It reports, besides ns/op and allocs/op, the time and the bytes allocated per VM per
// pass (ns/VM, B/VM) and what the world retains per VM (heap-B/VM: one node object in
// the cache and one VM of the inventory), which docs/scale.md extrapolates from.
func BenchmarkPass(b *testing.B) {
	for _, n := range []int{320, 1280, 5000} {
		for _, layout := range []string{"night", "day"} {
			name := map[string]string{"night": "day-to-night", "day": "steady"}[layout]
			b.Run(name+"/vms="+strconv.Itoa(n), func(b *testing.B) { benchPass(b, n, layout) })
		}
	}
}

func benchPass(b *testing.B, n int, layout string) {
	before := heapInUse()
	w := newScaleWorld(n, true)
	retained := heapInUse() - before
	ctx := context.Background()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for b.Loop() {
		w.pass(ctx, b, layout)
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/float64(n), "ns/VM")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N)/float64(n), "B/VM")
	b.ReportMetric(float64(retained)/float64(n), "heap-B/VM")
	runtime.KeepAlive(w)
}

// observe connects, checks the tasks and observes as a pass does, into s.
func (w *scaleWorld) observe(ctx context.Context, tb testing.TB, s *scope) {
	tb.Helper()
	vcc, _, ok := w.r.connectVCenter(ctx, s)
	if !ok {
		tb.Fatalf("connect: %+v", s.facts)
	}
	s.vc = vcc
	w.r.checkTasks(ctx, s, false)
	if _, ok := w.r.observe(ctx, s); !ok {
		tb.Fatalf("observe: %+v", s.facts)
	}
}

// pass runs observe and decide, and fills the status from the plan, as Reconcile does,
// on a fresh copy of the stored pool; it writes nothing.
func (w *scaleWorld) pass(ctx context.Context, tb testing.TB, layout string) *scope {
	pool := w.pool.DeepCopy()
	s := &scope{pool: pool, persisted: w.pool, now: w.clock.Now()}
	s.decision = plan.Decision{Layout: layout, Reason: "Default", Window: -1}
	s.wanted = pool.Spec.LayoutNamed(layout)
	w.observe(ctx, tb, s)
	p, making, err := w.r.decide(s)
	if err != nil || len(p.Problems) > 0 {
		tb.Fatalf("decide: %v %v", err, p.Problems)
	}
	s.plan, s.layout = p, making
	execute.Record(s.pool, p, &s.w, s.facts.held, passEvents{w.r, s})
	w.r.publishPlan(ctx, s, p)
	summarize(s)
	return s
}
