package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/testworld"
)

// TestPassesCapTheirWrites: with caps of two node writes (and cordons) and one eviction a pass, a
// day-to-night switch of four nodes with two pods each (eight evictions, a dozen node
// writes) converges over several passes; no pass writes more than the caps, a pass
// that reached one asks to be followed at once, and the workers' progress is in the
// status after every pass.
func TestPassesCapTheirWrites(t *testing.T) {
	h := newHarness(t, "cap-")
	nodeWrites, evictions := countWrites(h)
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
	rec.maxNodeWrites, rec.maxCordons, rec.maxEvictions = 2, 2, 1
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

// TestCordonsTakeOnePass: with a cap of two node writes a pass but the cordons' own
// allowance, the first pass of a day-to-night switch cordons all four day nodes and
// evicts from them in the same pass (the tests' reconciler evicts inside the pass),
// rather than a pass per two cordons and every eviction after the last; the passes
// after it make no more than two node writes each, and the switch completes.
func TestCordonsTakeOnePass(t *testing.T) {
	h := newHarness(t, "cop-")
	nodeWrites, evictions := countWrites(h)
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	days := []string{"day-1", "day-2", "day-3", "day-4"}
	for i, vm := range days {
		h.addPod("p"+string(rune('a'+i)), h.prefix+vm, map[string]string{"app": "p"})
	}
	rec := h.reconciler()
	rec.maxNodeWrites = 2
	h.clock.SetTime(monday1950)
	cordoned := func() int {
		n := 0
		for _, vm := range days {
			if h.node(vm).Spec.Unschedulable {
				n++
			}
		}
		return n
	}
	first := true
	for pass := range 80 {
		nodeWrites.Store(0)
		evictions.Store(0)
		res := h.reconcile(pool.Name)
		if c := cordoned(); first && c > 0 {
			first = false
			if c != len(days) || evictions.Load() == 0 {
				t.Fatalf("the first pass that cordoned cordoned %d of %d day nodes and evicted %d pods; want all cordoned, evictions in the same pass", c, len(days), evictions.Load())
			}
		} else if w := nodeWrites.Load(); !first && w > 2 {
			t.Errorf("pass %d made %d node writes after the cordons, want at most 2", pass, w)
		}
		p := h.get(pool.Name)
		if p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "night" {
			return
		}
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	p := h.get(pool.Name)
	t.Fatalf("did not converge to night: phase %s, workers %s, %s", p.Status.Phase, workerSteps(p), testworld.Conditions(p))
}

// countWrites makes the harness's reconcilers count their node patches and evictions.
func countWrites(h *harness) (nodeWrites, evictions *atomic.Int32) {
	nodeWrites, evictions = &atomic.Int32{}, &atomic.Int32{}
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
	return nodeWrites, evictions
}

func workerSteps(p *gpupoolv1.GPUPoolProfile) string {
	out := ""
	for _, w := range p.Status.Workers {
		out += w.VM + "=" + string(w.Step) + " "
	}
	return out
}

// TestAfterCapped: a capped pass that made progress is followed at once; one that made
// none backs off, doubling from requeueStep to maxCappedBackoff over the passes in a
// row, whatever its phases ask; progress or an uncapped pass starts over.
func TestAfterCapped(t *testing.T) {
	tests := []struct {
		name               string
		after              time.Duration
		capped, progressed bool
		stalls             int
		want               time.Duration
		wantStalls         int
	}{
		{"not capped", 10 * time.Second, false, false, 3, 10 * time.Second, 0},
		{"capped, progress", 10 * time.Second, true, true, 3, requeueCapped, 0},
		{"capped, no progress, first", 0, true, false, 0, requeueStep, 1},
		{"capped, no progress, third", time.Hour, true, false, 2, 4 * requeueStep, 3},
		{"capped, no progress, bounded", 0, true, false, 40, maxCappedBackoff, 41},
		{"capped, no progress, phases ask sooner", time.Second, true, false, 5, 32 * time.Second, 6},
	}
	for _, tc := range tests {
		got, stalls := afterCapped(tc.after, tc.capped, tc.progressed, tc.stalls)
		if got != tc.want || stalls != tc.wantStalls {
			t.Errorf("%s: %v after %d stalls, want %v after %d", tc.name, got, stalls, tc.want, tc.wantStalls)
		}
	}

	var c stallCount
	stuck := execute.NewBudget(0, 0)
	stuck.NodeWrite()
	var got []time.Duration
	for range 9 {
		got = append(got, c.next("p", time.Hour, stuck))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("back-off %v, want %v seconds", got, want)
		}
	}
	if c.next("other", time.Hour, stuck) != requeueStep {
		t.Error("another pool's back-off did not start at requeueStep")
	}
	moving := execute.NewBudget(1, 0)
	moving.NodeWrite()
	moving.NodeWritten(nil)
	moving.NodeWrite() // capped
	if got := c.next("p", time.Hour, moving); got != requeueCapped {
		t.Errorf("a capped pass with progress comes back after %v", got)
	}
	if got := c.next("p", time.Hour, stuck); got != requeueStep {
		t.Errorf("after progress the back-off starts at %v, want requeueStep", got)
	}
}

// TestCappedPassWithoutProgressBacksOff: with a cap of two node writes (and cordons) a pass, a
// day-to-night switch whose node patches the API server refuses is capped on every pass
// and writes nothing. Its passes do not come back after requeueCapped, re-reading
// vCenter every millisecond, but after a back-off that grows; once the patches go
// through, capped passes follow at once again and the switch completes.
func TestCappedPassWithoutProgressBacksOff(t *testing.T) {
	h := newHarness(t, "capbo-")
	var refuse atomic.Bool
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, isNode := obj.(*corev1.Node); isNode && refuse.Load() {
					return apierrors.NewForbidden(corev1.Resource("nodes"), obj.GetName(), errors.New("refused by the test"))
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		})
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	rec := h.reconciler()
	rec.maxNodeWrites, rec.maxCordons = 2, 2
	refuse.Store(true)
	h.clock.SetTime(monday1950)
	var last time.Duration
	for pass := range 8 {
		res := h.reconcile(pool.Name)
		if res.RequeueAfter < requeueStep || res.RequeueAfter > maxCappedBackoff {
			t.Fatalf("pass %d with every node patch refused comes back after %v, want a back-off from %v to %v", pass, res.RequeueAfter, requeueStep, maxCappedBackoff)
		}
		if pass < 4 && res.RequeueAfter <= last {
			t.Errorf("pass %d comes back after %v, after %v before: the back-off does not grow", pass, res.RequeueAfter, last)
		}
		if res.RequeueAfter < last {
			t.Errorf("pass %d comes back after %v, sooner than the %v before", pass, res.RequeueAfter, last)
		}
		last = res.RequeueAfter
		h.settle()
		h.clock.Step(res.RequeueAfter)
	}
	if st := h.vm("day-1"); st.PowerState != "poweredOn" {
		t.Fatalf("day-1 is %s although its node could not be cordoned", st.PowerState)
	}
	condition(t, h.get(pool.Name), gpupoolv1.ConditionDegraded, metav1.ConditionTrue, ReasonStepFailed, "refused by the test")

	refuse.Store(false)
	followed := 0
	for pass := range 80 {
		res := h.reconcile(pool.Name)
		if res.RequeueAfter == requeueCapped {
			followed++
		}
		p := h.get(pool.Name)
		if p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "night" {
			if followed == 0 {
				t.Error("no capped pass was followed at once after the patches went through")
			}
			t.Logf("recovered: night after %d passes, %d of them capped and followed at once", pass+1, followed)
			return
		}
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	p := h.get(pool.Name)
	t.Fatalf("did not converge to night once the patches went through: phase %s, workers %s, %s", p.Status.Phase, workerSteps(p), testworld.Conditions(p))
}
