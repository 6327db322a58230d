package vsphere

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/utils/clock"
)

// Errors the controller can act on with errors.Is.
var (
	// ErrNotPoweredOff: vSphere adds and removes vGPU devices only on powered-off VMs.
	ErrNotPoweredOff = errors.New("VM is not powered off")
	// ErrInvalidPowerState: the VM's power state does not allow the operation, such as
	// suspending a powered-off VM.
	ErrInvalidPowerState = errors.New("VM power state does not allow the operation")
	// ErrTaskNotFound: vCenter no longer knows the task (it forgets finished tasks after
	// a while, and all of them on restart). Re-observe the VM instead.
	ErrTaskNotFound = errors.New("task not found")
	// ErrVMNotFound: no VM has that managed object id.
	ErrVMNotFound = errors.New("VM not found")
	// ErrToolsUnavailable: the guest cannot be asked to shut down because VMware Tools
	// is not running in it. Only a hard power-off stops such a VM.
	ErrToolsUnavailable = errors.New("VMware Tools is not running in the guest")
)

// client is a Client over a cached session, bound to one datacenter.
type client struct {
	s   *vcSession
	dc  datacenter
	log logr.Logger
	// clock is the connector's (WithClock): capacity answers' age and back-off.
	clock clock.PassiveClock
	// capacityTimeout is each capacity query's deadline.
	capacityTimeout time.Duration
	// watchMinVMs is how many VMs a pool names at least for a view to keep its reads.
	watchMinVMs int
}

var _ Client = (*client)(nil)

func vmRef(id string) types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "VirtualMachine", Value: id}
}

// errorf wraps a vSphere error with what was being done and where; it never includes
// credentials, which no request or URL here carries.
func (c *client) errorf(err error, format string, args ...any) error {
	switch {
	case fault.Is(err, &types.ManagedObjectNotFound{}):
		err = fmt.Errorf("%w: %w", ErrVMNotFound, err)
	case fault.Is(err, &types.ToolsUnavailable{}):
		err = fmt.Errorf("%w: %w", ErrToolsUnavailable, err)
	}
	return fmt.Errorf("vsphere: vCenter %s: %s: %w", c.s.server, fmt.Sprintf(format, args...), err)
}

// vm reads a few properties of a VM in one call.
func (c *client) vm(ctx context.Context, id string, props ...string) (mo.VirtualMachine, error) {
	var vm mo.VirtualMachine
	err := property.DefaultCollector(c.s.vc).RetrieveOne(ctx, vmRef(id), props, &vm)
	return vm, err
}

// PowerOn powers a VM on, or resumes it when suspended. A host ref other than "" powers
// it on on that host (PowerOnVM_Task's host argument), which must be in the VM's compute
// resource: gpupool passes one when the VM's own host is unavailable.
func (c *client) PowerOn(ctx context.Context, id, host string) (string, error) {
	vm, err := c.vm(ctx, id, "runtime.powerState")
	if err != nil {
		return "", c.errorf(err, "power on VM %s", id)
	}
	if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
		return "", nil
	}
	var on *object.HostSystem
	if host != "" {
		on = object.NewHostSystem(c.s.vc, types.ManagedObjectReference{Type: "HostSystem", Value: host})
	}
	task, err := powerOnTask(ctx, object.NewVirtualMachine(c.s.vc, vmRef(id)), on)
	if err != nil {
		return "", c.errorf(err, "power on VM %s", id)
	}
	if host != "" {
		return c.started(task, OpPowerOn, id, "host", host), nil
	}
	return c.started(task, OpPowerOn, id), nil
}

// Suspend suspends a powered-on VM.
func (c *client) Suspend(ctx context.Context, id string) (string, error) {
	vm, err := c.vm(ctx, id, "runtime.powerState")
	if err != nil {
		return "", c.errorf(err, "suspend VM %s", id)
	}
	switch vm.Runtime.PowerState {
	case types.VirtualMachinePowerStateSuspended:
		return "", nil
	case types.VirtualMachinePowerStatePoweredOff:
		return "", c.errorf(ErrInvalidPowerState, "suspend VM %s: it is poweredOff", id)
	}
	task, err := object.NewVirtualMachine(c.s.vc, vmRef(id)).Suspend(ctx)
	if err != nil {
		return "", c.errorf(err, "suspend VM %s", id)
	}
	return c.started(task, OpSuspend, id), nil
}

