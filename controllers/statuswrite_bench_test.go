package controllers

import (
	"encoding/json"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// BenchmarkStatusWrite measures what one status write of a large pool costs on the
// suite's real API server (quiet: nothing else writes), as a pass makes it: the patch of
// poolStatusPatch, locked. The statuses are those of the first passes of a 1,024-worker
// switch (the scale world's Reconcile on a fake API server), from every worker settled
// to every worker with a task in flight, written one after the other in a loop, so that
// each write changes what the passes changed. It reports the bytes of the status written
// (status-B/op). BenchmarkStatusPatch measures the manager's side of it alone.
//
// What it showed (docs/performance.md, the runs of 2026-12-07, 12:00): a write costs the
// API server a decode of the stored object, the merge patch, the schema's validation and
// an encode, each growing with the whole object, not with the patch.
func BenchmarkStatusWrite(b *testing.B) {
	const n = 1024 // the CRD's bound on a layout's workers
	w := newScaleWorld(n, false)
	w.r.maxNodeWrites, w.r.maxEvictions = 1<<20, 1<<20
	ctx := log.IntoContext(b.Context(), logr.Discard())
	var statuses []gpupoolv1.GPUPoolProfileStatus
	size := 0
	for range 4 {
		res, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w.pool)})
		if err != nil {
			b.Fatal(err)
		}
		var p gpupoolv1.GPUPoolProfile
		if err := w.r.APIReader.Get(ctx, client.ObjectKeyFromObject(w.pool), &p); err != nil {
			b.Fatal(err)
		}
		w.clock.Step(testworld.Step(res))
		if k := len(statuses); k > 0 && equality.Semantic.DeepEqual(statuses[k-1], p.Status) {
			continue // a write that changes nothing costs next to nothing
		}
		statuses = append(statuses, p.Status)
		st, _ := json.Marshal(p.Status)
		size += len(st)
	}
	if len(statuses) < 2 {
		b.Fatalf("the switch's passes made %d statuses, want at least 2", len(statuses))
	}
	pool := w.pool.DeepCopy()
	pool.ResourceVersion, pool.Name = "", "bench-status-write"
	pool.Spec.VCenter.Insecure = true // admission asks how the certificate is checked
	if err := k8s.Create(ctx, pool); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k8s.Delete(ctx, pool) })
	b.ResetTimer()
	i := 0
	for b.Loop() {
		from := pool.DeepCopy()
		pool.Status = *statuses[i%len(statuses)].DeepCopy()
		if err := k8s.Status().Patch(ctx, pool, poolStatusPatch(from, true)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(size)/float64(len(statuses)), "status-B/op")
}
