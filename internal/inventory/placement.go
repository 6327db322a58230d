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
//   - Mixed-size: time-sliced vGPUs of different sizes share the GPU. NVIDIA places each
//     vGPU at a placement ID: the GPU's frame buffer is a placement region of one slot
//     per GB, a vGPU occupies as many consecutive slots as its placement size, and it
//     starts only at one of the placement IDs NVIDIA's table for the GPU's frame buffer
//     lists for its size (mixedtables.go: the vGPU user guide's "vGPU Placements for
//     GPUs in Mixed-Size Mode"). On a 48 GB GPU a 16 GiB vGPU starts at 0 or 32 only, so
//     at most two run there although three fit its frame buffer; an 8 GiB vGPU at 0,
//     16, 24 or 40. Those lists, not the alignment of the slots, are why NVIDIA's
//     maximums in mixed-size mode are lower than in equal-size mode for some sizes. A
//     size the table does not list does not run in mixed-size mode; on a GPU whose frame
//     buffer has no table gpupool counts one vGPU at most, alone (every table starts
//     every size at ID 0). Only time-sliced types mix (not MIG-backed ones), and only
//     within a family: NVIDIA's heterogeneous mode mixes A-, B- and Q-series graphics
//     vGPUs; C-series (compute) vGPUs mix only with C-series.
//
// Which GPUs run a profile at all (its board) is the host's business: see Host.RunsOn
// and Fits.
type Occupancy struct {
	Profile string
	UsedMiB int64
	Count   int
	// Slots are the GPU's placement slots in mixed-size mode (one per GB of its
	// placement region), true where a vGPU sits; nil until a vGPU is placed on a
	// mixed-size GPU.
	Slots []bool
	// Family is the series family of the vGPUs on a mixed-size GPU ("graphics" or
	// "compute").
	Family string
	// VMs is how many VMs have a vGPU on the GPU: what vSphere's placement policies
	// compare (a VM with two vGPUs there counts once). Callers that add a VM's vGPUs
	// count it; Add and Full keep it.
	VMs int
	// Sizes are the placement sizes (in slots) of the vGPUs on a mixed-size GPU, for
	// the worst-case fit (see fitsWherever); a vGPU that takes the GPU alone counts as
	// the whole region. A vGPU whose placement is known (AddAt) is in Pinned instead.
	Sizes []int
	// Pinned are the slots of the vGPUs whose placement ID is known (AddAt: a
	// placement world's running vGPUs, PlacementWorlds); nil when there are none.
	Pinned []bool
}

// MaxVGPUsPerGPU caps the vGPUs of one GPU in any mode: "The maximum vGPUs per GPU is
// limited to 32" (NVIDIA vGPU user guide 17.0, footnote to the A.1 tables, such as
// A40-1Q's 32 in equal-size mode although 48 fit its frame buffer).
const MaxVGPUsPerGPU = 32

// PerGPU is how many vGPUs of fbMiB a GPU of memMiB runs in same-size mode.
func PerGPU(memMiB, fbMiB int64) int {
	if fbMiB <= 0 {
		return 0
	}
	return min(int(memMiB/fbMiB), MaxVGPUsPerGPU)
}

// Fits tells whether one more vGPU of profile p fits a GPU of memMiB with occupancy o,
// under the same-size rule, the frame-buffer limit and MaxVGPUsPerGPU.
func (o Occupancy) Fits(p Profile, memMiB int64) bool {
	if (o.Count > 0 && o.Profile != p.Name) || o.Count >= MaxVGPUsPerGPU {
		return false
	}
	return o.UsedMiB+p.FrameBufferMiB <= memMiB
}

// FitsOn tells whether one more vGPU of p fits GPU g with occupancy o, under g's mode.
// It does not ask whether g is of p's board: Fits does.
func (o Occupancy) FitsOn(p Profile, g GPU) bool {
	if !g.Mixed() {
		return o.Fits(p, g.MemoryMiB)
	}
	return o.placement(p, g) >= 0
}

