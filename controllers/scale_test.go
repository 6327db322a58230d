package controllers

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// The scale fixtures: a synthetic site of n vGPU VMs, sixteen to a host of four 16 GiB
// GPUs, each with a Ready node, and a day/night pool over all of them. They are held in
// memory (a fake client, an in-memory vCenter) so that a benchmark measures what
// gpupool computes, not an API server or a SOAP decoder.

const (
	scaleVMsPerHost = 16
	scaleNamespace  = "scale"
)

// memVC is an in-memory vCenter: it serves one inventory, starts every task it is asked
// to and reports them running forever (the worst case for the status: every worker has
// a task in flight). Other methods are not used by the passes under test.
type memVC struct {
	vsphere.Client
	inv *inventory.Inventory
	// tasks numbers the tasks; a pass starts hosts' tasks concurrently.
	tasks *atomic.Int64
}

func (m memVC) Inventory(context.Context, ...string) (*inventory.Inventory, error) { return m.inv, nil }
func (m memVC) InstanceUUID() string                                               { return "mem-vcenter" }
func (m memVC) start() (string, error)                                             { return fmt.Sprintf("task-%d", m.tasks.Add(1)), nil }
func (m memVC) Suspend(context.Context, string) (string, error)                    { return m.start() }
func (m memVC) PowerOff(context.Context, string) (string, error)                   { return m.start() }
func (m memVC) PowerOn(context.Context, string, string) (string, error)            { return m.start() }
func (m memVC) ShutdownGuest(context.Context, string) error                        { return vsphere.ErrToolsUnavailable }
func (m memVC) SetProfile(context.Context, string, string, int) (string, error)    { return m.start() }
func (m memVC) Tasks(_ context.Context, ids []string) (map[string]vsphere.TaskInfo, error) {
	out := make(map[string]vsphere.TaskInfo, len(ids))
	for _, id := range ids {
		out[id] = vsphere.TaskInfo{State: vsphere.TaskRunning}
	}
	return out, nil
}

type memConnector struct{ vc memVC }

func (c memConnector) Connect(context.Context, vsphere.Config) (vsphere.Client, error) {
	return c.vc, nil
}

// scaleSite is n VMs: by day every one runs grid_p100-4q, by night four per host run
// grid_p100-16q. Every VM carries ten recent task ids, as vCenter keeps them.
func scaleSite(n int) (*inventory.Inventory, *gpupoolv1.GPUPoolProfile) {
	inv := &inventory.Inventory{}
	day, night := gpupoolv1.Layout{Name: "day"}, gpupoolv1.Layout{Name: "night"}
	profiles := []inventory.Profile{
		{Name: "grid_p100-4q", FrameBufferMiB: 4 * 1024, SuspendSupported: true},
		{Name: "grid_p100-16q", FrameBufferMiB: 16 * 1024, SuspendSupported: true},
	}
	for h := 0; h*scaleVMsPerHost < n; h++ {
		host := inventory.Host{Name: fmt.Sprintf("esx-%04d.site.example", h), Ref: fmt.Sprintf("host-%d", h),
			Policy: inventory.PolicyPerformance, Profiles: profiles}
		for g := range 4 {
			host.GPUs = append(host.GPUs, inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), MemoryMiB: 16 * 1024})
		}
		for i := 0; i < scaleVMsPerHost && h*scaleVMsPerHost+i < n; i++ {
			name := fmt.Sprintf("gpu-%04d-%02d", h, i)
			gpu := &host.GPUs[i%4]
			gpu.VMs = append(gpu.VMs, name)
			var recent []string
			for t := range 10 {
				recent = append(recent, fmt.Sprintf("task-%d-%d-%d", h, i, t))
			}
			inv.VMs = append(inv.VMs, inventory.VM{Name: name, Path: "/dc1/vm/gpu/" + name, Ref: fmt.Sprintf("vm-%d-%d", h, i),
				UUID: fmt.Sprintf("4211%04x-0000-0000-0000-%012x", h, i), Host: host.Name, Profile: "grid_p100-4q",
				PowerState: inventory.PoweredOn, GPU: gpu.PCIID, GPUs: []string{gpu.PCIID}, RecentTasks: recent})
			day.Workers = append(day.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-4q"})
			if i < 4 {
				night.Workers = append(night.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-16q"})
			}
		}
		inv.Hosts = append(inv.Hosts, host)
	}
	pool := &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "scale", Generation: 1, CreationTimestamp: metav1.NewTime(monday0700)},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{Server: "vc.site.example", Datacenter: "dc1",
				CredentialsSecretRef: gpupoolv1.SecretReference{Name: "vcenter", Namespace: scaleNamespace}},
			Layouts:       []gpupoolv1.Layout{day, night},
			DefaultLayout: "night",
			Parking:       gpupoolv1.ParkingSuspend,
			MaxParallel:   int32(n), // every host at once: the largest passes and status
			Drain:         gpupoolv1.DrainSpec{DeleteEmptyDirData: true},
		},
	}
	return inv, pool
}

