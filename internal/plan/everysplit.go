package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// everySplit tells whether the vGPUs of starting fit ha's host under every split
// consistent with vSphere's report (splits.go), and finds one power-on order that
// vSphere's placement accepts under all of them: "" when so, else why not.
func (a *analysis) everySplit(ha *hostAnalysis, hs hostSplits, states []hostState, starting []*member) string {
	h := ha.host
	if hs.tooMany {
		return fmt.Sprintf("host %s: vSphere does not report which of the vGPUs of %s run on which GPU, and more than %d splits of them are consistent with its report, more than gpupool checks; gpupool starts a layout only if it fits under every such split and refuses layout %s rather than guess. %s",
			h.Name, vmList(hs.unknown), maxSplits, a.layout.Name, splitHelp(hs.unknown))
	}
	ds := demands(starting)
	// States that leave the same freed occupancy answer alike: each is searched once
	// (placement worlds make many such states).
	packs, works := map[string]bool{}, map[string]bool{}
	fits := func(st hostState) bool {
		key := freedKey(h, st.freed)
		ok, seen := packs[key]
		if !seen {
			ok = packable(h, st.freed, ds)
			packs[key] = ok
		}
		return ok
	}
	orderWorks := func(st hostState) bool {
		key := freedKey(h, st.freed)
		ok, seen := works[key]
		if !seen {
			_, stuck := powerOnOrder(h, st.freed, starting)
			ok = len(stuck) == 0 && fits(st)
			works[key] = ok
		}
		return ok
	}
	var orders [][]*member
	var distinct []hostState
	seen := map[string]bool{}
	for k, st := range states {
		key := freedKey(h, st.freed)
		if seen[key] {
			continue
		}
		seen[key] = true
		distinct = append(distinct, st)
		ha.set(st)
		if !fits(st) {
			msg := a.shortage(ha, ds)
			if len(states) > 1 && slices.ContainsFunc(states, fits) {
				msg = a.stateRefusal(ha, hs, states, k, msg, fits)
			}
			return msg
		}
		order, stuck := powerOnOrder(h, st.freed, starting)
		works[key] = len(stuck) == 0
		if len(stuck) > 0 {
			names := make([]string, len(stuck))
			for i, m := range stuck {
				names[i] = m.vm.Name + " (" + vgpus(m.count, m.want) + ")"
			}
			msg := fmt.Sprintf("host %s: the GPUs could hold layout %s's vGPUs, but gpupool found no power-on order in which vSphere's %s placement places them all (%s would find no GPU)",
				h.Name, a.layout.Name, policy(h), strings.Join(names, ", "))
			if len(states) > 1 && slices.ContainsFunc(states, orderWorks) {
				msg = a.stateRefusal(ha, hs, states, k, msg, orderWorks)
			}
			return msg
		}
		orders = append(orders, order)
	}
	for _, order := range orders {
		if slices.IndexFunc(distinct, func(st hostState) bool { return !placesAll(h, st.freed, order) }) < 0 {
			ha.set(states[0])
			ha.order = order
			return ""
		}
	}
	if len(states) > len(hs.splits) {
		var vms []string
		for _, st := range states {
			for _, p := range st.where {
				if !slices.Contains(vms, p.vm) {
					vms = append(vms, p.vm)
				}
			}
		}
		return fmt.Sprintf("host %s: vSphere does not report where running vGPUs sit on a GPU in mixed-size mode; layout %s's vGPUs fit with each of the %d placements of them (and splits of devices) consistent with its report and NVIDIA's placement tables, but gpupool found no power-on order that vSphere's %s placement accepts with all of them, and does not start on a guess. %s",
			h.Name, a.layout.Name, len(states), policy(h), a.placementHelp(vms))
	}
	return fmt.Sprintf("host %s: vSphere does not report which of the vGPUs of %s run on which GPU; layout %s's vGPUs fit under each of the %d splits consistent with its report, but gpupool found no power-on order that vSphere's %s placement accepts under all of them, and does not start on a guess. %s",
		h.Name, vmList(hs.unknown), a.layout.Name, len(states), policy(h), splitHelp(hs.unknown))
}

