package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// vSphere lists the VMs on each GPU (graphicsInfo[].vm), not which of a VM's vGPU
// devices sits on which GPU. For a VM with several devices listed on several GPUs the
// split is unknown: its devices may sit on the listed GPUs in any way that gives each
// listed GPU at least one and leaves every GPU's vGPUs valid under its mode
// (inventory.CanRun). gpupool never claims a layout fits on a guess: the layout is
// feasible only if it fits under every split consistent with the report.

// maxSplits bounds the consistent splits checked per host; past it the layout is
// refused, saying so.
const maxSplits = 64

// maxDeviceAssignments bounds the assignments of one VM's devices tried (listed GPUs to
// the power of its devices).
const maxDeviceAssignments = 1 << 12

// split gives, for each VM whose split is unknown, its device profiles on each GPU of
// the host (indexed like h.GPUs).
type split map[string][][]string

// hostSplits are the splits of a host's VMs consistent with what vSphere reports.
type hostSplits struct {
	// splits has at least one element (an empty split when no VM's split is unknown).
	splits []split
	// unknown are the VMs placed differently by some of the splits, by name.
	unknown []string
	// tooMany: there are more than maxSplits; splits holds the first ones.
	tooMany bool
	// none are the VMs no consistent split places: the report contradicts the model
	// (or the VM's devices are unknown), and every GPU listing them is taken whole.
	none map[string]bool
}

// splitVM is a VM with several vGPU devices listed on several GPUs of a host.
type splitVM struct {
	name   string
	listed []int
	devs   []string
	cands  []split // its own consistent splits, next to the VMs of known split
}

// splitsOf enumerates the splits of h's VMs consistent with the report.
func (a *analysis) splitsOf(h *inventory.Host) hostSplits {
	hs := hostSplits{none: map[string]bool{}}
	fixed := make([][]inventory.Profile, len(h.GPUs))
	var vms []*splitVM
	for i, g := range h.GPUs {
		for _, name := range g.VMs {
			vm, ok := a.vms[name]
			if !ok {
				continue // add takes the GPU whole
			}
			listed := a.listedOn(h, name)
			if vm.VGPUCount() <= 1 || len(listed) <= 1 {
				devs := vm.DeviceProfiles() // all of them run here
				if len(listed) > 1 {
					devs = devs[:min(len(devs), 1)] // one device, listed on several GPUs
				}
				for _, d := range devs {
					if p, ok := a.profileOf(h, g, d); ok {
						fixed[i] = append(fixed[i], p)
					}
				}
				continue
			}
			if listed[0] == i {
				vms = append(vms, &splitVM{name: name, listed: listed, devs: vm.DeviceProfiles()})
			}
		}
	}
	slices.SortFunc(vms, func(x, y *splitVM) int { return strings.Compare(x.name, y.name) })
	var open []*splitVM
	for _, v := range vms {
		if !a.candidates(h, fixed, v) {
			hs.tooMany = true
		}
		if len(v.cands) == 0 && !hs.tooMany {
			hs.none[v.name] = true
			continue
		}
		open = append(open, v)
	}
	if !hs.tooMany {
		hs.splits, hs.tooMany = a.combine(h, fixed, open)
	}
	if len(hs.splits) == 0 {
		for _, v := range open {
			hs.none[v.name] = true
		}
		hs.splits = []split{{}}
	}
	for _, v := range open {
		for _, s := range hs.splits[1:] {
			if !slices.EqualFunc(s[v.name], hs.splits[0][v.name], slices.Equal) {
				hs.unknown = append(hs.unknown, v.name)
				break
			}
		}
	}
	if hs.tooMany {
		hs.unknown = nil
		for _, v := range vms {
			hs.unknown = append(hs.unknown, v.name)
		}
	}
	return hs
}

// listedOn are the indexes of h's GPUs whose report lists the VM.
func (a *analysis) listedOn(h *inventory.Host, name string) []int {
	var listed []int
	for i, g := range h.GPUs {
		if slices.Contains(g.VMs, name) {
			listed = append(listed, i)
		}
	}
	return listed
}

