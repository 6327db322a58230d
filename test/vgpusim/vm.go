package vgpusim

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// vgpuVM replaces vcsim's VirtualMachine in the object registry. vcsim dispatches SOAP
// methods by name through reflection, so the methods below override vcsim's and every
// other method falls through to the embedded VM.
//
// Note: the embedded VM must stay the first field: vcsim's property collector digs the
// managed object out of wrapper types through their first field.
type vgpuVM struct {
	*simulator.VirtualMachine
	sim *Sim
}

// PowerOnVMTask powers a VM on or resumes it, placing its vGPU first.
func (vm *vgpuVM) PowerOnVMTask(ctx *simulator.Context, req *types.PowerOnVM_Task) soap.HasFault {
	if vm.Config.Template {
		return &methods.PowerOnVM_TaskBody{Fault_: simulator.Fault("cannot powerOn a template", &types.InvalidState{})}
	}
	ref := vm.sim.startTask(ctx, vm.Self, "PowerOnVM_Task", "powerOn", func(ctx *simulator.Context) types.BaseMethodFault {
		return vm.sim.powerOn(ctx, vm.VirtualMachine, req.Host)
	})
	return &methods.PowerOnVM_TaskBody{Res: &types.PowerOnVM_TaskResponse{Returnval: ref}}
}

// PowerOffVMTask powers a VM off, or discards its suspended state, releasing its vGPU.
func (vm *vgpuVM) PowerOffVMTask(ctx *simulator.Context, _ *types.PowerOffVM_Task) soap.HasFault {
	ref := vm.sim.startTask(ctx, vm.Self, "PowerOffVM_Task", "powerOff", func(ctx *simulator.Context) types.BaseMethodFault {
		return vm.sim.powerOff(ctx, vm.VirtualMachine)
	})
	return &methods.PowerOffVM_TaskBody{Res: &types.PowerOffVM_TaskResponse{Returnval: ref}}
}

// SuspendVMTask suspends a VM, releasing its vGPU.
func (vm *vgpuVM) SuspendVMTask(ctx *simulator.Context, _ *types.SuspendVM_Task) soap.HasFault {
	ref := vm.sim.startTask(ctx, vm.Self, "SuspendVM_Task", "suspend", func(ctx *simulator.Context) types.BaseMethodFault {
		return vm.sim.suspend(ctx, vm.VirtualMachine)
	})
	return &methods.SuspendVM_TaskBody{Res: &types.SuspendVM_TaskResponse{Returnval: ref}}
}

// ShutdownGuest asks the guest to shut down: the call returns at once and the VM powers
// off (immediately, or after the "ShutdownGuest" task delay), releasing its vGPU.
func (vm *vgpuVM) ShutdownGuest(ctx *simulator.Context, _ *types.ShutdownGuest) soap.HasFault {
	body := &methods.ShutdownGuestBody{}
	if st := vm.Runtime.PowerState; st != types.VirtualMachinePowerStatePoweredOn {
		body.Fault_ = simulator.Fault("", invalidPowerState(types.VirtualMachinePowerStatePoweredOn, st))
		return body
	}
	if f := vm.sim.guestFailure(vm.Name); f != nil {
		body.Fault_ = simulator.Fault("", f)
		return body
	}
	vm.sim.runGuestOp(ctx, vm.Self, "ShutdownGuest", func(ctx *simulator.Context) types.BaseMethodFault {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			return nil
		}
		return vm.sim.powerOff(ctx, vm.VirtualMachine)
	})
	body.Res = new(types.ShutdownGuestResponse)
	return body
}

