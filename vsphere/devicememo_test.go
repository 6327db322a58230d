package vsphere

import (
	"testing"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

func memoVM(id, version string, profiles ...string) mo.VirtualMachine {
	vm := mo.VirtualMachine{}
	vm.Self = types.ManagedObjectReference{Type: "VirtualMachine", Value: id}
	vm.Config = &types.VirtualMachineConfigInfo{ChangeVersion: version}
	// A disk beside the vGPUs: only the vGPU devices are kept.
	vm.Config.Hardware.Device = []types.BaseVirtualDevice{&types.VirtualDisk{}}
	for _, p := range profiles {
		vm.Config.Hardware.Device = append(vm.Config.Hardware.Device, &types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{
			Backing: &types.VirtualPCIPassthroughVmiopBackingInfo{Vgpu: p}}})
	}
	return vm
}

// firstCall is a VM as the scoped read's first call has it: its version, no devices.
func firstCall(id, version string) mo.VirtualMachine {
	vm := memoVM(id, version)
	vm.Config.Hardware.Device = nil
	return vm
}

func profilesOf(vm mo.VirtualMachine) string {
	p, n, each := vgpuProfiles(vm.Config.Hardware.Device)
	if each != nil {
		return "mixed"
	}
	if n == 0 {
		return ""
	}
	return p
}

// TestDeviceMemo: for every combination of what the memo holds of a VM (nothing, its
// version, another version; a VM without a version) and what the second call finds (the
// same version, another one, the VM gone), a VM is served from the memo exactly when the
// memo holds its non-empty version; the read is whole exactly when every VM asked for
// was read at the first call's version, and then every VM has the devices of that
// version and the new memo holds exactly the VMs with a version; a torn read changes no
// VM.
func TestDeviceMemo(t *testing.T) {
	type memoHas int
	const (
		nothing memoHas = iota
		same
		other
	)
	type second int
	const (
		asRead second = iota
		moved
		gone
	)
	for _, version := range []string{"", "v1"} {
		for _, has := range []memoHas{nothing, same, other} {
			for _, then := range []second{asRead, moved, gone} {
				vms := []mo.VirtualMachine{firstCall("vm-1", version), firstCall("vm-2", "w1"), {}}
				vms[2].Self = types.ManagedObjectReference{Type: "VirtualMachine", Value: "listed-only"}
				memo := deviceMemo{
					vms[1].Self: {version: "w1", vgpus: vgpuDevices(memoVM("vm-2", "w1", "grid_p100-8q").Config.Hardware.Device)},
					{Type: "VirtualMachine", Value: "gone-from-scope"}: {version: "x"},
				}
				switch has {
				case same:
					memo[vms[0].Self] = vmDevices{version: version, vgpus: vgpuDevices(memoVM("vm-1", version, "grid_p100-4q").Config.Hardware.Device)}
				case other:
					memo[vms[0].Self] = vmDevices{version: "v0", vgpus: vgpuDevices(memoVM("vm-1", "v0", "grid_p100-16q").Config.Hardware.Device)}
				}
				ask, next := fromMemo(vms, memo)
				served := has == same && version != ""
				if got := len(ask) == 0; got != served {
					t.Fatalf("version %q, memo %d: asked %v, want served from the memo: %t", version, has, ask, served)
				}
				if served {
					if profilesOf(vms[0]) != "grid_p100-4q" || len(next) != 2 {
						t.Fatalf("version %q, memo %d: served %q, memo %v", version, has, profilesOf(vms[0]), next)
					}
					continue
				}
				read := map[types.ManagedObjectReference]mo.VirtualMachine{}
				switch then {
				case asRead:
					read[vms[0].Self] = memoVM("vm-1", version, "grid_p100-4q", "grid_p100-4q")
				case moved:
					read[vms[0].Self] = memoVM("vm-1", version+"+", "grid_p100-2q")
				}
				before := vms[0].Config.Hardware.Device
				whole := withDevices(vms, ask, read, next)
				if whole != (then == asRead) {
					t.Fatalf("version %q, memo %d, second call %d: whole %t", version, has, then, whole)
				}
				if !whole {
					if len(vms[0].Config.Hardware.Device) != len(before) {
						t.Fatalf("version %q, memo %d, second call %d: a torn read changed the VM", version, has, then)
					}
					continue
				}
				if n := len(vms[0].Config.Hardware.Device); n != 2 || profilesOf(vms[0]) != "grid_p100-4q" {
					t.Fatalf("version %q: VM has %d devices (%q), want its two vGPUs only", version, n, profilesOf(vms[0]))
				}
				_, kept := next[vms[0].Self]
				if kept != (version != "") {
					t.Fatalf("version %q: memoised %t", version, kept)
				}
				if _, ok := next[types.ManagedObjectReference{Type: "VirtualMachine", Value: "gone-from-scope"}]; ok {
					t.Fatal("the memo kept a VM the read did not have")
				}
				if profilesOf(vms[1]) != "grid_p100-8q" {
					t.Fatalf("vm-2 served %q from the memo", profilesOf(vms[1]))
				}
			}
		}
	}
}
