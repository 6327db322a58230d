package controllers

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// TestPassesCapTheirWrites: with caps of two node writes and one eviction a pass, a
// day-to-night switch of four nodes with two pods each (eight evictions, a dozen node
// writes) converges over several passes; no pass writes more than the caps, a pass
// that reached one asks to be followed at once, and the workers' progress is in the
// status after every pass.
func TestPassesCapTheirWrites(t *testing.T) {
	h := newHarness(t, "cap-")
	var nodeWrites, evictions atomic.Int32
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, isNode := obj.(*corev1.Node); isNode {
					nodeWrites.Add(1)
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, sr client.Object, opts ...client.SubResourceCreateOption) error {
				if sub == "eviction" {
					evictions.Add(1)
				}
				return c.SubResource(sub).Create(ctx, obj, sr, opts...)
			},
		})
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	for i, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		for j := range 2 {
			h.addPod("p"+string(rune('a'+2*i+j)), h.prefix+vm, map[string]string{"app": "p"})
		}
	}
	rec := h.reconciler()
	rec.maxNodeWrites, rec.maxEvictions = 2, 1
	h.clock.SetTime(monday1950)
	capped, progressed := 0, 0
	var totalWrites, totalEvictions int32
	lastSteps := ""
	for pass := 0; pass < 80; pass++ {
		nodeWrites.Store(0)
		evictions.Store(0)
		res := h.reconcile(pool.Name)
		w, e := nodeWrites.Load(), evictions.Load()
		totalWrites, totalEvictions = totalWrites+w, totalEvictions+e
		if w > 2 || e > 1 {
			t.Fatalf("pass %d made %d node writes and %d evictions, want at most 2 and 1", pass, w, e)
		}
		if res.RequeueAfter == requeueCapped {
			capped++
		}
		p := h.get(pool.Name)
		if steps := workerSteps(p); steps != lastSteps {
			progressed, lastSteps = progressed+1, steps
		}
		if p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "night" {
			if capped < 4 || totalEvictions != 8 || totalWrites < 8 {
				t.Errorf("converged with %d capped passes, %d evictions and %d node writes; want several capped passes, 8 evictions, 8 or more writes", capped, totalEvictions, totalWrites)
			}
			t.Logf("converged after %d passes, %d of them capped; %d node writes, %d evictions; the workers' steps changed %d times", pass+1, capped, totalWrites, totalEvictions, progressed)
			return
		}
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	p := h.get(pool.Name)
	t.Fatalf("did not converge to night: phase %s, workers %s, %s", p.Status.Phase, workerSteps(p), testworld.Conditions(p))
}

func workerSteps(p *gpupoolv1.GPUPoolProfile) string {
	out := ""
	for _, w := range p.Status.Workers {
		out += w.VM + "=" + string(w.Step) + " "
	}
	return out
}