// stateRefusal is msg, the reason the layout does not fit in state k, said as a
// refusal that comes from not knowing where the running vGPUs sit (worlds.go) or which
// split of devices holds.
// The split is the cause when the layout fits in every placement world of another
// split and in none of state k's; else the placement is (with the split, when that is
// unknown too).
func (a *analysis) stateRefusal(ha *hostAnalysis, hs hostSplits, states []hostState, k int, msg string, fits func(hostState) bool) string {
	if len(states) == len(hs.splits) || len(states[k].where) == 0 {
		return a.splitRefusal(ha, hs, states[k].split, msg)
	}
	splitFits := func(s int) bool {
		return !slices.ContainsFunc(states, func(st hostState) bool { return st.split == s && !fits(st) })
	}
	someWorld := slices.ContainsFunc(states, func(st hostState) bool { return st.split == states[k].split && fits(st) })
	if len(hs.unknown) > 0 && !someWorld && slices.ContainsFunc(states, func(st hostState) bool { return splitFits(st.split) }) {
		return a.splitRefusal(ha, hs, states[k].split, msg)
	}
	return a.placementRefusal(ha, hs, states, k, msg)
}

// freedKey identifies a state's freed occupancy: what packing and the power-on order
// depend on.
func freedKey(h *inventory.Host, occ []inventory.Occupancy) string {
	var b strings.Builder
	for i, o := range occ {
		b.WriteString(gpuKey(h.GPUs[i], o))
		fmt.Fprintf(&b, "/%d/%d|", o.VMs, o.Count)
	}
	return b.String()
}

// splitRefusal is msg, the reason the layout does not fit under split k, said as a
// refusal that comes from not knowing the split.
func (a *analysis) splitRefusal(ha *hostAnalysis, hs hostSplits, k int, msg string) string {
	return fmt.Sprintf("host %s: vSphere does not report which of the vGPUs of %s run on which GPU, and layout %s fits under some of the %d splits consistent with its report but not under %s; gpupool starts a layout only if it fits under every such split. Under that split: %s. %s",
		ha.host.Name, vmList(hs.unknown), a.layout.Name, len(hs.splits), a.describeSplit(ha.host, hs, k), msg, splitHelp(hs.unknown))
}

// describeSplit writes split k of the VMs whose split is unknown: "VM big with
// grid_l4-12q on GPU 0000:3b:00.0 and grid_l4-8q on GPU 0000:af:00.0".
func (a *analysis) describeSplit(h *inventory.Host, hs hostSplits, k int) string {
	var parts []string
	for _, name := range hs.unknown {
		var on []string
		for i, devs := range hs.splits[k][name] {
			if len(devs) > 0 {
				on = append(on, strings.Join(devs, ", ")+" on GPU "+h.GPUs[i].PCIID)
			}
		}
		parts = append(parts, "VM "+name+" with "+strings.Join(on, " and "))
	}
	return "the one with " + strings.Join(parts, "; ")
}

// splitHelp says what lets gpupool know the split.
func splitHelp(names []string) string {
	if len(names) == 1 {
		return fmt.Sprintf("Power %s off (or move it) while the layout starts, or give it one vGPU device per GPU it runs on, all of one profile, so that vSphere's report leaves no doubt", vmList(names))
	}
	return fmt.Sprintf("Power %s off (or move them) while the layout starts, or give each one vGPU device per GPU it runs on, all of one profile, so that vSphere's report leaves no doubt", vmList(names))
}

// placesAll tells whether vSphere's placement accepts the VMs of order one after the
// other from occ.
func placesAll(h *inventory.Host, occ []inventory.Occupancy, order []*member) bool {
	for _, m := range order {
		var ok bool
		if occ, ok = placeAll(h, occ, m.offer, m.count); !ok {
			return false
		}
	}
	return true
}

// nowStates are clones of what runs now under every consistent split.
func (ha *hostAnalysis) nowStates() [][]inventory.Occupancy {
	if len(ha.splits) == 0 {
		return [][]inventory.Occupancy{slices.Clone(ha.current)}
	}
	out := make([][]inventory.Occupancy, len(ha.splits))
	for k, st := range ha.splits {
		out[k] = slices.Clone(st.current)
	}
	return out
}

// placeEvery is placeAll under every split: the VM is powered on now only if vSphere
// places it under each.
func placeEvery(h *inventory.Host, occs [][]inventory.Occupancy, p inventory.Profile, n int) ([][]inventory.Occupancy, bool) {
	next := make([][]inventory.Occupancy, len(occs))
	for k, occ := range occs {
		var ok bool
		if next[k], ok = placeAll(h, occ, p, n); !ok {
			return occs, false
		}
	}
	return next, true
}
