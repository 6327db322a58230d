package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
)

// claimPod is a training pod that asks for one vGPU of the simulated DRA driver through
// a ResourceClaimTemplate, pending and unschedulable, as the scheduler leaves it while
// no node publishes a device it could allocate.
func (h *harness) claimPod(name string) *corev1.Pod {
	h.t.Helper()
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-vgpu", Namespace: h.prefix + "apps"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "vgpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cluster.DeviceClassName}}}}}}}
	h.must(k8s.Create(h.ctx, tmpl))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, tmpl) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
			NodeSelector:   map[string]string{"lab.example/workload": "training"},
			Tolerations:    []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpExists}},
		},
	}
	h.must(k8s.Create(h.ctx, pod))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, pod, client.GracePeriodSeconds(0)) })
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/5 nodes are available: cannot allocate all claims"}}
	h.must(k8s.Status().Update(h.ctx, pod))
	return pod
}

// TestDRAClaimBringsNightIn: on a pool whose GPUs a DRA driver publishes (readiness.dra,
// no device plugin), a training pod asking for its vGPU through a ResourceClaimTemplate
// is night's demand and brings night in; the night node is not ready for work, whatever
// its kubelet says, until the driver's ResourceSlice publishes its device, and then is.
func TestDRAClaimBringsNightIn(t *testing.T) {
	h := newHarness(t, "dra-")
	pool := h.demandPool()
	h.dayPastDwell(pool)
	// The driver publishes the day nodes' devices; then the pool counts on DRA alone.
	_, err := cluster.SyncSlices(h.ctx, k8s, h.prefix)
	h.must(err)
	t.Cleanup(func() {
		var slices resourcev1.ResourceSliceList
		_ = k8s.List(h.ctx, &slices)
		for i := range slices.Items {
			if strings.HasPrefix(slices.Items[i].Name, h.prefix) {
				_ = k8s.Delete(h.ctx, &slices.Items[i])
			}
		}
	})
	p := h.get(pool.Name)
	p.Spec.Readiness.GPUResource = ptr.To("")
	p.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: cluster.DeviceClassName, Driver: cluster.DRADriver}
	h.must(k8s.Update(h.ctx, p))

	h.claimPod("train-dra")
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if night := layoutDemand(p, "night"); night.PendingGPUs != 1 || len(night.Pods) != 1 || !strings.Contains(night.Pods[0], "train-dra") {
		t.Fatalf("status.demand for night = %+v, want the claim's vGPU pending (message %q)", night, p.Status.Demand.Message)
	}
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("demand held 2m: desired %s (%s), demand message %q", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}

	// Without the driver's slice, the night node waits for its device.
	const waiting = "devices of " + cluster.DRADriver + " (published 0 of 1)"
	waited := false
	for range 60 {
		res := h.reconcile(pool.Name)
		h.settle()
		p = h.get(pool.Name)
		for _, w := range p.Status.Workers {
			waited = waited || strings.Contains(w.Message, waiting)
		}
		if waited {
			break
		}
		if testworld.Reached(p, "night") {
			t.Fatalf("night reached without a published device: workers %+v", p.Status.Workers)
		}
		h.clock.Step(testworld.Step(res))
	}
	if !waited {
		t.Fatalf("no worker waited for %q: workers %+v", waiting, p.Status.Workers)
	}

	// The driver publishes it: night comes.
	testworld.Loop{T: t, Clock: h.clock,
		Reconcile: func() ctrl.Result { return h.reconcile(pool.Name) },
		Settle: func() {
			h.settle()
			_, err := cluster.SyncSlices(h.ctx, k8s, h.prefix)
			h.must(err)
		},
		Get: func() *gpupoolv1.GPUPoolProfile { return h.get(pool.Name) },
	}.Converge("night", 60)
}
