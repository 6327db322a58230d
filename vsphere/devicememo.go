package vsphere

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// A VM's device list is most of what an inventory read carries: about half the time of a
// scoped read of 64 hosts x 4 GPUs (BenchmarkScopedInventory), on both ends of the wire.
// vSphere gives every version of a VM's configuration its own config.changeVersion ("a
// unique identifier for a given version of the configuration; each change to the
// configuration updates this value"), so a scoped read asks for each VM's version and
// reads the devices only of the VMs whose version the session has not seen: one more
// RetrievePropertiesEx, for those VMs only, and none at all when no configuration changed.
// The session keeps, per scope, the vGPU devices of each VM (the only devices the
// inventory reads: vgpuDevices) under the version they were read at, for the VMs of the
// last read only, so the memo follows the pool's size.
//
// The devices and the rest of a read must describe one moment. The second call reads the
// version again; when a VM's version moved between the two calls, or the VM went, the
// read is torn and readScoped reads again. A VM without a version is read every time.

// detailVMProps are vmProps with the configuration's version instead of its devices.
var detailVMProps = append(vmPropsWithout("config.hardware.device"), "config.changeVersion")

// vmPropsWithout is vmProps without the property name.
func vmPropsWithout(name string) []string {
	var out []string
	for _, p := range vmProps {
		if p != name {
			out = append(out, p)
		}
	}
	return out
}

// vmDevices are a VM's vGPU devices as read at a version of its configuration.
type vmDevices struct {
	version string
	vgpus   []types.BaseVirtualDevice
}

// deviceMemo holds the vGPU devices of the VMs of a scope's last read.
type deviceMemo map[types.ManagedObjectReference]vmDevices

// devicesSpec reads the devices, and the version they belong to, of the VMs refs.
func devicesSpec(refs []types.ManagedObjectReference) types.PropertyFilterSpec {
	objs := make([]types.ObjectSpec, len(refs))
	for i, r := range refs {
		objs[i] = types.ObjectSpec{Obj: r}
	}
	return types.PropertyFilterSpec{
		ReportMissingObjectsInResults: types.NewBool(true),
		ObjectSet:                     objs,
		PropSet:                       []types.PropertySpec{{Type: "VirtualMachine", PathSet: []string{"config.changeVersion", "config.hardware.device"}}},
	}
}

// fromMemo puts in each VM read with a configuration (the scope's VMs) the vGPU devices
// the memo holds for its version. It returns the VMs whose devices are to be read, and
// the memo of this read so far (the VMs served from the memo).
func fromMemo(vms []mo.VirtualMachine, memo deviceMemo) ([]types.ManagedObjectReference, deviceMemo) {
	var ask []types.ManagedObjectReference
	next := deviceMemo{}
	for i := range vms {
		cfg := vms[i].Config
		if cfg == nil {
			continue
		}
		if d, ok := memo[vms[i].Self]; ok && cfg.ChangeVersion != "" && d.version == cfg.ChangeVersion {
			cfg.Hardware.Device = d.vgpus
			next[vms[i].Self] = d
			continue
		}
		ask = append(ask, vms[i].Self)
	}
	return ask, next
}

// withDevices puts the devices read (read, by VM) in the VMs asked for, and records them
// in next under their version. It returns false, changing no VM, when the read is torn:
// a VM asked for was not read (it went), or its version is not the one the first call
// read (its configuration changed in between).
func withDevices(vms []mo.VirtualMachine, ask []types.ManagedObjectReference, read map[types.ManagedObjectReference]mo.VirtualMachine, next deviceMemo) bool {
	asked := make(map[types.ManagedObjectReference]bool, len(ask))
	for _, r := range ask {
		asked[r] = true
	}
	for i := range vms {
		if !asked[vms[i].Self] {
			continue
		}
		got, ok := read[vms[i].Self]
		if !ok || got.Config == nil || got.Config.ChangeVersion != vms[i].Config.ChangeVersion {
			return false
		}
	}
	for i := range vms {
		if !asked[vms[i].Self] {
			continue
		}
		cfg := vms[i].Config
		cfg.Hardware.Device = vgpuDevices(read[vms[i].Self].Config.Hardware.Device)
		if cfg.ChangeVersion != "" {
			next[vms[i].Self] = vmDevices{version: cfg.ChangeVersion, vgpus: cfg.Hardware.Device}
		}
	}
	return true
}

// fillDevices gives the scope's VMs (those read with a configuration) their vGPU
// devices, from the session's memo of the scope (key) or read in one call for the VMs
// whose version the memo does not hold, and keeps the memo of this read. It returns
// false when the read is torn (withDevices); the memo is then left as it was.
func (c *client) fillDevices(ctx context.Context, key string, vms []mo.VirtualMachine) (bool, error) {
	ask, next := fromMemo(vms, c.s.deviceMemo(key))
	if len(ask) > 0 {
		content, err := c.retrieve(ctx, devicesSpec(ask))
		if err != nil {
			return false, err
		}
		var got []types.ObjectContent
		for _, oc := range content {
			got = append(got, *oc)
		}
		var list []mo.VirtualMachine
		if len(got) > 0 {
			if err := mo.LoadObjectContent(got, &list); err != nil {
				return false, fmt.Errorf("vsphere: decode devices: %w", err)
			}
		}
		read := make(map[types.ManagedObjectReference]mo.VirtualMachine, len(list))
		for _, vm := range list {
			read[vm.Self] = vm
		}
		if !withDevices(vms, ask, read, next) {
			return false, nil
		}
	}
	c.s.keepDeviceMemo(key, next)
	return true, nil
}

func (s *vcSession) deviceMemo(key string) deviceMemo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devices[key]
}

// keepDeviceMemo replaces the scope's memo; like the scopes, at most maxScopes are kept.
func (s *vcSession) keepDeviceMemo(key string, m deviceMemo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices = keepBounded(s.devices, key, m)
}
