package controllers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/vsphere"
)

// TestSuspendsAfterDrains: day -> night on the one-host world (a pod on each day node),
// with the manager's eviction rounds, task starts and pod watches. The evicted pods stay
// terminating (a finalizer holds them): a pass that settles the rounds stores the four day
// VMs' suspends and hands them out, and nothing is asked of vCenter while the pods are
// there, however many passes run. Once the pods are gone the four suspends are asked,
// without another pass, each once and after its node's parked marks (intentStored);
// the passes then reach night, each VM's operation asked once. In the second run the
// pods do not go: a pass that observes the nodes drained (the pods terminating past
// their grace period) lets the suspends go instead. In the third the pods take longer
// than StartTimeout to go (pods bound to the nodes meanwhile, which the passes evict)
// while passes go on planning the same switch: those passes renew the suspends
// (Starts.Renew), which are asked once the pods are gone, still without another pass and
// each once.
func TestSuspendsAfterDrains(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		podsGo       bool
		renewed      bool // the pods go past StartTimeout, passes planning the switch meanwhile
	}{
		{"the pods go", "sad-", true, false},
		{"a pass sees the nodes drained", "sap-", false, false},
		{"the pods go past StartTimeout", "sar-", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			door, starts := h.doorStarts(true)
			if c.renewed {
				starts.Now = h.clock.Now // StartTimeout on the test's clock, which the passes step
			}
			rec := h.withPodWatches()
			pool := h.dayNight()
			h.clock.SetTime(monday1000)
			h.create(pool)
			var pods []*corev1.Pod
			release := func() { // the pods' finalizers gone: the pods go (kwok deleted them)
				for _, p := range pods {
					h.must(client.IgnoreNotFound(k8s.Patch(h.ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))))
				}
			}
			t.Cleanup(release)
			hold := func(name, node string) *corev1.Pod {
				p := h.addPod(name, node, map[string]string{"app": "infer"})
				// Held terminating once evicted, until the test lets it go.
				h.must(k8s.Patch(h.ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["test.gpupool.dev/hold"]}}`))))
				return p
			}
			for i := range 4 {
				pods = append(pods, hold(pool.Name+"-infer-"+string(rune('1'+i)), h.prefix+"day-"+string(rune('1'+i))))
			}
			h.converge(pool.Name, "day", 30)
			asked := door.counts()
			before := testutil.ToFloat64(execute.SuspendsAfterDrains.WithLabelValues(pool.Name, "asked"))

			h.clock.SetTime(monday1950)
			handedOut := false
			for range 30 {
				h.reconcile(pool.Name)
				rec.evictions.Wait()
				if suspending(h.get(pool.Name)) == 4 {
					handedOut = true
					break
				}
				h.clock.Step(time.Second) // short of the pods' grace period
			}
			if !handedOut {
				t.Fatalf("no pass handed out the four suspends after the drains: %+v", h.get(pool.Name).Status.Workers)
			}
			for range 3 { // passes while the pods are terminating ask nothing
				h.reconcile(pool.Name)
				rec.evictions.Wait()
				h.clock.Step(time.Second)
			}
			for vm, n := range door.counts() {
				if n != asked[vm] {
					t.Fatalf("VM %s's operation asked while the pods were terminating", vm)
				}
			}
			if c.renewed {
				for k := range 3 { // the passes go on with the switch, past the handout's StartTimeout
					for i := range 4 { // a pod bound meanwhile: the drains go on
						pods = append(pods, hold(fmt.Sprintf("%s-late-%d-%d", pool.Name, k, i+1), h.prefix+"day-"+string(rune('1'+i))))
					}
					h.clock.Step(50 * time.Second) // short of TerminatingMargin for the last pods evicted
					h.reconcile(pool.Name)
					rec.evictions.Wait()
				}
				if n := suspending(h.get(pool.Name)); n != 4 {
					t.Fatalf("%d suspends still waiting for their drains past StartTimeout, want the four handed out (renewed): %+v", n, h.get(pool.Name).Status.Workers)
				}
			}
			if c.podsGo {
				release()
			} else {
				h.clock.Step(2 * time.Minute) // past the pods' grace period and the margin
				h.reconcile(pool.Name)
			}
			starts.Wait() // the suspends answered: no pass ran since the pods went
			now := door.counts()
			for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
				ref, _ := h.sim.VMRef(h.prefix + vm)
				if n := now[ref] - asked[ref]; n != 1 {
					t.Errorf("VM %s's suspend asked %d times once the drains ended, want once", vm, n)
				}
			}
			if got := testutil.ToFloat64(execute.SuspendsAfterDrains.WithLabelValues(pool.Name, "asked")) - before; got != 4 {
				t.Errorf("%v suspends counted asked after drains, want 4", got)
			}
			h.converge(pool.Name, "night", 30)
			total := 0
			for vm, n := range door.counts() {
				total += n - asked[vm]
				if n-asked[vm] > 1 {
					t.Errorf("VM %s's operations asked %d times, want once", vm, n-asked[vm])
				}
			}
			if total != 5 {
				t.Errorf("%d operations asked, want 5: four suspends and the night VM's power-on", total)
			}
			if len(door.unstored) > 0 {
				t.Errorf("asked before its intent was stored or its node marked: %v", door.unstored)
			}
		})
	}
}

// withPodWatches gives the harness's reconciler the manager's eviction rounds and pod
// watches (the suspends after drains wait on them) and returns it.
func (h *harness) withPodWatches() *GPUPoolProfileReconciler {
	h.t.Helper()
	cs, err := kubernetes.NewForConfig(operatorConfig)
	if err != nil {
		h.t.Fatal(err)
	}
	rec := h.reconciler()
	rec.evictions = execute.NewEvictions(h.ctx, nil)
	rec.nodePods = newNodePods(h.ctx, cs)
	return rec
}

// suspending is how many of the pool's workers hold a suspend's intent not yet started.
func suspending(p *gpupoolv1.GPUPoolProfile) int {
	return len(slices.DeleteFunc(slices.Clone(p.Status.Workers), func(w gpupoolv1.WorkerStatus) bool {
		return w.Task == nil || w.Task.Operation != string(vsphere.OpSuspend) || w.Task.ID != ""
	}))
}
