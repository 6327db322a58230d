package controllers

import (
	"encoding/json"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// maxStatusBytes1024 is what the status of a pool of 1,024 workers may take, as JSON:
// 640 KiB, 625 bytes a worker (about 500 measured with every worker mid-task). etcd
// refuses a write over 1.5 MiB (--max-request-bytes); the object is the status plus the
// spec (about 60 bytes a worker per layout naming it) plus metadata, so a pool of
// 1,024 workers keeps more than half of the limit free, and the limit is reached near
// 2,400 workers: docs/scale.md says to split pools before that.
const maxStatusBytes1024 = 640 << 10

// TestStatusOf1024WorkersStaysBounded runs a 1,024-worker pool's switch with the real
// passes (Reconcile, on a fake API server and an in-memory vCenter whose tasks never
// end) until every worker to change has a task in flight: the status is then at its
// largest, every worker with a step, a message, a task and the VM's recent task ids. It
// must stay under maxStatusBytes1024 on every pass.
func TestStatusOf1024WorkersStaysBounded(t *testing.T) {
	w := newScaleWorld(1024, false)
	// The per-pass caps only spread the same writes over more passes: lifted, the
	// switch reaches its largest status in two passes.
	w.r.maxNodeWrites, w.r.maxEvictions = 1<<20, 1<<20
	ctx := log.IntoContext(t.Context(), logr.Discard())
	largest, whole, inFlight := 0, 0, 0
	for pass := 0; pass < 60 && inFlight < 1024; pass++ {
		res, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w.pool)})
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		var p gpupoolv1.GPUPoolProfile
		if err := w.r.APIReader.Get(ctx, client.ObjectKeyFromObject(w.pool), &p); err != nil {
			t.Fatal(err)
		}
		st, _ := json.Marshal(p.Status)
		obj, _ := json.Marshal(&p)
		largest, whole = max(largest, len(st)), max(whole, len(obj))
		inFlight = 0
		for _, ws := range p.Status.Workers {
			if ws.Task != nil {
				inFlight++
			}
		}
		if testing.Verbose() {
			t.Logf("pass %d: %d in flight, status %d bytes, phase %s, requeue %s", pass, inFlight, len(st), p.Status.Phase, res.RequeueAfter)
		}
		w.clock.Step(testworld.Step(res))
	}
	if inFlight < 1024 {
		t.Fatalf("only %d of 1024 workers reached a task in flight", inFlight)
	}
	t.Logf("largest status %d bytes (%d per worker), whole object %d bytes", largest, largest/1024, whole)
	if largest > maxStatusBytes1024 {
		t.Errorf("the status of a 1,024-worker pool took %d bytes, want at most %d", largest, maxStatusBytes1024)
	}
}