// PowerOff powers a VM off; on a suspended VM it discards the suspended state.
func (c *client) PowerOff(ctx context.Context, id string) (string, error) {
	vm, err := c.vm(ctx, id, "runtime.powerState")
	if err != nil {
		return "", c.errorf(err, "power off VM %s", id)
	}
	if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOff {
		return "", nil
	}
	task, err := object.NewVirtualMachine(c.s.vc, vmRef(id)).PowerOff(ctx)
	if err != nil {
		return "", c.errorf(err, "power off VM %s", id)
	}
	return c.started(task, OpPowerOff, id), nil
}

// ShutdownGuest asks the guest OS to shut down. A powered-off VM needs nothing; a
// suspended one cannot run its guest, so that is an ErrInvalidPowerState.
func (c *client) ShutdownGuest(ctx context.Context, id string) error {
	vm, err := c.vm(ctx, id, "runtime.powerState")
	if err != nil {
		return c.errorf(err, "shut down guest of VM %s", id)
	}
	switch vm.Runtime.PowerState {
	case types.VirtualMachinePowerStatePoweredOff:
		return nil
	case types.VirtualMachinePowerStateSuspended:
		return c.errorf(ErrInvalidPowerState, "shut down guest of VM %s: it is suspended", id)
	}
	if err := object.NewVirtualMachine(c.s.vc, vmRef(id)).ShutdownGuest(ctx); err != nil {
		return c.errorf(err, "shut down guest of VM %s", id)
	}
	c.log.Info("Asked guest to shut down", "vm", id)
	return nil
}

// SetProfile gives the VM count vGPU devices of the profile (at least one), in one
// ReconfigVM_Task, and locks the memory reservation to the VM's memory as vGPU VMs need.
// It refuses (ErrNotPoweredOff) unless the VM is powered off; a VM that already has
// exactly these vGPUs needs nothing.
func (c *client) SetProfile(ctx context.Context, id, profile string, count int) (string, error) {
	if profile == "" {
		return "", fmt.Errorf("vsphere: set vGPU profile of VM %s: no profile given", id)
	}
	count = max(count, 1)
	vm, err := c.vm(ctx, id, "runtime.powerState", "config.hardware.device")
	if err != nil {
		return "", c.errorf(err, "set vGPU profile of VM %s", id)
	}
	var devices []types.BaseVirtualDevice
	if vm.Config != nil {
		devices = vm.Config.Hardware.Device
	}
	current := vgpuDevices(devices)
	change := vgpuChange(current, profile, count)
	if len(change) == 0 {
		return "", nil
	}
	if st := vm.Runtime.PowerState; st != types.VirtualMachinePowerStatePoweredOff {
		return "", c.errorf(ErrNotPoweredOff, "set vGPU profile of VM %s to %s (it is %s; vSphere changes vGPU devices only on powered-off VMs)",
			id, profile, st)
	}
	spec := types.VirtualMachineConfigSpec{MemoryReservationLockedToMax: types.NewBool(true), DeviceChange: change}
	task, err := object.NewVirtualMachine(c.s.vc, vmRef(id)).Reconfigure(ctx, spec)
	if err != nil {
		return "", c.errorf(err, "set vGPU profile of VM %s to %s", id, profile)
	}
	return c.started(task, OpReconfigure, id, "profile", profile, "vgpus", count), nil
}

// vgpuChange is the device change that leaves the VM with count vGPUs of profile: the
// vGPU devices of that profile are kept up to count, the others removed, and the ones
// missing added (negative keys: vCenter assigns the real ones). None when the VM has
// exactly these vGPUs.
func vgpuChange(current []types.BaseVirtualDevice, profile string, count int) []types.BaseVirtualDeviceConfigSpec {
	var change []types.BaseVirtualDeviceConfigSpec
	kept := 0
	for _, d := range current {
		b, _ := d.GetVirtualDevice().Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo)
		if b != nil && b.Vgpu == profile && kept < count {
			kept++
			continue
		}
		change = append(change, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d})
	}
	for i := kept; i < count; i++ {
		change = append(change, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd,
			Device: &types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{
				Key:     int32(-100 - i),
				Backing: &types.VirtualPCIPassthroughVmiopBackingInfo{Vgpu: profile},
			}},
		})
	}
	return change
}

// powerOnTask starts PowerOnVM_Task, on host when it is not nil.
func powerOnTask(ctx context.Context, vm *object.VirtualMachine, host *object.HostSystem) (*object.Task, error) {
	if host == nil {
		return vm.PowerOn(ctx)
	}
	ref := host.Reference()
	res, err := methods.PowerOnVM_Task(ctx, vm.Client(), &types.PowerOnVM_Task{This: vm.Reference(), Host: &ref})
	if err != nil {
		return nil, err
	}
	return object.NewTask(vm.Client(), res.Returnval), nil
}

