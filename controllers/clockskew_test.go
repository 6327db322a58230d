package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/vsphere"
)

// clockOffsets are how far the operator's clock is set from the API server's and
// vgpusim's (which keep the real time) in the clock-offset tests.
var clockOffsets = []time.Duration{-5 * time.Minute, -90 * time.Second, 0, 90 * time.Second, 5 * time.Minute}

// TestTerminatingWaitIgnoresClockOffset: a terminating pod on a Ready node holds a drain
// for its grace period plus drain.TerminatingMargin, measured on the operator's clock from when
// it first saw the pod terminating, whatever the offset between the operator's clock and
// the API server's, which stamped the pod's deletionTimestamp. The wait is neither skipped
// (an operator clock ahead) nor extended (one behind).
func TestTerminatingWaitIgnoresClockOffset(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "skew-apps"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const grace = 30 * time.Second
	for i, offset := range clockOffsets {
		t.Run(fmt.Sprintf("operator clock %s", offset), func(t *testing.T) {
			// A node that does not exist: no kubelet ends the pod, the finalizer keeps it.
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("skew-node-%d", i)},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("held-%d", i), Namespace: ns.Name, Finalizers: []string{"example.com/hold"}},
				Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}},
			}
			if err := k8s.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				var cur corev1.Pod
				if k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &cur) == nil {
					before := cur.DeepCopy()
					cur.Finalizers = nil
					_ = k8s.Patch(context.Background(), &cur, client.MergeFrom(before))
				}
			})
			if err := k8s.Delete(ctx, pod, client.GracePeriodSeconds(int64(grace/time.Second))); err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Now().Add(offset))
			r := &GPUPoolProfileReconciler{Client: k8s, Clock: clk}
			waiting := func(when string, want bool) {
				t.Helper()
				res, err := r.drainer().Drain(ctx, node, gpupoolv1.DrainSpec{}, clk.Now(), clk.Now(), nil)
				if err != nil {
					t.Fatal(err)
				}
				pods, err := r.podsOnNode(ctx, node.Name)
				if err != nil {
					t.Fatal(err)
				}
				evict := r.anyToEvict(pods, true, clk.Now())
				if got := len(res.Waiting) == 1; got != want || res.Done == want || evict != want {
					t.Errorf("%s: waiting %v (%s), anyToEvict %v; want waiting %v", when, res.Waiting, res.Message(), evict, want)
				}
			}
			waiting("first seen terminating", true)
			clk.Step(grace + drain.TerminatingMargin - time.Second)
			waiting("a second before grace + margin", true)
			clk.Step(2 * time.Second)
			waiting("a second after grace + margin", false)
			// On a node that is not Ready, never.
			clk.Step(-time.Minute)
			if r.anyToEvict([]corev1.Pod{*mustGetPod(t, pod)}, false, clk.Now()) {
				t.Error("a terminating pod on a node that is not Ready holds the drain")
			}
		})
	}
}

func mustGetPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
		t.Fatal(err)
	}
	return &cur
}