// StandbyGuest asks the guest to suspend; like ShutdownGuest, but ends suspended.
func (vm *vgpuVM) StandbyGuest(ctx *simulator.Context, _ *types.StandbyGuest) soap.HasFault {
	body := &methods.StandbyGuestBody{}
	if st := vm.Runtime.PowerState; st != types.VirtualMachinePowerStatePoweredOn {
		body.Fault_ = simulator.Fault("", invalidPowerState(types.VirtualMachinePowerStatePoweredOn, st))
		return body
	}
	if f := vm.sim.guestFailure(vm.Name); f != nil {
		body.Fault_ = simulator.Fault("", f)
		return body
	}
	vm.sim.runGuestOp(ctx, vm.Self, "StandbyGuest", func(ctx *simulator.Context) types.BaseMethodFault {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			return nil
		}
		return vm.sim.suspend(ctx, vm.VirtualMachine)
	})
	body.Res = new(types.StandbyGuestResponse)
	return body
}

// ReconfigVMTask refuses vGPU device changes unless the VM is powered off, then lets
// vcsim apply the spec. The returned task is complete when the call returns.
func (vm *vgpuVM) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	const method = "ReconfigVM_Task"
	s := vm.sim
	reconfigure := func(ctx *simulator.Context) types.BaseMethodFault {
		if fault := s.checkReconfig(vm.VirtualMachine, &req.Spec); fault != nil {
			return fault
		}
		labelVGPUs(vm.Config.Hardware.Device, &req.Spec)
		res := vm.VirtualMachine.ReconfigVMTask(ctx, req).(*methods.ReconfigVM_TaskBody)
		if res.Fault_ != nil {
			return res.Fault_.Detail.Fault.(types.BaseMethodFault)
		}
		// vcsim runs the reconfiguration in a goroutine sharing this call's locks;
		// wait for it so the task we report is final.
		inner := ctx.Map.Get(res.Res.Returnval).(*simulator.Task)
		inner.Wait()
		var fault types.BaseMethodFault
		ctx.WithLock(inner, func() {
			if inner.Info.Error != nil {
				fault = inner.Info.Error.Fault
			}
		})
		return fault
	}
	ref := s.startTask(ctx, vm.Self, method, "reconfigVm", reconfigure)
	return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: ref}}
}

// checkReconfig enforces vSphere's vGPU rules on a reconfiguration: PCI passthrough
// devices (vGPUs among them) are added or removed only while the VM is powered off, and a
// vGPU's profile must be one its host offers.
func (s *Sim) checkReconfig(vm *simulator.VirtualMachine, spec *types.VirtualMachineConfigSpec) types.BaseMethodFault {
	devices := object.VirtualDeviceList(vm.Config.Hardware.Device)
	for i, change := range spec.DeviceChange {
		c := change.GetVirtualDeviceConfigSpec()
		if c.Device == nil {
			continue
		}
		dev := c.Device
		if c.Operation != types.VirtualDeviceConfigSpecOperationAdd {
			if existing := devices.FindByKey(dev.GetVirtualDevice().Key); existing != nil {
				dev = existing
			}
		}
		if _, ok := dev.(*types.VirtualPCIPassthrough); !ok {
			continue
		}
		if st := vm.Runtime.PowerState; st != types.VirtualMachinePowerStatePoweredOff {
			return withMessage(invalidPowerState(types.VirtualMachinePowerStatePoweredOff, st),
				fmt.Sprintf("The attempted operation cannot be performed in the current state (%s): "+
					"PCI passthrough and vGPU devices can only be added or removed while %s is powered off",
					powerStateLabel(st), vm.Name))
		}
		profile := vgpuProfile([]types.BaseVirtualDevice{dev})
		if c.Operation == types.VirtualDeviceConfigSpecOperationAdd && profile != "" {
			h := s.hosts[*vm.Runtime.Host]
			if _, offered := h.cfg.profile(profile); !offered {
				return withMessage(&types.InvalidDeviceSpec{DeviceIndex: int32(i)},
					fmt.Sprintf("vGPU profile %s is not supported by host %s", profile, h.cfg.Name))
			}
			// NVIDIA: several vGPUs in one VM must share board and series.
			for _, d := range vgpuDevices(vm.Config.Hardware.Device) {
				if !removed(spec, d.key) && !sameSeries(d.profile, profile) {
					return withMessage(&types.InvalidDeviceSpec{DeviceIndex: int32(i)},
						fmt.Sprintf("vGPU profile %s cannot join %s in one VM: all vGPUs of a VM must be of the same board and series", profile, d.profile))
				}
			}
		}
	}
	return nil
}