// scaleNode is a Ready node of a VM, with about the fields and sizes a kubelet reports
// (conditions, addresses, capacity, node info, images), labelled for the day layout.
func scaleNode(pool string, vm *inventory.VM) *corev1.Node {
	now := metav1.NewTime(monday0700)
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110"), nodes.DefaultGPUResource: resource.MustParse("1")}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Labels: map[string]string{
			"kubernetes.io/hostname": vm.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "vgpu-worker",
		}},
		Spec: corev1.NodeSpec{ProviderID: "vsphere://" + vm.UUID, PodCIDR: "10.244.0.0/24"},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: vm.Name}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.31.0", OSImage: "Ubuntu 24.04 LTS", ContainerRuntimeVersion: "containerd://1.7.20", MachineID: vm.UUID, SystemUUID: vm.UUID},
		},
	}
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletHasSufficient" + string(c), Message: "kubelet has sufficient resources"})
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	for i := range 8 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.example/app/image-%d@sha256:%064d", i, i)}, SizeBytes: 1 << 28})
	}
	nodes.ApplyMeta(n, nodes.ActiveMeta(pool, &gpupoolv1.Layout{Name: "day"}, "grid_p100-4q", 4*1024))
	return n
}

// scaleWorld is a reconciler over an n-VM site held in memory, and the pool as stored.
type scaleWorld struct {
	r     *GPUPoolProfileReconciler
	pool  *gpupoolv1.GPUPoolProfile
	inv   *inventory.Inventory
	clock *clocktesting.FakeClock
}

// newScaleWorld builds the world. With frozen, nodes are listed from a copy taken now
// (cachedNodes), which is fast but does not see the pass's own node writes: for
// benchmarks of passes that write nothing.
func newScaleWorld(n int, frozen bool) *scaleWorld {
	inv, pool := scaleSite(n)
	objs := []client.Object{pool.DeepCopy(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vcenter", Namespace: scaleNamespace},
			Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}}}
	for i := range inv.VMs {
		objs = append(objs, scaleNode(pool.Name, &inv.VMs[i]))
	}
	stored := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(objs...).
		WithStatusSubresource(&gpupoolv1.GPUPoolProfile{}).
		WithIndex(&corev1.Pod{}, podNodeNameField, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	var cache []corev1.Node
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			cache = append(cache, *n)
		}
	}
	var c client.Client = stored
	if frozen {
		c = interceptor.NewClient(stored, interceptor.Funcs{List: cachedNodes(cache)})
	}
	clock := clocktesting.NewFakeClock(monday1000)
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, Recorder: discardRecorder{}, Clock: clock,
		VSphere: memConnector{memVC{inv: inv, tasks: new(atomic.Int64)}}, Credentials: secretpolicy.Policy{Namespace: scaleNamespace}}
	return &scaleWorld{r: r, pool: pool, inv: inv, clock: clock}
}

// cachedNodes lists nodes as the manager's informer cache does: by deep-copying each
// object it holds, or with client.UnsafeDisableDeepCopy (observe's list) into a shallow
// copy of it, whose maps and slices are the cache's; the fake client would round-trip
// every node through JSON (ten times the cost, which would measure the fake, not
// gpupool).
func cachedNodes(cache []corev1.Node) func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
	return func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		nodes, ok := list.(*corev1.NodeList)
		if !ok {
			return c.List(ctx, list, opts...)
		}
		var lo client.ListOptions
		lo.ApplyOptions(opts)
		nodes.Items = make([]corev1.Node, len(cache))
		for i := range cache {
			if lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy {
				nodes.Items[i] = cache[i]
			} else {
				cache[i].DeepCopyInto(&nodes.Items[i])
			}
		}
		return nil
	}
}

// discardRecorder drops events: a fake recorder's channel would fill at scale.
type discardRecorder struct{}

func (discardRecorder) Eventf(k8sruntime.Object, k8sruntime.Object, string, string, string, string, ...interface{}) {
}

var _ events.EventRecorder = discardRecorder{}

// heapInUse is the live heap after a collection, to measure what a world retains.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