// TestTimeoutsIgnoreClockOffset: the guest-shutdown timeout and the drain timeout, on a
// pool whose operator clock is off from the API server's and vgpusim's, start when the
// operator started the step and end exactly their timeout later on its clock: the
// guests are powered off hard no earlier and no later, and a drain that a terminating pod
// holds is forced no earlier than drain.timeout.
func TestTimeoutsIgnoreClockOffset(t *testing.T) {
	for i, offset := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		t.Run(fmt.Sprintf("operator clock %s", offset), func(t *testing.T) {
			h := newHarness(t, fmt.Sprintf("skt%d-", i))
			h.sim.SetTaskDelay("ShutdownGuest", time.Hour) // the guests never finish
			pool := h.dayNight()
			pool.Spec.Parking = gpupoolv1.ParkingPowerOff
			pool.Spec.GuestShutdownTimeout = &metav1.Duration{Duration: time.Minute}
			pool.Spec.Drain.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
			pool.Spec.Drain.OnTimeout = gpupoolv1.DrainForce
			// An override, so that the layout does not depend on the real date.
			pool.Spec.Override = &gpupoolv1.Override{Layout: "day"}
			h.clock.SetTime(time.Now().Add(offset))
			h.create(pool)
			h.converge(pool.Name, "day", 30)

			// A pod that stays terminating holds day-2's drain.
			pod := h.addPod("held", h.prefix+"day-2", map[string]string{"app": "held"})
			h.patchPod(pod, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/never"} })
			t.Cleanup(func() { h.patchPod(pod, func(p *corev1.Pod) { p.Finalizers = nil }) })
			h.must(k8s.Delete(h.ctx, pod, client.GracePeriodSeconds(0)))

			h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Override.Layout = "night" })
			start := h.clock.Now()
			forcedAt, hardAt := time.Time{}, map[string]time.Time{}
			shutdownAt := map[string]time.Time{}
			for range 120 {
				res := h.reconcile(pool.Name)
				h.settle()
				p := h.get(pool.Name)
				for _, w := range p.Status.Workers {
					if w.GuestShutdownTime != nil {
						shutdownAt[w.VM] = w.GuestShutdownTime.Time
					}
					if w.Task != nil && w.Task.Operation == string(vsphere.OpPowerOff) && hardAt[w.VM].IsZero() {
						hardAt[w.VM] = w.Task.StartTime.Time
					}
				}
				if forcedAt.IsZero() && containsEvent(h.events(), "DrainForced") {
					forcedAt = h.clock.Now()
				}
				if p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "night" {
					break
				}
				h.clock.Step(testworld.Step(res))
			}
			h.checkNightParkedOff(h.get(pool.Name))
			// grace 0 + drain.TerminatingMargin (1m) < drain.timeout (2m): the pod stops holding
			// the drain before the timeout; the drain itself is never forced early.
			if !forcedAt.IsZero() && forcedAt.Sub(start) < 2*time.Minute {
				t.Errorf("drain forced %s after the switch began, before drain.timeout (2m)", forcedAt.Sub(start))
			}
			// The terminating pod held day-2's drain for drain.TerminatingMargin (its grace
			// period is 0) from when the operator first saw it: not less (a clock
			// ahead), not much more (a clock behind; a pass or two of slack).
			if held := shutdownAt[h.prefix+"day-2"].Sub(start); held < drain.TerminatingMargin || held > drain.TerminatingMargin+30*time.Second {
				t.Errorf("day-2's drain was held %s by its terminating pod, want %s to %s", held, drain.TerminatingMargin, drain.TerminatingMargin+30*time.Second)
			}
			if len(hardAt) != 4 {
				t.Fatalf("hard power-offs %v, want the 4 day VMs", hardAt)
			}
			for vm, at := range hardAt {
				sd, ok := shutdownAt[vm]
				// The pass that powers off comes at most one requeue (10s) after the timeout.
				if waited := at.Sub(sd); !ok || waited < time.Minute || waited > time.Minute+10*time.Second {
					t.Errorf("VM %s powered off hard %s after its guest was asked to shut down (asked at %v), want 1m to 1m10s", vm, waited, ok)
				}
			}
		})
	}
}

func containsEvent(evs []string, reason string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, reason) })
}

func (h *harness) patchPod(p *corev1.Pod, change func(*corev1.Pod)) {
	h.t.Helper()
	var cur corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
		return // gone
	}
	before := cur.DeepCopy()
	change(&cur)
	h.must(client.IgnoreNotFound(k8s.Patch(context.Background(), &cur, client.MergeFrom(before))))
}

func (h *harness) patchPool(name string, change func(*gpupoolv1.GPUPoolProfile)) {
	h.t.Helper()
	p := h.get(name)
	before := p.DeepCopy()
	change(p)
	h.must(k8s.Patch(h.ctx, p, client.MergeFrom(before)))
}
