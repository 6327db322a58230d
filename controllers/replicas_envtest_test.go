package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/test/cluster"
)

// TestFractionalGPUs: the day layout selects a time-slicing configuration of the device
// plugin with four replicas per vGPU (samples/timeslicing.yaml), the night layout whole
// GPUs. kwok's device plugin advertises what the node's configuration label says. A day
// node is relabelled once its plugin advertises one GPU (it runs the configuration the
// node had), then kept cordoned in WaitNodeReady until it advertises exactly four; the
// night node is ready with exactly one.
func TestFractionalGPUs(t *testing.T) {
	h := newHarness(t, "frac-")
	pool := h.dayNight()
	four, one := int32(4), int32(1)
	day, night := &pool.Spec.Layouts[0], &pool.Spec.Layouts[1]
	day.NodeLabels[cluster.LabelDevicePluginConfig], day.GPUReplicas = "time-sliced-4", &four
	night.NodeLabels[cluster.LabelDevicePluginConfig], night.GPUReplicas = "whole", &one
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	if got := cluster.AdvertisedGPUs(h.node("night-1")); got != "1" {
		t.Errorf("night-1 advertises %s nvidia.com/gpu, want 1 (a whole GPU)", got)
	}

	// day-1's device plugin is driven by hand (kwok's would take an hour), to see the
	// wait for the replicas; kwok advertises the others'.
	h.patchNodeObj("day-1", func(n *corev1.Node) { n.Annotations[cluster.AnnotationSimGPUDelay] = "1h" })
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.until(pool.Name, 60, "day-1 waiting for its plugin", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"day-1")
		return w != nil && w.Step == gpupoolv1.StepWaitNodeReady && strings.Contains(w.Message, "nvidia.com/gpu (allocatable 0 of 1)")
	})
	h.advertise("day-1", "1") // the plugin starts with the configuration the node had
	p := h.until(pool.Name, 30, "day-1 relabelled, waiting for its replicas", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"day-1")
		return w != nil && w.Step == gpupoolv1.StepWaitNodeReady &&
			strings.Contains(w.Message, "nvidia.com/gpu (allocatable 1 of 4: 4 per vGPU, the layout's gpuReplicas)")
	})
	n := h.node("day-1")
	if n.Labels[cluster.LabelDevicePluginConfig] != "time-sliced-4" || !n.Spec.Unschedulable {
		t.Errorf("day-1 while its plugin runs the old configuration: labels %v, unschedulable %v; want the day configuration and cordoned", n.Labels, n.Spec.Unschedulable)
	}
	if p.Status.Phase == gpupoolv1.PhaseSteady {
		t.Errorf("the pool is Steady while day-1 lacks its replicas")
	}

	h.advertise("day-1", "4") // the plugin restarted with time-sliced-4
	h.converge(pool.Name, "day", 30)
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		n := h.node(vm)
		if got := cluster.AdvertisedGPUs(n); got != "4" || n.Spec.Unschedulable {
			t.Errorf("node %s: %s nvidia.com/gpu, unschedulable %v; want 4 replicas and uncordoned", vm, got, n.Spec.Unschedulable)
		}
	}
	if got := cluster.AdvertisedGPUs(h.node("night-1")); got != "0" {
		t.Errorf("parked night-1 advertises %s nvidia.com/gpu, want 0", got)
	}
}

// advertise plays the device plugin of a node whose simulated one a test slowed down.
func (h *harness) advertise(vm, gpus string) {
	h.t.Helper()
	n := h.node(vm)
	before := n.DeepCopy()
	if n.Status.Allocatable == nil {
		n.Status.Allocatable = corev1.ResourceList{}
	}
	if n.Status.Capacity == nil {
		n.Status.Capacity = corev1.ResourceList{}
	}
	n.Status.Allocatable[cluster.GPUResource] = resource.MustParse(gpus)
	n.Status.Capacity[cluster.GPUResource] = resource.MustParse(gpus)
	h.must(k8s.Status().Patch(h.ctx, n, client.MergeFrom(before)))
}
