package vgpusim

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/vmware/govmomi/vim25/types"
)

// This file is the simulator's own model of where vSphere and NVIDIA's vGPU manager start
// a vGPU. It deliberately shares no code with the planner (internal/inventory.Place,
// internal/plan): it is a second opinion written from the vendors' documentation, so that
// tests against the simulator can catch a wrong placement model in the planner.
//
// Sources:
//   - vSphere API, HostGraphicsConfig.sharedPassthruAssignmentPolicy: "performance" spreads
//     vGPUs over the physical GPUs (best performance), "consolidation" groups them on one
//     GPU until it is full (GPU consolidation).
//   - vSphere API 8.0.3.0, HostGraphicsInfo.vgpuMode / HostGraphicsConfig.DeviceType.vgpuMode:
//     "sameSize" (vGPU time-sliced same size) and "mixedSize" (vGPU time-sliced mixed size).
//   - NVIDIA vGPU software user guide: in same-size (equal-size) mode a GPU runs vGPUs of
//     one type only, the type of the first vGPU started on it; in mixed-size mode it runs
//     time-sliced vGPUs of different frame buffer sizes of the same series, "the maximum
//     number of some types of vGPU allowed on a GPU is less than when the GPU is in
//     equal-size mode", and each vGPU sits at a placement ID: NVML's
//     nvmlVgpuPlacementList_t gives a type's placementSize ("the number of slots occupied
//     by the vGPU type") and the placement IDs where it may start.
//   - NVIDIA AI Enterprise, Multi-vGPU: one VM may have several vGPUs "with differing
//     amounts of frame buffer ... provided the board type and the series of all the vGPUs
//     are the same"; they may sit on one physical GPU or on several.
//   - The board rule, NVIDIA's mixed-size placement-ID tables and the 32-vGPU cap:
//     boards.go.

// vGPU modes, as vSphere names them.
const (
	modeSameSize  = string(types.HostGraphicsInfoVgpuModeSameSize)
	modeMixedSize = string(types.HostGraphicsInfoVgpuModeMixedSize)
)

// slotMiB is the size of one placement slot. NVIDIA's smallest time-sliced types (0B, 0Q)
// have 512 MiB of frame buffer, so every type's frame buffer is a whole number of slots.
const slotMiB = 512

// gpuState is one physical GPU and the vGPUs running on it.
type gpuState struct {
	pciID  string
	device string
	memMiB int64
	mode   string
	vgpus  []placed
}

// placed is one running vGPU: the VM and device it belongs to, and the placement slots
// it occupies on its GPU, [start, start+slots).
type placed struct {
	vm      types.ManagedObjectReference
	key     int32
	profile Profile
	start   int
	slots   int
}

// request is one vGPU device of a VM that must be placed at power-on.
type request struct {
	key     int32
	profile Profile
	// at is the placement ID (GB) the history leaves for it (VM.Placements), -1 for
	// none: it starts at the lowest free listed ID at or above at, else the lowest.
	at int
}

// assignment is where one request landed: the index of the GPU and the first slot.
type assignment struct {
	gpu, start int
}

func (g *gpuState) slots() int { return int(g.memMiB / slotMiB) }

func (g *gpuState) usedMiB() int64 {
	var n int64
	for _, v := range g.vgpus {
		n += v.profile.frameBufferMiB()
	}
	return n
}

// fit returns the first slot at which a vGPU of p can start on g, or -1 and the rule
// that refuses it.
func (g *gpuState) fit(p Profile) (int, string) { return g.fitAt(p, -1) }

// fitAt is fit with a history's placement hint (request.at) for mixed-size GPUs.
func (g *gpuState) fitAt(p Profile, at int) (int, string) {
	size := int(p.frameBufferMiB() / slotMiB)
	if why := g.boardRefuses(p); why != "" {
		return -1, why
	}
	if len(g.vgpus) >= maxVGPUsPerGPU {
		return -1, fmt.Sprintf("GPU %s runs %d vGPUs, NVIDIA's maximum per GPU (vGPU limit)", g.pciID, len(g.vgpus))
	}
	if g.mode == modeMixedSize {
		return g.fitMixed(p, size, at)
	}
	// Same-size mode: the first vGPU decides the GPU's type; then frame buffer counts.
	for _, v := range g.vgpus {
		if v.profile.Name != p.Name {
			return -1, fmt.Sprintf("GPU %s runs %s vGPU(s) and the same-size rule allows only one profile per GPU", g.pciID, v.profile.Name)
		}
	}
	if g.usedMiB()+p.frameBufferMiB() > g.memMiB {
		return -1, fmt.Sprintf("GPU %s has %d MiB of %d MiB frame buffer free, %s needs %d MiB (frame-buffer rule)",
			g.pciID, g.memMiB-g.usedMiB(), g.memMiB, p.Name, p.frameBufferMiB())
	}
	return len(g.vgpus) * size, ""
}