// removed tells whether the spec removes the device with that key.
func removed(spec *types.VirtualMachineConfigSpec, key int32) bool {
	for _, change := range spec.DeviceChange {
		c := change.GetVirtualDeviceConfigSpec()
		if c.Operation == types.VirtualDeviceConfigSpecOperationRemove && c.Device != nil && c.Device.GetVirtualDevice().Key == key {
			return true
		}
	}
	return false
}

// labelVGPUs gives added vGPU devices the label and summary vCenter shows for them.
func labelVGPUs(existing []types.BaseVirtualDevice, spec *types.VirtualMachineConfigSpec) {
	n := 0
	for _, d := range existing {
		if _, ok := d.(*types.VirtualPCIPassthrough); ok {
			n++
		}
	}
	for _, change := range spec.DeviceChange {
		c := change.GetVirtualDeviceConfigSpec()
		if c.Device == nil {
			continue
		}
		if _, ok := c.Device.(*types.VirtualPCIPassthrough); !ok {
			continue
		}
		switch c.Operation {
		case types.VirtualDeviceConfigSpecOperationRemove:
			n--
		case types.VirtualDeviceConfigSpecOperationAdd:
			d := c.Device.GetVirtualDevice()
			if d.DeviceInfo == nil {
				if b, ok := d.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok {
					d.DeviceInfo = vgpuDescription(b.Vgpu, max(n, 0))
				}
			}
			n++
		}
	}
}

func vgpuDescription(profile string, index int) *types.Description {
	return &types.Description{
		Label:   fmt.Sprintf("PCI device %d", index),
		Summary: "NVIDIA GRID vGPU " + profile,
	}
}

// NewVGPUDevice is a vGPU device of the given profile, as gpupool and govc gpu.vm.add
// add it; index numbers its label ("PCI device 0").
func NewVGPUDevice(profile string, index int) *types.VirtualPCIPassthrough {
	return &types.VirtualPCIPassthrough{
		VirtualDevice: types.VirtualDevice{
			Key:        -200 - int32(index),
			DeviceInfo: vgpuDescription(profile, index),
			Backing:    &types.VirtualPCIPassthroughVmiopBackingInfo{Vgpu: profile},
		},
	}
}

// vgpuProfile is the profile of the first vGPU device; empty when there is none.
func vgpuProfile(devices []types.BaseVirtualDevice) string {
	if ds := vgpuDevices(devices); len(ds) > 0 {
		return ds[0].profile
	}
	return ""
}

// vgpuDevice is one vGPU device of a VM: its device key and profile.
type vgpuDevice struct {
	key     int32
	profile string
}

// vgpuDevices lists the VM's vGPU devices (VirtualPCIPassthrough with a vmiop backing),
// in device order.
func vgpuDevices(devices []types.BaseVirtualDevice) []vgpuDevice {
	var out []vgpuDevice
	for _, d := range devices {
		if p, ok := d.(*types.VirtualPCIPassthrough); ok {
			if b, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok && b.Vgpu != "" {
				out = append(out, vgpuDevice{key: p.Key, profile: b.Vgpu})
			}
		}
	}
	return out
}