// Fits tells whether vSphere can start one more vGPU of p on the i-th GPU of h, with
// occupancy occ[i]: the GPU runs p's board (RunsOn; Unsure counts as no) and p fits it
// under its mode.
func Fits(h *Host, occ []Occupancy, i int, p Profile) bool {
	return h.RunsOn(i, p.Name) == Runs && occ[i].FitsOn(p, h.GPUs[i])
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
	n.Pinned = o.Pinned // never written in place: AddAt clones it
	n.Family = Family(p.Name)
	at, size := o.placement(p, g), placementSize(p, g)
	n.Sizes = append(slices.Clip(o.Sizes), size)
	if at < 0 || at+size > len(n.Slots) {
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

// SlotCount is the number of placement slots of a GPU in mixed-size mode: the region of
// its placement table, else its frame buffer in GiB.
func SlotCount(g GPU) int { return slotCount(g) }

func (o Occupancy) slots(g GPU) []bool {
	if o.Slots != nil {
		return slices.Clone(o.Slots)
	}
	return make([]bool, slotCount(g))
}

// placement is the lowest placement ID of mixed-size GPU g at which a vGPU of p can
// start, or -1.
func (o Occupancy) placement(p Profile, g GPU) int {
	if IsMIG(p.Name) || (o.Count > 0 && o.Family != Family(p.Name)) || o.Count >= MaxVGPUsPerGPU {
		return -1
	}
	if o.UsedMiB+p.FrameBufferMiB > g.MemoryMiB {
		return -1
	}
	t := placementTableOf(g)
	if t == nil {
		// No table for this frame buffer: one vGPU, alone, at ID 0.
		if o.Count == 0 {
			return 0
		}
		return -1
	}
	r := t.row(p.FrameBufferMiB)
	if r == nil || !o.fitsWherever(t, r) {
		return -1
	}
	slots := o.slots(g)
	for _, at := range r.ids {
		if at+r.size <= len(slots) && !slices.Contains(slots[at:at+r.size], true) {
			return at
		}
	}
	return -1
}

// fitsWherever tells whether a vGPU of row r fits a mixed-size GPU of table t wherever
// the vGPUs already there sit. vSphere reports which VMs run on a GPU
// (graphicsInfo[].vm) but not their placement IDs, and NVIDIA's vGPU manager places a
// vGPU when it starts, so after VMs come and go the running vGPUs may sit at any of
// their IDs: 4 GiB vGPUs at 4 and 12 of a 16 GB GPU leave no place for an 8 GiB one,
// although packed from 0 they would. So a vGPU is counted to fit only if its placement
// IDs outnumber those the running vGPUs can block in the worst case (each blocks at most
// hits of them, over the IDs it may sit at). This can refuse a layout vSphere would
// take (the differential test counts that as the known "placementUnknown" strictness);
// it never orders a power-on NVIDIA's placement can refuse for lack of a free ID.
func (o Occupancy) fitsWherever(t *placementTable, r *placementRow) bool {
	free := len(r.ids)
	for _, s := range o.Sizes {
		rs := t.bySize(s)
		if rs == nil {
			return false // a vGPU outside the table blocks everything
		}
		free -= hits(t, rs, r)
	}
	return free >= 1
}

// hits is how many of the placement IDs of row s a vGPU of row r can block at worst,
// over the IDs it may sit at.
func hits(t *placementTable, r, s *placementRow) int {
	key := hitKey{t, r.size, s.size}
	if v, ok := hitCache.Load(key); ok {
		return v.(int)
	}
	worst := 0
	for _, a := range r.ids {
		n := 0
		for _, b := range s.ids {
			if b < a+r.size && a < b+s.size {
				n++
			}
		}
		worst = max(worst, n)
	}
	hitCache.Store(key, worst)
	return worst
}

type hitKey struct {
	t    *placementTable
	r, s int
}

var hitCache sync.Map

func slotCount(g GPU) int {
	if t := placementTableOf(g); t != nil {
		return t.region
	}
	return max(int(g.MemoryMiB/1024), 1)
}

// placementSize is how many placement slots a vGPU of p takes on mixed-size GPU g: its
// table's placement size, or the whole GPU when the table does not list it or there is
// no table (such a vGPU runs alone).
func placementSize(p Profile, g GPU) int {
	if t := placementTableOf(g); t != nil {
		if r := t.row(p.FrameBufferMiB); r != nil {
			return r.size
		}
	}
	return slotCount(g)
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
	// board is the board word of the name (l4 in grid_l4-16c); known tells whether
	// gpupool knows that board (ProfileBoard).
	board string
	known bool
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
	_, k.known = ProfileBoard(profile)
	if k.known {
		k.board = ProfileBoardToken(profile)
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
// id. Compatible is Fits: a GPU of p's board, under its own mode. It returns -1
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
		if !Fits(h, occ, i, p) {
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
