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
	var vms []inventory.VM
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		act, ok := inFlight[vm.Name]
		if !ok && vm.Path != "" {
			act, ok = inFlight[vm.Path]
		}
		if !ok || act != PowerOn {
			continue
		}
		starting[vm.Host] = true
		if vm.PowerState == inventory.PoweredOn {
			continue
		}
		if vms == nil {
			vms = slices.Clone(inv.VMs)
		}
		vms[i].PowerState = inventory.PoweredOn
	}
	if vms == nil {
		return inv, starting
	}
	out := *inv
	out.VMs = vms
	return &out, starting
}