func (c *client) started(task *object.Task, op Op, vm string, kv ...any) string {
	id := task.Reference().Value
	c.log.Info("Started task", append([]any{"op", op, "vm", vm, "task", id}, kv...)...)
	return id
}

// targetStates are the power states that the power tasks bring a VM to, by the task's
// descriptionId.
var targetStates = map[string]types.VirtualMachinePowerState{
	"VirtualMachine.powerOn":  types.VirtualMachinePowerStatePoweredOn,
	"VirtualMachine.powerOff": types.VirtualMachinePowerStatePoweredOff,
	"VirtualMachine.suspend":  types.VirtualMachinePowerStateSuspended,
}

// Task reads a task's state in one property read. A power task that failed with
// InvalidPowerState while its VM is already in the task's target state counts as a
// success: another actor (an admin, HA, a retried call) got there first, which is what
// was wanted. That check costs one more read, only in that case.
func (c *client) Task(ctx context.Context, id string) (TaskInfo, error) {
	var t mo.Task
	ref := types.ManagedObjectReference{Type: "Task", Value: id}
	err := property.DefaultCollector(c.s.vc).RetrieveOne(ctx, ref, taskProps, &t)
	if err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return TaskInfo{}, fmt.Errorf("vsphere: vCenter %s: task %s: %w", c.s.server, id, ErrTaskNotFound)
		}
		return TaskInfo{}, fmt.Errorf("vsphere: vCenter %s: read task %s: %w", c.s.server, id, err)
	}
	return c.taskInfo(ctx, id, t.Info), nil
}

var taskProps = []string{"info.state", "info.error", "info.descriptionId", "info.entity"}

// Tasks reads several tasks in one property read, so that a pass with many tasks in
// flight costs one call. A task vCenter no longer knows is left out of the answer (the
// caller treats it as ErrTaskNotFound). When vCenter refuses the batch because one of
// the tasks is gone, the tasks are read one by one.
func (c *client) Tasks(ctx context.Context, ids []string) (map[string]TaskInfo, error) {
	out := make(map[string]TaskInfo, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	refs := make([]types.ManagedObjectReference, len(ids))
	for i, id := range ids {
		refs[i] = types.ManagedObjectReference{Type: "Task", Value: id}
	}
	var tasks []mo.Task
	err := property.DefaultCollector(c.s.vc).Retrieve(ctx, refs, taskProps, &tasks)
	if fault.Is(err, &types.ManagedObjectNotFound{}) {
		for _, id := range ids {
			info, err := c.Task(ctx, id)
			if errors.Is(err, ErrTaskNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[id] = info
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vsphere: vCenter %s: read %d tasks: %w", c.s.server, len(ids), err)
	}
	for _, t := range tasks {
		out[t.Self.Value] = c.taskInfo(ctx, t.Self.Value, t.Info)
	}
	return out, nil
}

// taskInfo converts a task's info, counting a power task that failed only because its
// VM is already in the target state as a success.
func (c *client) taskInfo(ctx context.Context, id string, ti types.TaskInfo) TaskInfo {
	info := TaskInfo{State: TaskState(ti.State)}
	if info.State != TaskError {
		return info
	}
	if ti.Error != nil && ti.Error.Fault != nil {
		info.Fault = reflect.Indirect(reflect.ValueOf(ti.Error.Fault)).Type().Name()
		info.Error = ti.Error.LocalizedMessage
		if msgs := ti.Error.Fault.GetMethodFault().FaultMessage; info.Error == "" && len(msgs) > 0 {
			info.Error = msgs[0].Message
		}
	}
	if info.Error == "" {
		info.Error = info.Fault
	}
	if c.alreadyThere(ctx, ti) {
		c.log.V(1).Info("Task failed with InvalidPowerState but the VM is in the target state; counting it as done",
			"task", id, "fault", info.Fault)
		return TaskInfo{State: TaskSuccess}
	}
	return info
}

// alreadyThere tells whether a failed power task's VM is already in the task's target state.
func (c *client) alreadyThere(ctx context.Context, t types.TaskInfo) bool {
	if t.Error == nil || t.Entity == nil || t.Entity.Type != "VirtualMachine" {
		return false
	}
	if !fault.Is(t.Error.Fault, &types.InvalidPowerState{}) && !fault.Is(t.Error.Fault, &types.InvalidPowerStateFault{}) {
		return false
	}
	target, ok := targetStates[t.DescriptionId]
	if !ok {
		return false
	}
	vm, err := c.vm(ctx, t.Entity.Value, "runtime.powerState")
	return err == nil && vm.Runtime.PowerState == target
}
