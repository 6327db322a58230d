package inventory

import (
	"slices"
	"sort"
	"sync"
)

// Occupancy is what runs on a GPU: the profile of its first vGPU, how much frame buffer
// is used and how many vGPUs run. On a GPU in mixed-size mode, Slots also says which
// placement slots are taken.
//
// The models, per GPU mode:
//
//   - Same-size (NVIDIA's equal-size mode, the default, and every GPU of a host before
//     vSphere 8.0.3): one profile per GPU, up to its frame buffer.
//   - Mixed-size: time-sliced vGPUs of different sizes share the GPU. NVIDIA's vGPU
//     user guide ("Placement IDs", vGPU 17 and later; vSphere 8.0 U3 exposes the mode)
//     places each vGPU at a placement ID: the GPU's frame buffer is cut into slots, a
//     vGPU occupies as many consecutive slots as its size (NVML's placementSize) and
//     starts only at a placement ID that is a multiple of that size
//     (nvmlDeviceGetVgpuTypeSupportedPlacements). gpupool models a slot as 1 GiB, so
//     a 4Q vGPU starts at 0, 4, 8 or 12 of a 16 GiB GPU and an 8Q at 0 or 8: two 4Q and
//     one 8Q fit, but an 8Q next to 4Q vGPUs at 0 and 8 does not, although 8 GiB are
//     free. This alignment is why NVIDIA's tables give lower maximums in mixed-size mode
//     for some sizes. Only time-sliced types mix (not MIG-backed ones), and only within
//     a family: NVIDIA's heterogeneous mode mixes A-, B- and Q-series graphics vGPUs;
//     C-series (compute) vGPUs mix only with C-series.
type Occupancy struct {
	Profile string
	UsedMiB int64
	Count   int
	// Slots are the GPU's 1 GiB placement slots in mixed-size mode, true where a vGPU
	// sits; nil until a vGPU is placed on a mixed-size GPU.
	Slots []bool
	// Family is the series family of the vGPUs on a mixed-size GPU ("graphics" or
	// "compute").
	Family string
	// VMs is how many VMs have a vGPU on the GPU: what vSphere's placement policies
	// compare (a VM with two vGPUs there counts once). Callers that add a VM's vGPUs
	// count it; Add and Full keep it.
	VMs int
	// Sizes are the placement sizes (in slots) of the vGPUs on a mixed-size GPU, for
	// the worst-case fit (see placement).
	Sizes []int
}

// slotMiB is the placement slot of the mixed-size model.
const slotMiB = 1024

// Fits tells whether one more vGPU of profile p fits a GPU of memMiB with occupancy o,
// under the same-size rule and the frame-buffer limit.
func (o Occupancy) Fits(p Profile, memMiB int64) bool {
	if o.Count > 0 && o.Profile != p.Name {
		return false
	}
	return o.UsedMiB+p.FrameBufferMiB <= memMiB
}

// FitsOn tells whether one more vGPU of p fits GPU g with occupancy o, under g's mode.
func (o Occupancy) FitsOn(p Profile, g GPU) bool {
	if !g.Mixed() {
		return o.Fits(p, g.MemoryMiB)
	}
	return o.placement(p, g) >= 0
}

// Add returns o with one more vGPU of p on g; on a mixed-size GPU at the lowest free
// placement ID that fits it (the caller checked FitsOn). Occupancy is a value: the
// result shares no slots with o.
func (o Occupancy) Add(p Profile, g GPU) Occupancy {
	n := Occupancy{Profile: o.Profile, UsedMiB: o.UsedMiB + p.FrameBufferMiB, Count: o.Count + 1, Family: o.Family, VMs: o.VMs}
	if n.Profile == "" {
		n.Profile = p.Name
	}
	if !g.Mixed() {
		n.Profile = p.Name
		if o.Count > 0 {
			n.Profile = o.Profile
		}
		return n
	}
	n.Slots = o.slots(g)
	n.Family = Family(p.Name)
	at, size := o.placement(p, g), SlotsOf(p)
	n.Sizes = append(slices.Clip(o.Sizes), size)
	if at < 0 {
		// Note: a vGPU that does not fit (an observed over-commit, an unknown profile)
		// takes every slot left, so nothing more is placed next to it.
		for i := range n.Slots {
			n.Slots[i] = true
		}
		return n
	}
	for i := at; i < at+size; i++ {
		n.Slots[i] = true
	}
	return n
}

// Full returns o with g taken whole, for a vGPU whose profile is unknown.
func (o Occupancy) Full(g GPU) Occupancy {
	n := Occupancy{Profile: o.Profile, UsedMiB: g.MemoryMiB, Count: o.Count + 1, Family: "unknown", VMs: o.VMs}
	if g.Mixed() {
		n.Slots = make([]bool, slotCount(g))
		for i := range n.Slots {
			n.Slots[i] = true
		}
	}
	return n
}

// FreeSlots is the number of free placement slots of a mixed-size GPU.
func (o Occupancy) FreeSlots(g GPU) int {
	n := 0
	for _, taken := range o.slots(g) {
		if !taken {
			n++
		}
	}
	return n
}

