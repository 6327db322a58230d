package vsphere

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// TestVGPUMode: the GPU's own vgpuMode wins, then the host's graphicsConfig device type
// for its PCI id; hosts before 8.0.3 report neither (same-size).
func TestVGPUMode(t *testing.T) {
	gc := &types.HostGraphicsConfig{DeviceType: []types.HostGraphicsConfigDeviceType{
		{DeviceId: "0000:3b:00.0", GraphicsType: "sharedDirect", VgpuMode: "mixedSize"},
		{DeviceId: "0000:af:00.0", GraphicsType: "sharedDirect"},
	}}
	for _, tc := range []struct {
		info types.HostGraphicsInfo
		gc   *types.HostGraphicsConfig
		want string
	}{
		{types.HostGraphicsInfo{PciId: "0000:3b:00.0", VgpuMode: "sameSize"}, gc, inventory.ModeSameSize},
		{types.HostGraphicsInfo{PciId: "0000:3b:00.0"}, gc, inventory.ModeMixedSize},
		{types.HostGraphicsInfo{PciId: "0000:af:00.0"}, gc, ""},
		{types.HostGraphicsInfo{PciId: "0000:3b:00.0"}, nil, ""},
		{types.HostGraphicsInfo{PciId: "0000:d8:00.0", VgpuMode: "multiInstanceGpu"}, gc, inventory.ModeMIG},
	} {
		if got := vgpuMode(tc.info, tc.gc); got != tc.want {
			t.Errorf("vgpuMode(%+v) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

// TestAvailability: connection state, maintenance mode and an EnterMaintenanceMode_Task
// that is queued or running (not one that finished) among the host's recent tasks.
func TestAvailability(t *testing.T) {
	task := func(id, desc string, state types.TaskInfoState) mo.Task {
		ref := types.ManagedObjectReference{Type: "Task", Value: id}
		return mo.Task{ExtensibleManagedObject: mo.ExtensibleManagedObject{Self: ref}, Info: types.TaskInfo{DescriptionId: desc, State: state}}
	}
	ref := func(id string) types.ManagedObjectReference {
		return types.ManagedObjectReference{Type: "Task", Value: id}
	}
	entering := enteringMaintenance([]mo.Task{
		task("task-1", "HostSystem.enterMaintenanceMode", types.TaskInfoStateRunning),
		task("task-2", "HostSystem.enterMaintenanceMode", types.TaskInfoStateSuccess),
		task("task-3", "VirtualMachine.powerOn", types.TaskInfoStateRunning),
		task("task-4", "HostSystem.enterMaintenanceMode", types.TaskInfoStateQueued),
	})
	parent := types.ManagedObjectReference{Type: "ClusterComputeResource", Value: "domain-c7"}
	for _, tc := range []struct {
		name    string
		runtime types.HostRuntimeInfo
		tasks   []types.ManagedObjectReference
		why     string
	}{
		{"connected", types.HostRuntimeInfo{ConnectionState: "connected"}, nil, ""},
		{"maintenance", types.HostRuntimeInfo{ConnectionState: "connected", InMaintenanceMode: true}, nil, "is in maintenance mode"},
		{"entering", types.HostRuntimeInfo{ConnectionState: "connected"}, []types.ManagedObjectReference{ref("task-3"), ref("task-1")}, "is entering maintenance mode"},
		{"entering, queued", types.HostRuntimeInfo{ConnectionState: "connected"}, []types.ManagedObjectReference{ref("task-4")}, "is entering maintenance mode"},
		{"entered: the task is done", types.HostRuntimeInfo{ConnectionState: "connected"}, []types.ManagedObjectReference{ref("task-2")}, ""},
		{"disconnected", types.HostRuntimeInfo{ConnectionState: "disconnected"}, nil, "is disconnected"},
		{"not responding", types.HostRuntimeInfo{ConnectionState: "notResponding"}, nil, "is not responding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mo.HostSystem{Runtime: tc.runtime}
			h.Parent = &parent
			h.RecentTask = tc.tasks
			var out inventory.Host
			availability(&out, h, entering)
			if got := out.Unavailable(); got != tc.why {
				t.Errorf("Unavailable() = %q, want %q (%+v)", got, tc.why, out)
			}
			if out.ComputeResource != "domain-c7" {
				t.Errorf("compute resource %q", out.ComputeResource)
			}
		})
	}
}

// TestVGPUChange: the device change gives the VM exactly count vGPUs of the profile,
// keeping devices of that profile and removing every other vGPU device.
func TestVGPUChange(t *testing.T) {
	dev := func(key int32, profile string) types.BaseVirtualDevice {
		return &types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{Key: key,
			Backing: &types.VirtualPCIPassthroughVmiopBackingInfo{Vgpu: profile}}}
	}
	for _, tc := range []struct {
		name    string
		current []types.BaseVirtualDevice
		count   int
		want    string // remove keys and add count, as "-key" and "+profile"
	}{
		{"none to one", nil, 1, "+16q"},
		{"none to two", nil, 2, "+16q +16q"},
		{"one of another profile to two", []types.BaseVirtualDevice{dev(100, "4q")}, 2, "-100 +16q +16q"},
		{"one to two", []types.BaseVirtualDevice{dev(100, "16q")}, 2, "+16q"},
		{"two to one", []types.BaseVirtualDevice{dev(100, "16q"), dev(101, "16q")}, 1, "-101"},
		{"already two", []types.BaseVirtualDevice{dev(100, "16q"), dev(101, "16q")}, 2, ""},
		{"one of each to two", []types.BaseVirtualDevice{dev(100, "4q"), dev(101, "16q")}, 2, "-100 +16q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			keys := map[int32]bool{}
			for _, c := range vgpuChange(tc.current, "16q", tc.count) {
				spec := c.GetVirtualDeviceConfigSpec()
				d := spec.Device.GetVirtualDevice()
				switch spec.Operation {
				case types.VirtualDeviceConfigSpecOperationRemove:
					got = append(got, fmt.Sprintf("-%d", d.Key))
				case types.VirtualDeviceConfigSpecOperationAdd:
					if d.Key >= 0 || keys[d.Key] {
						t.Errorf("added device key %d: want a distinct negative key", d.Key)
					}
					keys[d.Key] = true
					got = append(got, "+"+d.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo).Vgpu)
				}
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("change = %q, want %q", s, tc.want)
			}
		})
	}
}