// profileOf is the profile a vGPU of the named type is counted at on GPU g of h; false
// when its frame buffer is unknown (add takes the GPU whole for it).
func (a *analysis) profileOf(h *inventory.Host, g inventory.GPU, name string) (inventory.Profile, bool) {
	if p, ok := offerOf(h, name); ok {
		return p, true
	}
	fb, err := inventory.ProfileFrameBufferMiB(name)
	return inventory.Profile{Name: name, FrameBufferMiB: fb}, err == nil && name != ""
}

// candidates fills v.cands with the distinct assignments of v's devices to its listed
// GPUs that give each at least one and fit next to the VMs of known split; false when
// there are too many assignments to try.
func (a *analysis) candidates(h *inventory.Host, fixed [][]inventory.Profile, v *splitVM) bool {
	k, n := len(v.listed), len(v.devs)
	if k > n {
		return true // more GPUs than devices: no split; none
	}
	total := 1
	for range n {
		if total *= k; total > maxDeviceAssignments {
			return false
		}
	}
	seen := map[string]bool{}
	choice := make([]int, n)
	for range total {
		s := make([][]string, len(h.GPUs))
		for d, c := range choice {
			s[v.listed[c]] = append(s[v.listed[c]], v.devs[d])
		}
		for _, i := range v.listed {
			slices.Sort(s[i])
		}
		if key := fmt.Sprint(s); !seen[key] {
			seen[key] = true
			if a.validSplit(h, fixed, v.listed, s) {
				v.cands = append(v.cands, split{v.name: s})
			}
		}
		for j := n - 1; j >= 0; j-- { // next choice, as a counter in base k
			if choice[j]++; choice[j] < k {
				break
			}
			choice[j] = 0
		}
	}
	return true
}

// validSplit tells whether devices s (per GPU) can run on the GPUs listed next to what
// runs there already (occ): each listed GPU holds one at least, of its board, and the
// GPU's vGPUs together are valid under its mode.
func (a *analysis) validSplit(h *inventory.Host, occ [][]inventory.Profile, listed []int, s [][]string) bool {
	for _, i := range listed {
		if len(s[i]) == 0 {
			return false
		}
		ps := slices.Clone(occ[i])
		for _, d := range s[i] {
			p, ok := a.profileOf(h, h.GPUs[i], d)
			if !ok || h.RunsOn(i, d) == inventory.OtherBoard {
				return false
			}
			ps = append(ps, p)
		}
		if !inventory.CanRun(h.GPUs[i], ps) {
			return false
		}
	}
	return true
}

// combine is the product of the VMs' candidate splits, keeping those in which every
// GPU's vGPUs are valid together; true when there are more than maxSplits.
func (a *analysis) combine(h *inventory.Host, fixed [][]inventory.Profile, vms []*splitVM) ([]split, bool) {
	var out []split
	cur := split{}
	var rec func(j int, occ [][]inventory.Profile) bool
	rec = func(j int, occ [][]inventory.Profile) bool {
		if j == len(vms) {
			s := split{}
			for k, v := range cur {
				s[k] = v
			}
			out = append(out, s)
			return len(out) <= maxSplits
		}
		v := vms[j]
		for _, c := range v.cands {
			at := c[v.name]
			if !a.validSplit(h, occ, v.listed, at) {
				continue
			}
			next := slices.Clone(occ)
			for _, i := range v.listed {
				next[i] = slices.Clone(occ[i])
				for _, d := range at[i] {
					p, _ := a.profileOf(h, h.GPUs[i], d)
					next[i] = append(next[i], p)
				}
			}
			cur[v.name] = at
			if !rec(j+1, next) {
				return false
			}
		}
		delete(cur, v.name)
		return true
	}
	if !rec(0, fixed) {
		return out[:maxSplits], true
	}
	return out, false
}
