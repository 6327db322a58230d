package plan

import (
	"slices"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Tasks in flight. The inventory is what vSphere reports now, but a vSphere task that
// has been started and has not ended changes it soon: a plan made from the observed
// power states alone would start an operation that the one in flight makes fail (a
// power-on into a GPU that a power-on in flight is taking). So Build plans from the
// state the tasks in flight lead to, as far as it is known:
//
//   - a VM with a power-on (or resume) in flight counts as running: it takes a GPU. Where
//     vSphere will place it is not known until the task ends, so no other power-on is
//     started on its host until then (those power-ons wait in HostPlan.Later), and a VM
//     that the wanted layout does not keep is planned to be drained and parked again;
//   - a VM with a park (suspend, power-off) in flight still holds its GPU until the task
//     ends: vSphere reports it running until then, and the plan keeps its park step,
//     which keeps the power-ons behind it on its host;
//   - a power-on planned ahead of the parks on its host (AfterParks) is in flight from
//     the pass that stored its intent, asked or not: its host counts as starting, so
//     nothing else is powered on there until it ends, and the parks it waits for keep
//     their steps, which start nothing while their tasks run;
//   - a reconfigure in flight changes no GPU.
//
// The controller starts nothing for a worker whose task is in flight, so the steps the
// plan gives such a VM wait for the task.

// settled is the inventory as the tasks in flight leave it (see above), and the hosts
// on which a power-on is in flight. The inventory is not modified; the result shares
// what it does not change.
func settled(inv *inventory.Inventory, inFlight map[string]Action) (*inventory.Inventory, map[string]bool) {
	if len(inFlight) == 0 {
		return inv, nil
	}
	starting := map[string]bool{}
	states := map[int]inventory.PowerState{}
	for i := range inv.VMs {
		if act, ok := actionOf(inFlight, &inv.VMs[i]); ok && act == PowerOn {
			starting[inv.VMs[i].Host] = true
			states[i] = inventory.PoweredOn
		}
	}
	return withStates(inv, states, nil), starting
}

// actionOf is the action in flight of vm, named by its name or its inventory path.
func actionOf(actions map[string]Action, vm *inventory.VM) (Action, bool) {
	act, ok := actions[vm.Name]
	if !ok && vm.Path != "" {
		act, ok = actions[vm.Path]
	}
	return act, ok
}

// parkedState is the power state a park leaves its VM in.
func parkedState(park Action) inventory.PowerState {
	if park == Suspend {
		return inventory.Suspended
	}
	return inventory.PoweredOff
}

// withStates is inv with the power states of some VMs (by index) replaced: a VM no
// longer running is taken off the GPUs that list it, as vSphere's graphicsInfo does once
// it is down. vCenter's capacity of the hosts in stale is left out: it was read of a
// state the plan no longer counts. inv itself is not modified; the result shares what
// it does not change.
func withStates(inv *inventory.Inventory, states map[int]inventory.PowerState, stale map[string]bool) *inventory.Inventory {
	var vms []inventory.VM
	down := map[string]map[string]bool{} // host -> VMs taken off its GPUs
	for i, st := range states {
		vm := &inv.VMs[i]
		if vm.PowerState == st {
			continue
		}
		if vms == nil {
			vms = slices.Clone(inv.VMs)
		}
		vms[i].PowerState = st
		if st != inventory.PoweredOn {
			vms[i].GPU, vms[i].GPUs = "", nil
			if down[vm.Host] == nil {
				down[vm.Host] = map[string]bool{}
			}
			down[vm.Host][vm.Name] = true
		}
	}
	var hosts []inventory.Host
	for i := range inv.Hosts {
		h := &inv.Hosts[i]
		off := down[h.Name]
		staleCap := stale[h.Name] && h.VCenterCapacity.State == inventory.CapacityRead
		if len(off) == 0 && !staleCap {
			continue
		}
		if hosts == nil {
			hosts = slices.Clone(inv.Hosts)
		}
		if staleCap {
			hosts[i].VCenterCapacity = inventory.VCenterCapacity{}
		}
		if len(off) > 0 {
			gpus := slices.Clone(h.GPUs)
			for g := range gpus {
				gpus[g].VMs = slices.DeleteFunc(slices.Clone(gpus[g].VMs), func(n string) bool { return off[n] })
			}
			hosts[i].GPUs = gpus
		}
	}
	if vms == nil && hosts == nil {
		return inv
	}
	out := *inv
	if vms != nil {
		out.VMs = vms
	}
	if hosts != nil {
		out.Hosts = hosts
	}
	return &out
}
