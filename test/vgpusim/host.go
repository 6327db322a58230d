package vgpusim

import (
	"fmt"
	"slices"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// Host availability. vCenter refuses to power on a VM on a host that is in (or entering)
// maintenance mode or that it cannot reach:
//   - HostSystem.runtime.inMaintenanceMode / EnterMaintenanceMode_Task (vSphere API): the
//     task "does not complete until there are no powered-on virtual machines on the host",
//     and no VM may be powered on there meanwhile; ExitMaintenanceMode_Task ends it.
//   - InvalidHostState ("The operation is not allowed in the current state of the host")
//     is the fault of an operation the host's state forbids; HostNotConnected ("Unable to
//     communicate with the remote host, since it is disconnected") that of a host whose
//     runtime.connectionState is disconnected or notResponding.

// hostFault is why a VM cannot be powered on on h now, or nil. Callers hold s.mu.
func (h *hostState) hostFault() types.BaseMethodFault {
	ref := h.obj.Self
	switch {
	case h.connection != string(types.HostSystemConnectionStateConnected):
		return withMessage(&types.HostNotConnected{},
			fmt.Sprintf("Unable to communicate with the remote host, since it is disconnected: host %s is %s", h.cfg.Name, h.connection))
	case h.inMaintenance:
		return withMessage(&types.InvalidHostState{Host: &ref},
			fmt.Sprintf("The operation is not allowed in the current state of the host: %s is in maintenance mode", h.cfg.Name))
	case h.entering != nil:
		return withMessage(&types.InvalidHostState{Host: &ref},
			fmt.Sprintf("The operation is not allowed in the current state of the host: %s is entering maintenance mode", h.cfg.Name))
	}
	return nil
}

// Lock order: vcsim's object locks (VM, then host) before s.mu, and s.mu is never held
// while taking an object lock. The hosts map itself is fixed once Start returns.

// publishRuntime mirrors the host's availability into runtime and summary.runtime.
// Callers do not hold s.mu.
func (s *Sim) publishRuntime(ctx *simulator.Context, h *hostState) {
	ctx.WithLock(h.obj, func() {
		s.mu.Lock()
		inMM, conn := h.inMaintenance, types.HostSystemConnectionState(h.connection)
		s.mu.Unlock()
		ctx.Update(h.obj, []types.PropertyChange{
			{Name: "runtime.inMaintenanceMode", Val: inMM},
			{Name: "runtime.connectionState", Val: conn},
		})
		if h.obj.Summary.Runtime != nil && h.obj.Summary.Runtime != &h.obj.Runtime {
			h.obj.Summary.Runtime.InMaintenanceMode = inMM
			h.obj.Summary.Runtime.ConnectionState = conn
		}
	})
}

// hostOps serves a host's maintenance-mode methods. It is put in the calling session's
// registry only (see Sim.handle), so vcsim's own code keeps seeing its HostSystem.
//
// Note: the embedded host must stay the first field, as for vgpuVM.
type hostOps struct {
	*simulator.HostSystem
	sim *Sim
}

// EnterMaintenanceModeTask starts entering maintenance mode: the task completes at once
// when no VM runs on the host, else when the last powered-on VM powers off or suspends.
func (o *hostOps) EnterMaintenanceModeTask(ctx *simulator.Context, _ *types.EnterMaintenanceMode_Task) soap.HasFault {
	s := o.sim
	h := s.hosts[o.Self]
	task := s.newTask(ctx, o.Self, "enterMaintenanceMode")
	var fault types.BaseMethodFault
	s.mu.Lock()
	done := h.inMaintenance
	switch {
	case done:
	case h.entering != nil:
		done = true
		fault = withMessage(&types.InvalidState{},
			fmt.Sprintf("host %s is already entering maintenance mode (%s)", h.cfg.Name, h.entering.Self.Value))
	default:
		h.entering = task
	}
	s.mu.Unlock()
	if done {
		s.finishTask(ctx, task, fault)
	} else {
		s.log.Info("Entering maintenance mode", "host", h.cfg.Name, "task", task.Self.Value)
		s.settleMaintenance(ctx, o.Self)
	}
	return &methods.EnterMaintenanceMode_TaskBody{Res: &types.EnterMaintenanceMode_TaskResponse{Returnval: task.Self}}
}

// ExitMaintenanceModeTask leaves maintenance mode; an entry still waiting for VMs is
// cancelled (its task fails with RequestCanceled).
func (o *hostOps) ExitMaintenanceModeTask(ctx *simulator.Context, _ *types.ExitMaintenanceMode_Task) soap.HasFault {
	s := o.sim
	h := s.hosts[o.Self]
	task := s.newTask(ctx, o.Self, "exitMaintenanceMode")
	s.mu.Lock()
	cancelled := h.entering
	h.entering = nil
	was := h.inMaintenance
	h.inMaintenance = false
	s.mu.Unlock()
	if cancelled != nil {
		s.finishTask(ctx, cancelled, withMessage(&types.RequestCanceled{}, "entering maintenance mode was cancelled by ExitMaintenanceMode_Task"))
	}
	if !was {
		s.finishTask(ctx, task, withMessage(&types.InvalidState{}, fmt.Sprintf("host %s is not in maintenance mode", h.cfg.Name)))
	} else {
		s.publishRuntime(ctx, h)
		s.finishTask(ctx, task, nil)
		s.log.Info("Exited maintenance mode", "host", h.cfg.Name)
	}
	return &methods.ExitMaintenanceMode_TaskBody{Res: &types.ExitMaintenanceMode_TaskResponse{Returnval: task.Self}}
}

// DisconnectHostTask disconnects the host from vCenter: its VMs keep running, but none
// can be powered on until ReconnectHost_Task (HostNotConnected).
func (o *hostOps) DisconnectHostTask(ctx *simulator.Context, _ *types.DisconnectHost_Task) soap.HasFault {
	ref := o.setConnection(ctx, "disconnectHost", types.HostSystemConnectionStateDisconnected)
	return &methods.DisconnectHost_TaskBody{Res: &types.DisconnectHost_TaskResponse{Returnval: ref}}
}

// ReconnectHostTask connects the host again.
func (o *hostOps) ReconnectHostTask(ctx *simulator.Context, _ *types.ReconnectHost_Task) soap.HasFault {
	ref := o.setConnection(ctx, "reconnectHost", types.HostSystemConnectionStateConnected)
	return &methods.ReconnectHost_TaskBody{Res: &types.ReconnectHost_TaskResponse{Returnval: ref}}
}

func (o *hostOps) setConnection(ctx *simulator.Context, name string, st types.HostSystemConnectionState) types.ManagedObjectReference {
	s := o.sim
	h := s.hosts[o.Self]
	task := s.newTask(ctx, o.Self, name)
	s.mu.Lock()
	h.connection = string(st)
	s.mu.Unlock()
	s.publishRuntime(ctx, h)
	s.finishTask(ctx, task, nil)
	s.log.Info("Set host connection", "host", h.cfg.Name, "state", st)
	return task.Self
}

// settleMaintenance completes a pending entry into maintenance mode once no VM runs on
// the host. Callers do not hold s.mu.
func (s *Sim) settleMaintenance(ctx *simulator.Context, ref types.ManagedObjectReference) {
	h := s.hosts[ref]
	if h == nil {
		return
	}
	s.mu.Lock()
	task := h.entering
	if task == nil || s.runningOn(ref) > 0 {
		s.mu.Unlock()
		return
	}
	h.inMaintenance, h.entering = true, nil
	s.mu.Unlock()
	s.publishRuntime(ctx, h)
	s.finishTask(ctx, task, nil)
	s.log.Info("Entered maintenance mode", "host", h.cfg.Name, "task", task.Self.Value)
}

// runningOn counts the powered-on VMs registered on the host. Callers hold s.mu.
func (s *Sim) runningOn(host types.ManagedObjectReference) int {
	n := 0
	for _, on := range s.poweredOn {
		if on == host {
			n++
		}
	}
	return n
}

// SetHostState changes a host's availability at run time, as an admin or a failure
// would: maintenance puts it in (true) or out of maintenance mode at once, whatever runs
// there (use EnterMaintenanceMode_Task through the API to wait for VMs), and connection
// is connected, disconnected or notResponding ("" keeps it).
func (s *Sim) SetHostState(host string, maintenance bool, connection string) error {
	switch connection {
	case "", string(types.HostSystemConnectionStateConnected), string(types.HostSystemConnectionStateDisconnected),
		string(types.HostSystemConnectionStateNotResponding):
	default:
		return fmt.Errorf("vgpusim: connection state %q is not connected, disconnected or notResponding", connection)
	}
	for _, h := range s.hosts {
		if h.cfg.Name != host {
			continue
		}
		ctx := s.newContext()
		s.mu.Lock()
		h.inMaintenance = maintenance
		if connection != "" {
			h.connection = connection
		}
		pending := h.entering
		if maintenance {
			h.entering = nil
		}
		s.mu.Unlock()
		if pending != nil && maintenance {
			s.finishTask(ctx, pending, nil)
		}
		s.publishRuntime(ctx, h)
		s.log.Info("Set host state", "host", host, "maintenance", maintenance, "connection", connection)
		return nil
	}
	return fmt.Errorf("vgpusim: no host %s", host)
}

// HostState is a host's availability as the simulator has it.
type HostState struct {
	InMaintenanceMode bool
	// EnteringMaintenanceMode: an EnterMaintenanceMode_Task waits for VMs to stop.
	EnteringMaintenanceMode bool
	ConnectionState         string
	// PoweredOn is how many VMs run on the host.
	PoweredOn int
}

// Host reports the named host's availability.
func (s *Sim) Host(name string) (HostState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ref, h := range s.hosts {
		if h.cfg.Name == name {
			return HostState{InMaintenanceMode: h.inMaintenance, EnteringMaintenanceMode: h.entering != nil,
				ConnectionState: h.connection, PoweredOn: s.runningOn(ref)}, true
		}
	}
	return HostState{}, false
}

// targetHost is the host a power-on places the VM on: its own, or the host argument of
// PowerOnVM_Task for a powered-off VM. The vSphere API says the argument "must specify a
// host that is part of the same compute resource that the virtual machine is currently
// associated with"; a suspended VM resumes where it is. Callers hold s.mu.
func (s *Sim) targetHost(vm *simulator.VirtualMachine, arg *types.ManagedObjectReference) (types.ManagedObjectReference, types.BaseMethodFault) {
	cur := *vm.Runtime.Host
	if arg == nil || *arg == cur || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		return cur, nil
	}
	to, ok := s.hosts[*arg]
	from := s.hosts[cur]
	if !ok || from == nil || to.obj.Parent == nil || from.obj.Parent == nil || *to.obj.Parent != *from.obj.Parent {
		return cur, withMessage(&types.InvalidArgument{InvalidProperty: "host"},
			fmt.Sprintf("A specified parameter was not correct: host %s is not in the compute resource of %s", arg.Value, vm.Name))
	}
	// "If this host is not compatible, the current host association is used" (vSphere
	// API, PowerOnVMRequestType.host): one that does not mount the VM's datastores.
	for _, ds := range vm.Datastore {
		if !slices.Contains(to.obj.Datastore, ds) {
			s.log.Info("Power-on host does not mount the VM's datastore; using the VM's own host", "vm", vm.Name, "host", to.cfg.Name, "datastore", ds.Value)
			return cur, nil
		}
	}
	return *arg, nil
}

// moveVM registers the VM on another host of its compute resource: runtime.host and the
// hosts' vm lists change, as when vCenter powers a VM on elsewhere.
func (s *Sim) moveVM(ctx *simulator.Context, vm *simulator.VirtualMachine, to types.ManagedObjectReference) {
	from := *vm.Runtime.Host
	if from == to {
		return
	}
	for _, ref := range []types.ManagedObjectReference{from, to} {
		ctx.WithLock(ref, func() {
			h := s.hosts[ref].obj
			list := slices.DeleteFunc(slices.Clone(h.Vm), func(r types.ManagedObjectReference) bool { return r == vm.Self })
			if ref == to {
				list = append(list, vm.Self)
			}
			ctx.Update(h, []types.PropertyChange{{Name: "vm", Val: list}})
		})
	}
	ctx.Update(vm, []types.PropertyChange{
		{Name: "runtime.host", Val: to},
		{Name: "summary.runtime.host", Val: to},
	})
}
