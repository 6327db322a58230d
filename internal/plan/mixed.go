package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// mixedHint says, when the vGPUs of ds do not fit h in same-size mode but would if h's
// same-size GPUs were in mixed-size mode, which GPUs to switch. vSphere 8.0 U3 sets the
// mode per GPU (HostGraphicsConfig.deviceType[].vgpuMode, the host's Graphics settings);
// NVIDIA supports mixed-size mode from vGPU 17 on, on some GPUs only. Only GPUs that
// report sameSize explicitly are proposed: a host before 8.0.3 reports no mode and has
// no mixed-size mode to switch to; nor are GPUs of a board for which NVIDIA's vGPU user
// guide says "This GPU does not support mixed-size mode" (inventory.Board.NoMixedSize).
func mixedHint(h *inventory.Host, freed []inventory.Occupancy, ds []demand) string {
	mixed := *h
	mixed.GPUs = slices.Clone(h.GPUs)
	var switched []string
	for i, g := range mixed.GPUs {
		if b, _, _ := inventory.BoardOf(g); g.Mode == inventory.ModeSameSize && !b.NoMixedSize {
			mixed.GPUs[i].Mode = inventory.ModeMixedSize
			switched = append(switched, g.PCIID)
		}
	}
	if len(switched) == 0 {
		return ""
	}
	// What runs now is placed again on the switched GPUs, as vSphere would after the
	// switch (the mode changes only on an idle GPU, so this is what it can become).
	occ := make([]inventory.Occupancy, len(freed))
	for i, o := range freed {
		occ[i] = o
		if mixed.GPUs[i].Mixed() && !h.GPUs[i].Mixed() && o.Count > 0 {
			p := inventory.Profile{Name: o.Profile, FrameBufferMiB: o.UsedMiB / int64(o.Count)}
			occ[i] = inventory.Occupancy{}
			for range o.Count {
				occ[i] = occ[i].Add(p, mixed.GPUs[i])
			}
			occ[i].VMs = o.VMs
		}
	}
	if !packSlots(&mixed, occ, ds) {
		return ""
	}
	return fmt.Sprintf("; %s %s in same-size vGPU mode, which runs one profile per GPU: in mixed-size mode (vSphere 8.0 U3 and NVIDIA vGPU 17 or later: set the vGPU mode of the GPU to mixed size in host %s's graphics settings, where NVIDIA supports it for the GPU) %s would fit",
		plural(len(switched), "GPU"), strings.Join(switched, ", ")+map[bool]string{true: " is", false: " are"}[len(switched) == 1], h.Name, demandList(ds))
}

// slotShortage says why the vGPUs of ds do not fit a host with GPUs in mixed-size
// mode: what each GPU runs and which of its placement slots are free.
func (a *analysis) slotShortage(ha *hostAnalysis, ds []demand) string {
	h := ha.host
	var gpus, limits []string
	for i, g := range h.GPUs {
		o := ha.freed[i]
		mode := "same-size"
		if g.Mixed() {
			mode = "mixed-size"
		}
		what := "free"
		if o.Count > 0 {
			what = fmt.Sprintf("runs %d %s (%s used)", o.Count, plural(o.Count, "vGPU"), gib(o.UsedMiB))
			if g.Mixed() {
				what += fmt.Sprintf(", %d of %d placement slots free", o.FreeSlots(g), inventory.SlotCount(g))
			}
		}
		gpus = append(gpus, fmt.Sprintf("GPU %s (%s, %s mode) %s", g.PCIID, gib(g.MemoryMiB), mode, what))
		if g.Mixed() {
			for _, d := range ds {
				if h.RunsOn(i, d.profile.Name) != inventory.Runs {
					continue
				}
				if l := mixedLimit(g, d.profile); l != "" && !slices.Contains(limits, l) {
					limits = append(limits, l)
				}
			}
		}
	}
	msg := fmt.Sprintf("host %s: layout %s needs %s, which do not fit its GPUs: in mixed-size mode a vGPU starts only at the placement IDs NVIDIA lists for its size and the GPU's frame buffer, vSphere does not report where running vGPUs sit (so gpupool counts only the places free wherever they sit), and only A-, B- and Q-series (or only C-series) vGPUs share a GPU (%s)",
		h.Name, a.layout.Name, demandList(ds), strings.Join(gpus, "; "))
	if len(limits) > 0 {
		msg += "; " + strings.Join(limits, "; ")
	}
	return msg + mixedHint(h, ha.freed, ds)
}

// demandList writes the demands as "2 x grid_l40-4q and 1 x grid_l40-8q".
func demandList(ds []demand) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%d x %s", d.count, d.profile.Name)
	}
	return strings.Join(parts, " and ")
}