// powerOn powers a VM on or resumes it. The host must be available, and each of the
// VM's vGPUs gets a place on one of the host's GPUs (placement.go), all or none; else the
// power-on fails with the fault vCenter reports. host is PowerOnVM_Task's host argument,
// honoured for a powered-off VM. The caller holds the VM's lock.
func (s *Sim) powerOn(ctx *simulator.Context, vm *simulator.VirtualMachine, host *types.ManagedObjectReference) types.BaseMethodFault {
	from := vm.Runtime.PowerState
	if from == types.VirtualMachinePowerStatePoweredOn {
		return invalidPowerState(types.VirtualMachinePowerStatePoweredOn, from)
	}
	devices := vgpuDevices(vm.Config.Hardware.Device)
	s.mu.Lock()
	target, fault := s.targetHost(vm, host)
	h := s.hosts[target]
	if fault == nil {
		fault = h.hostFault()
	}
	var gpus []string
	if fault == nil {
		gpus, fault = s.attach(h, vm.Self, devices)
	}
	if fault == nil {
		s.poweredOn[vm.Self] = target
	}
	s.mu.Unlock()
	if fault != nil {
		s.log.Info("Refused power-on", "vm", vm.Name, "host", h.cfg.Name, "reason", faultMessage(fault))
		return fault
	}
	if target != *vm.Runtime.Host {
		s.moveVM(ctx, vm, target)
	}
	if len(devices) > 0 {
		s.publish(ctx, h)
		s.log.Info("Placed vGPUs", "vm", vm.Name, "host", h.cfg.Name, "gpus", gpus)
	}
	setPowerState(ctx, vm, types.VirtualMachinePowerStatePoweredOn)
	s.log.Info("Powered on VM", "vm", vm.Name, "from", from)
	return nil
}

// suspend suspends a powered-on VM, releasing its vGPUs. Profiles whose vGPU plugin
// cannot suspend refuse, as vCenter does for such vGPUs.
func (s *Sim) suspend(ctx *simulator.Context, vm *simulator.VirtualMachine) types.BaseMethodFault {
	from := vm.Runtime.PowerState
	if from != types.VirtualMachinePowerStatePoweredOn {
		return invalidPowerState(types.VirtualMachinePowerStatePoweredOn, from)
	}
	h := s.hosts[*vm.Runtime.Host]
	for _, d := range vgpuDevices(vm.Config.Hardware.Device) {
		if p, _ := h.cfg.profile(d.profile); !p.SuspendSupported {
			return withMessage(&types.NotSupported{},
				fmt.Sprintf("Suspend is not supported for %s: its vGPU profile %s does not support suspend", vm.Name, d.profile))
		}
	}
	s.stopped(ctx, vm)
	setPowerState(ctx, vm, types.VirtualMachinePowerStateSuspended)
	s.log.Info("Suspended VM", "vm", vm.Name)
	s.settleMaintenance(ctx, *vm.Runtime.Host)
	return nil
}

// powerOff powers a VM off or discards its suspended state, releasing its vGPUs.
func (s *Sim) powerOff(ctx *simulator.Context, vm *simulator.VirtualMachine) types.BaseMethodFault {
	from := vm.Runtime.PowerState
	if from == types.VirtualMachinePowerStatePoweredOff {
		return invalidPowerState(types.VirtualMachinePowerStatePoweredOff, from)
	}
	s.stopped(ctx, vm)
	setPowerState(ctx, vm, types.VirtualMachinePowerStatePoweredOff)
	s.log.Info("Powered off VM", "vm", vm.Name, "from", from)
	s.settleMaintenance(ctx, *vm.Runtime.Host)
	return nil
}

// stopped releases a VM's vGPUs and forgets that it runs.
func (s *Sim) stopped(ctx *simulator.Context, vm *simulator.VirtualMachine) {
	h := s.hosts[*vm.Runtime.Host]
	s.mu.Lock()
	delete(s.poweredOn, vm.Self)
	held := h != nil && release(h.gpus, vm.Self)
	s.mu.Unlock()
	if held {
		s.publish(ctx, h)
	}
}

func setPowerState(ctx *simulator.Context, vm *simulator.VirtualMachine, st types.VirtualMachinePowerState) {
	changes := []types.PropertyChange{
		{Name: "runtime.powerState", Val: st},
		{Name: "summary.runtime.powerState", Val: st},
	}
	switch {
	case st == types.VirtualMachinePowerStatePoweredOff:
		changes = append(changes, types.PropertyChange{Name: "summary.runtime.bootTime", Val: nil})
	case st == types.VirtualMachinePowerStatePoweredOn && vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOff:
		changes = append(changes, types.PropertyChange{Name: "summary.runtime.bootTime", Val: time.Now()})
	}
	ctx.Update(vm, changes)
}

