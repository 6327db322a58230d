package plan

import (
	"slices"

	"github.com/gpupool/gpupool/internal/inventory"
)

// A VM's vGPU devices may carry different profiles (NVIDIA Multi-vGPU allows sizes of one
// board and series in a VM). No worker asks for that (inventory.VM.Is), but while such a
// VM runs, capacity counts each device at its own size on the GPU it is guessed to run on.

// nextDevice is the profile of the VM's next vGPU device not yet counted (devices
// counts them per VM): a VM whose devices differ counts each at its own size. vSphere
// does not say which device runs on which GPU; the devices are taken in device order
// over the GPUs sorted by PCI id. "" for a VM unknown or without vGPUs.
func (a *analysis) nextDevice(name string, devices map[string]int) string {
	vm, ok := a.vms[name]
	if !ok {
		return ""
	}
	devs := vm.DeviceProfiles()
	k := devices[name]
	devices[name]++
	if k < len(devs) {
		return devs[k]
	}
	return vm.Profile
}

// mixedDevices guesses, for each VM running on h whose vGPU devices differ, which
// devices run on which of the GPUs that list it (indexed like h.GPUs): vSphere reports
// only the GPUs. The guess replays vSphere's placement (inventory.Place, in device
// order, as a power-on places them) next to the other VMs of those GPUs. A replay that
// does not land on exactly the listed GPUs (the other VMs started later) is dropped for
// the first assignment in which every listed GPU holds a device and every GPU's vGPUs
// fit its mode (consistent); failing that, nextDevice's device order.
func (a *analysis) mixedDevices(h *inventory.Host) map[string][][]string {
	out := map[string][][]string{}
	for _, vm := range a.inv.VMs {
		if len(vm.Profiles) == 0 || vm.Host != h.Name {
			continue
		}
		if at, ok := a.replay(h, vm.Name, vm.Profiles); ok {
			out[vm.Name] = at
		} else if at, ok := a.consistent(h, vm.Name, vm.Profiles); ok {
			out[vm.Name] = at
		}
	}
	return out
}

// replay places the devices of the VM called name on the GPUs of h that list it.
func (a *analysis) replay(h *inventory.Host, name string, devs []string) ([][]string, bool) {
	sub := *h
	sub.GPUs = nil
	var listed []int
	for i, g := range h.GPUs {
		if slices.Contains(g.VMs, name) {
			listed = append(listed, i)
			sub.GPUs = append(sub.GPUs, g)
		}
	}
	if len(listed) == 0 || len(listed) > len(devs) {
		return nil, false
	}
	occ := make([]inventory.Occupancy, len(sub.GPUs))
	for j, g := range sub.GPUs {
		for _, other := range a.largestFirst(h, g.VMs) {
			if other == name {
				continue
			}
			vm := a.vms[other]
			for range a.vgpusOn(h, other, 0) {
				occ[j] = a.add(occ[j], h, g, other, vm.Profile)
			}
			occ[j].VMs++
		}
	}
	at := make([][]string, len(h.GPUs))
	for _, d := range devs {
		p, ok := offerOf(h, d)
		if !ok {
			return nil, false
		}
		j := inventory.Place(&sub, occ, p)
		if j < 0 {
			return nil, false
		}
		vms := occ[j].VMs
		occ[j] = occ[j].Add(p, sub.GPUs[j])
		if len(at[listed[j]]) == 0 {
			occ[j].VMs = vms + 1
		}
		at[listed[j]] = append(at[listed[j]], d)
	}
	for _, i := range listed {
		if len(at[i]) == 0 {
			return nil, false
		}
	}
	return at, true
}

// consistent tries the assignments of the VM's devices to the GPUs of h that list it
// (at most 6 devices: 3^6 tries on three GPUs), first by device order, and returns the
// first in which every listed GPU holds a device and each GPU's vGPUs, the other VMs'
// first, fit its mode.
func (a *analysis) consistent(h *inventory.Host, name string, devs []string) ([][]string, bool) {
	var listed []int
	for i, g := range h.GPUs {
		if slices.Contains(g.VMs, name) {
			listed = append(listed, i)
		}
	}
	if len(listed) == 0 || len(listed) > len(devs) || len(devs) > 6 {
		return nil, false
	}
	choice := make([]int, len(devs))
	for {
		if at, ok := a.fits(h, name, devs, listed, choice); ok {
			return at, true
		}
		k := len(choice) - 1
		for k >= 0 && choice[k] == len(listed)-1 {
			choice[k] = 0
			k--
		}
		if k < 0 {
			return nil, false
		}
		choice[k]++
	}
}

// fits tells whether putting device d on GPU listed[choice[d]] is consistent.
func (a *analysis) fits(h *inventory.Host, name string, devs []string, listed, choice []int) ([][]string, bool) {
	at := make([][]string, len(h.GPUs))
	for d, c := range choice {
		at[listed[c]] = append(at[listed[c]], devs[d])
	}
	for _, i := range listed {
		if len(at[i]) == 0 {
			return nil, false
		}
		g := h.GPUs[i]
		var o inventory.Occupancy
		for _, other := range a.largestFirst(h, g.VMs) {
			if other != name {
				for range a.vgpusOn(h, other, 0) {
					o = a.add(o, h, g, other, a.vms[other].Profile)
				}
			}
		}
		for _, d := range at[i] {
			p, ok := offerOf(h, d)
			if !ok || h.RunsOn(i, d) == inventory.OtherBoard || !o.FitsOn(p, g) {
				return nil, false
			}
			o = o.Add(p, g)
		}
	}
	return at, true
}