// fitMixed places in mixed-size mode: same board and series family as what runs, under the
// type's mixed-size maximum, at the lowest free placement ID NVIDIA's table for the GPU's
// frame buffer lists for the type's size (boards.go), or, on a GPU without a table, at
// the lowest free placement aligned to the type's size.
func (g *gpuState) fitMixed(p Profile, size, at int) (int, string) {
	count := 0
	for _, v := range g.vgpus {
		if !mixable(v.profile.Name, p.Name) {
			return -1, fmt.Sprintf("GPU %s runs %s and the mixed-size rule lets only vGPUs of the same board and series family (A/B/Q, or C) share a GPU", g.pciID, v.profile.Name)
		}
		if v.profile.Name == p.Name {
			count++
		}
	}
	if p.MixedSizeMax > 0 && count >= p.MixedSizeMax {
		return -1, fmt.Sprintf("GPU %s runs %d %s vGPU(s), the maximum in mixed-size mode (mixed-size maximum)", g.pciID, count, p.Name)
	}
	taken := make([]bool, g.slots())
	for _, v := range g.vgpus {
		for s := v.start; s < v.start+v.slots && s < len(taken); s++ {
			taken[s] = true
		}
	}
	ids, table := g.placementIDs(p.frameBufferMiB())
	if table && ids == nil {
		return -1, fmt.Sprintf("NVIDIA's placements for GPUs with %d GB of frame buffer list no vGPU of %d MiB, such as %s, in mixed-size mode (placement table)",
			g.memMiB/1024, p.frameBufferMiB(), p.Name)
	}
	if table {
		perGB := 1024 / slotMiB
		for _, from := range []int{max(at, 0), 0} { // the history's ID or above, then any
			for _, id := range ids {
				if start := id * perGB; id >= from && start+size <= len(taken) && free(taken[start:start+size]) {
					return start, ""
				}
			}
		}
		return -1, fmt.Sprintf("GPU %s has no free placement ID of NVIDIA's table for %d GB GPUs for %s (placement rule)",
			g.pciID, g.memMiB/1024, p.Name)
	}
	for start := 0; start+size <= len(taken); start += size {
		if free(taken[start : start+size]) {
			return start, ""
		}
	}
	return -1, fmt.Sprintf("GPU %s has no free placement of %d slot(s) aligned to its size for %s (placement rule)",
		g.pciID, size, p.Name)
}

func free(slots []bool) bool {
	for _, t := range slots {
		if t {
			return false
		}
	}
	return true
}

// seriesRE splits an NVIDIA time-sliced type name into board and series letter:
// grid_p100-4q is board p100, series q.
var seriesRE = regexp.MustCompile(`^(?:grid|nvidia)_([a-z0-9]+)-[0-9-]*([a-z]+)$`)

// sameSeries tells whether two types share board and series, as the vGPUs of one VM
// must (NVIDIA, Multi-vGPU); unparsable names only match themselves.
func sameSeries(a, b string) bool {
	ma, mb := seriesRE.FindStringSubmatch(a), seriesRE.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return a == b
	}
	return ma[1] == mb[1] && ma[2] == mb[2]
}

// mixable tells whether two types may share a GPU in mixed-size mode: the same board,
// and series that mix. NVIDIA's vGPU deployment guide ("Selecting the Correct vGPU
// Profiles", vGPU 17 and later): "a mixture of A-series, B-series, and Q-series vGPUs
// with varying amounts of frame buffer can coexist on the same GPU"; C-series (NVIDIA AI
// Enterprise compute) types are not in that mixture, so they share a GPU only with
// C-series. Unparsable names only match themselves.
//
// Note: this was first sameSeries (4B never next to 4Q); the differential test found
// the planner's A/B/Q mix, and the guide sides with the planner.
func mixable(a, b string) bool {
	ma, mb := seriesRE.FindStringSubmatch(a), seriesRE.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return a == b
	}
	return ma[1] == mb[1] && seriesFamily(ma[2]) == seriesFamily(mb[2])
}