func (o Occupancy) slots(g GPU) []bool {
	if o.Slots != nil {
		return slices.Clone(o.Slots)
	}
	return make([]bool, slotCount(g))
}

// placement is the lowest placement ID of mixed-size GPU g at which a vGPU of p can
// start, or -1.
func (o Occupancy) placement(p Profile, g GPU) int {
	if IsMIG(p.Name) || (o.Count > 0 && o.Family != Family(p.Name)) {
		return -1
	}
	if o.UsedMiB+p.FrameBufferMiB > g.MemoryMiB {
		return -1
	}
	slots, size := o.slots(g), SlotsOf(p)
	if !o.fitsWherever(size, len(slots)) {
		return -1
	}
	for at := 0; at+size <= len(slots); at += size {
		if !slices.Contains(slots[at:at+size], true) {
			return at
		}
	}
	return -1
}

// fitsWherever tells whether a vGPU of size slots fits a mixed-size GPU of n slots
// wherever the vGPUs already there sit. vSphere reports which VMs run on a GPU
// (graphicsInfo[].vm) but not their placement IDs, and NVIDIA's vGPU manager starts a
// vGPU at the lowest free placement ID *when* it starts, so after VMs come and go the
// running vGPUs may sit anywhere on their grid: 4Q vGPUs at 4 and 12 of a 16 GiB GPU
// leave no place for an 8Q, although packed from 0 they would. So a vGPU of size s is
// counted to fit only if the s-aligned places (n/s of them) outnumber those the running
// vGPUs can cover in the worst case (each of size r covers at most hits(r, s, n)). This
// can refuse a layout vSphere would take (the differential test counts that as the
// known "placementUnknown" strictness); it never orders a power-on NVIDIA's placement can
// refuse for lack of an aligned place.
func (o Occupancy) fitsWherever(size, n int) bool {
	free := n / size
	for _, r := range o.Sizes {
		free -= hits(r, size, n)
	}
	return free >= 1
}

// hits is how many of the s-aligned places of a GPU of n slots one vGPU of r slots can
// overlap at worst, over the r-aligned placement IDs it may start at.
func hits(r, s, n int) int {
	worst := 0
	for at := 0; at+r <= n; at += r {
		first, last := at/s, min((at+r-1)/s, n/s-1)
		worst = max(worst, last-first+1)
	}
	return worst
}

func slotCount(g GPU) int { return int(g.MemoryMiB / slotMiB) }

// SlotsOf is how many placement slots a vGPU of p takes in mixed-size mode (its frame
// buffer in GiB, at least one).
func SlotsOf(p Profile) int {
	return max(int((p.FrameBufferMiB+slotMiB-1)/slotMiB), 1)
}

// IsMIG tells whether the profile is MIG-backed (nvidia_a100-3-20c): such vGPUs never
// share a GPU in mixed-size mode.
func IsMIG(profile string) bool { return kindOf(profile).mig }

// Family is the series family a profile mixes with in mixed-size mode: "graphics" for
// A-, B- and Q-series, "compute" for C-series, "" for names that are not NVIDIA types.
func Family(profile string) string { return kindOf(profile).family }

type profileKind struct {
	mig    bool
	family string
}

// kinds caches kindOf: the placement search asks for the same few names many times,
// and the name's regular expression dominated it.
var kinds sync.Map

func kindOf(profile string) profileKind {
	if k, ok := kinds.Load(profile); ok {
		return k.(profileKind)
	}
	var k profileKind
	if m := profileRE.FindStringSubmatch(profile); m != nil {
		k.mig = m[2] != ""
		k.family = "graphics"
		if m[6] == "c" || m[4] != "" {
			k.family = "compute"
		}
	}
	if len(profile) <= 64 {
		kinds.Store(profile, k)
	}
	return k
}

// Place chooses the GPU of h on which vSphere would start a vGPU of profile p, given the
// occupancy of each GPU (indexed like h.GPUs), following h.Policy. The vSphere API
// (HostGraphicsConfigSharedPassthruAssignmentPolicy): "performance: assign VM to GPU with
// fewest VMs", "consolidation: group like VMs on GPU until fully loaded"; so performance
// picks the compatible GPU running the fewest VMs, consolidation the one running the
// most (Occupancy.VMs; a VM with two vGPUs there counts once). Ties go to the lowest PCI
// id. Compatible is FitsOn: each GPU's own mode. It returns -1
// when no GPU can take it, which is when vCenter fails the power-on for insufficient
// resources.
func Place(h *Host, occ []Occupancy, p Profile) int {
	idx := make([]int, len(h.GPUs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return h.GPUs[idx[a]].PCIID < h.GPUs[idx[b]].PCIID })
	best := -1
	for _, i := range idx {
		if !occ[i].FitsOn(p, h.GPUs[i]) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		if h.Policy == PolicyConsolidation {
			if occ[i].vms() > occ[best].vms() {
				best = i
			}
		} else if occ[i].vms() < occ[best].vms() {
			best = i
		}
	}
	return best
}

// vms is VMs, or Count for an occupancy built without counting VMs (one VM per vGPU).
func (o Occupancy) vms() int {
	if o.VMs == 0 {
		return o.Count
	}
	return o.VMs
}