// attach places all the VM's vGPUs on the host's GPUs, or none. It returns the PCI id of
// each vGPU's GPU, or the fault vCenter would report. Callers hold s.mu.
func (s *Sim) attach(h *hostState, vm types.ManagedObjectReference, devices []vgpuDevice) ([]string, types.BaseMethodFault) {
	if len(devices) == 0 {
		return nil, nil
	}
	reqs := make([]request, 0, len(devices))
	for _, d := range devices {
		p, ok := h.cfg.profile(d.profile)
		if !ok {
			return nil, withMessage(&types.GenericVmConfigFault{Reason: "vGPU profile not supported"},
				fmt.Sprintf("Could not initialize plugin for vGPU %q: host %s does not offer this profile", d.profile, h.cfg.Name))
		}
		r := request{key: d.key, profile: p, at: -1}
		if ids := s.placements[vm]; len(reqs) < len(ids) {
			r.at = ids[len(reqs)]
		}
		reqs = append(reqs, r)
	}
	release(h.gpus, vm) // a VM resuming holds nothing; never count a vGPU twice
	got, reasons := placeAll(h.cfg.Policy, h.gpus, vm, reqs)
	if got == nil {
		return nil, insufficientGraphics(h, reqs, reasons)
	}
	out := make([]string, len(got))
	for i, a := range got {
		out[i] = h.gpus[a.gpu].pciID
	}
	return out, nil
}

// publish mirrors the host's GPU occupancy into config.graphicsInfo, under the host's
// lock so property collectors see a consistent value. Callers do not hold s.mu.
func (s *Sim) publish(ctx *simulator.Context, h *hostState) {
	ctx.WithLock(h.obj, func() {
		s.mu.Lock()
		info := h.graphicsInfo()
		s.mu.Unlock()
		ctx.Update(h.obj, []types.PropertyChange{{Name: "config.graphicsInfo", Val: info}})
	})
}

// insufficientGraphics is the fault of a power-on whose vGPUs no GPU can take, with a
// message naming, for each GPU, the rule that refuses it. Callers hold s.mu.
func insufficientGraphics(h *hostState, reqs []request, reasons []string) types.BaseMethodFault {
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.profile.Name
	}
	what := "a " + names[0] + " vGPU"
	if len(reqs) > 1 {
		what = fmt.Sprintf("%d vGPUs (%s)", len(reqs), strings.Join(names, ", "))
	}
	msg := fmt.Sprintf("The amount of graphics resource available on host %s is insufficient for %s: %s",
		h.cfg.Name, what, strings.Join(reasons, "; "))
	return withMessage(&types.InsufficientResourcesFault{}, msg)
}

func invalidPowerState(requested, existing types.VirtualMachinePowerState) *types.InvalidPowerState {
	f := &types.InvalidPowerState{RequestedState: requested, ExistingState: existing}
	withMessage(f, fmt.Sprintf("The attempted operation cannot be performed in the current state (%s).", powerStateLabel(existing)))
	return f
}

func powerStateLabel(st types.VirtualMachinePowerState) string {
	switch st {
	case types.VirtualMachinePowerStatePoweredOn:
		return "Powered on"
	case types.VirtualMachinePowerStatePoweredOff:
		return "Powered off"
	case types.VirtualMachinePowerStateSuspended:
		return "Suspended"
	}
	return string(st)
}

// withMessage sets a fault's message, which becomes the task error's localized message.
func withMessage(f types.BaseMethodFault, msg string) types.BaseMethodFault {
	f.GetMethodFault().FaultMessage = []types.LocalizableMessage{{Key: "com.vmware.vgpusim", Message: msg}}
	return f
}

// faultMessage is a fault's message, or its type name when it has none.
func faultMessage(f types.BaseMethodFault) string {
	if m := f.GetMethodFault().FaultMessage; len(m) > 0 && m[0].Message != "" {
		return m[0].Message
	}
	return reflect.TypeOf(f).Elem().Name()
}
