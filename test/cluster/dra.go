package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The simulated DRA driver: where a VM's node is Ready, it publishes the VM's vGPUs as
// devices in a ResourceSlice of the node, as a DRA driver running on the node would
// (NVIDIA's publishes gpu.nvidia.com devices), and withdraws the slice when the node is
// not Ready. kwok cannot create objects, so the power wire (the local environment, the
// tests) calls SyncSlices after SyncPower.
const (
	// DRADriver is the simulated driver's name (the slices' spec.driver).
	DRADriver = "vgpu.sim.gpupool.dev"
	// DeviceClassName is the DeviceClass of the simulated driver's devices, what a pod's
	// ResourceClaim asks for.
	DeviceClassName = "vgpu.sim.gpupool.dev"
)

// DeviceClass is the class of the simulated driver's devices: every device it publishes.
func DeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DRADriver)}}}},
	}
}

// SliceName is the name of the ResourceSlice the simulated driver publishes for a node.
func SliceName(node string) string {
	return node + "-" + strings.ReplaceAll(DRADriver, ".", "-")
}

// SliceFor is the ResourceSlice the simulated driver publishes for a Ready node: one
// device per vGPU of its VM (vgpu-0, vgpu-1, ...), in a pool named after the node.
func SliceFor(n *corev1.Node) *resourcev1.ResourceSlice {
	g, _ := strconv.Atoi(n.Annotations[AnnotationSimGPUs])
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: SliceName(n.Name)},
		Spec: resourcev1.ResourceSliceSpec{Driver: DRADriver, NodeName: &n.Name,
			Pool: resourcev1.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1}},
	}
	for i := range g {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("vgpu-%d", i)})
	}
	return s
}

// SyncSlices publishes the slice of every simulated node whose name starts with prefix
// that is Ready, with as many devices as its VM has vGPUs, and deletes the slice of
// every such node that is not. It reports whether it changed any.
func SyncSlices(ctx context.Context, c client.Client, prefix string) (bool, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return false, err
	}
	changed := false
	var errs []error
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Annotations[AnnotationKwokNode] == "" || !strings.HasPrefix(n.Name, prefix) {
			continue
		}
		did, err := syncSlice(ctx, c, n)
		changed = changed || did
		errs = append(errs, err)
	}
	return changed, errors.Join(errs...)
}

func syncSlice(ctx context.Context, c client.Client, n *corev1.Node) (bool, error) {
	want := SliceFor(n)
	var have resourcev1.ResourceSlice
	err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &have)
	switch {
	case apierrors.IsNotFound(err):
		if !Ready(n) || len(want.Spec.Devices) == 0 {
			return false, nil
		}
		return true, c.Create(ctx, want)
	case err != nil:
		return false, err
	case !Ready(n):
		return true, client.IgnoreNotFound(c.Delete(ctx, &have))
	case len(have.Spec.Devices) != len(want.Spec.Devices):
		// A VM reshaped to another vGPU count: the driver republishes its pool.
		have.Spec.Devices = want.Spec.Devices
		have.Spec.Pool.Generation++
		return true, c.Update(ctx, &have)
	}
	return false, nil
}