// seriesFamily groups the series that mix on one GPU: A, B and Q; C alone.
func seriesFamily(series string) string {
	switch series {
	case "a", "b", "q":
		return "graphics"
	}
	return series
}

// choose picks the GPU for a vGPU of p following the host's policy, among the GPUs that
// can take it. The vSphere API (HostGraphicsConfigSharedPassthruAssignmentPolicy) says
// "performance: assign VM to GPU with fewest VMs" and "consolidation: group like VMs on
// GPU until fully loaded": so performance takes the GPU running the fewest VMs,
// consolidation the one running the most (a VM with two vGPUs there counts once).
// vSphere documents no tie-break: ESXi lists GPUs by PCI address, and the first one
// wins. It returns the GPU's index and start slot, or -1 with each GPU's reason.
//
// Note: this compared the frame buffer in use first; the differential test found the
// planner's count of VMs disagreeing on mixed-size GPUs, and the API text sides with
// counting VMs.
func choose(policy string, gpus []*gpuState, r request) (assignment, []string) {
	p := r.profile
	order := make([]int, len(gpus))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return gpus[order[a]].pciID < gpus[order[b]].pciID })
	best := assignment{gpu: -1}
	var reasons []string
	for _, i := range order {
		start, why := gpus[i].fitAt(p, r.at)
		if start < 0 {
			reasons = append(reasons, why)
			continue
		}
		if best.gpu < 0 || better(policy, len(gpus[i].vmsOn()), len(gpus[best.gpu].vmsOn())) {
			best = assignment{gpu: i, start: start}
		}
	}
	return best, reasons
}

func better(policy string, vms, bestVMs int) bool {
	if policy == "consolidation" {
		return vms > bestVMs
	}
	return vms < bestVMs
}

// placeAll places every vGPU of a VM, in device order, each seeing the ones before it.
// It is all or nothing, as a power-on is: on failure nothing is placed and the reasons
// say why the failing vGPU fits no GPU.
func placeAll(policy string, gpus []*gpuState, vm types.ManagedObjectReference, reqs []request) ([]assignment, []string) {
	var done []assignment
	for _, r := range reqs {
		a, reasons := choose(policy, gpus, r)
		if a.gpu < 0 {
			for _, d := range done {
				gpus[d.gpu].vgpus = gpus[d.gpu].vgpus[:len(gpus[d.gpu].vgpus)-1]
			}
			if len(gpus) == 0 {
				reasons = []string{"the host has no physical GPU"}
			}
			return nil, reasons
		}
		g := gpus[a.gpu]
		g.vgpus = append(g.vgpus, placed{vm: vm, key: r.key, profile: r.profile, start: a.start,
			slots: int(r.profile.frameBufferMiB() / slotMiB)})
		done = append(done, a)
	}
	return done, nil
}

// release removes the VM's vGPUs from every GPU; it reports whether it held any.
func release(gpus []*gpuState, vm types.ManagedObjectReference) bool {
	held := false
	for _, g := range gpus {
		kept := g.vgpus[:0:0]
		for _, v := range g.vgpus {
			if v.vm == vm {
				held = true
				continue
			}
			kept = append(kept, v)
		}
		g.vgpus = kept
	}
	return held
}

// vmsOn lists the VMs with a vGPU on g, each once, in the order they started.
func (g *gpuState) vmsOn() []types.ManagedObjectReference {
	var out []types.ManagedObjectReference
	seen := map[types.ManagedObjectReference]bool{}
	for _, v := range g.vgpus {
		if !seen[v.vm] {
			seen[v.vm] = true
			out = append(out, v.vm)
		}
	}
	return out
}

// describe is a GPU's occupancy for messages: "0000:3b:00.0: 2x grid_p100-4q".
func (g *gpuState) describe() string {
	counts := map[string]int{}
	var names []string
	for _, v := range g.vgpus {
		if counts[v.profile.Name] == 0 {
			names = append(names, v.profile.Name)
		}
		counts[v.profile.Name]++
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%dx %s", counts[n], n))
	}
	if len(parts) == 0 {
		return g.pciID + ": idle"
	}
	return g.pciID + ": " + strings.Join(parts, ", ")
}
