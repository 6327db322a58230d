package inventory

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func gib(n int64) Profile {
	return Profile{Name: "grid_l40-" + itoa(n) + "q", FrameBufferMiB: n * 1024}
}

func itoa(n int64) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestMixedSizePlacement: vGPUs of several sizes share a GPU in mixed-size mode, each at
// a placement ID of NVIDIA's table (on 16 GB, every multiple of its size); same-size mode
// keeps one profile.
func TestMixedSizePlacement(t *testing.T) {
	mixed := GPU{PCIID: "0000:3b:00.0", MemoryMiB: 16 * 1024, Mode: ModeMixedSize}
	same := GPU{PCIID: "0000:3b:00.0", MemoryMiB: 16 * 1024, Mode: ModeSameSize}
	old := GPU{PCIID: "0000:3b:00.0", MemoryMiB: 16 * 1024}
	for _, tc := range []struct {
		name    string
		gpu     GPU
		profile []Profile
		fits    bool
	}{
		{"two 4Q and one 8Q, mixed", mixed, []Profile{gib(8), gib(4), gib(4)}, true},
		{"4Q, 8Q, 4Q in that order, mixed", mixed, []Profile{gib(4), gib(8), gib(4)}, true},
		{"two 4Q and one 8Q, same-size", same, []Profile{gib(8), gib(4), gib(4)}, false},
		{"two 4Q and one 8Q, mode not reported", old, []Profile{gib(4), gib(4), gib(8)}, false},
		{"four 4Q, same-size", same, []Profile{gib(4), gib(4), gib(4), gib(4)}, true},
		{"16Q after a 4Q, mixed", mixed, []Profile{gib(4), gib(16)}, false},
		{"8Q, 4Q, 8Q: the second 8Q has no aligned placement", mixed, []Profile{gib(8), gib(4), gib(8)}, false},
		{"Q next to B-series, mixed", mixed, []Profile{gib(8), {Name: "grid_l40-4b", FrameBufferMiB: 4096}}, true},
		{"Q next to C-series, mixed", mixed, []Profile{gib(8), {Name: "grid_l40-4c", FrameBufferMiB: 4096}}, false},
		{"MIG-backed, mixed", mixed, []Profile{{Name: "nvidia_a100-3-20c", FrameBufferMiB: 4096}}, false},
		{"1 GiB more than the GPU, mixed", mixed, []Profile{gib(16), gib(1)}, false},
		// vSphere does not report placement IDs: two 4Q may sit at 4 and 12.
		{"4Q, 4Q, then 8Q: the 4Qs may sit in both halves", mixed, []Profile{gib(4), gib(4), gib(8)}, false},
		{"1Q, 1Q, then 8Q: the same", mixed, []Profile{gib(1), gib(1), gib(8)}, false},
		{"1Q then 8Q: one half stays free wherever it sits", mixed, []Profile{gib(1), gib(8)}, true},
		{"8Q, 2Q, 2Q, 2Q, 2Q: the 8Q covers one half at most", mixed, []Profile{gib(8), gib(2), gib(2), gib(2), gib(2)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Occupancy
			fits := true
			for _, p := range tc.profile {
				if !o.FitsOn(p, tc.gpu) {
					fits = false
					break
				}
				o = o.Add(p, tc.gpu)
			}
			if fits != tc.fits {
				t.Errorf("fits = %v, want %v (occupancy %+v)", fits, tc.fits, o)
			}
		})
	}
}

// TestMixedSizePlacementProperties: whatever is added, vGPUs never overlap, start at a
// placement ID NVIDIA's table lists for their size, and never exceed the frame buffer;
// Add does not change the occupancy it is called on.
func TestMixedSizePlacementProperties(t *testing.T) {
	sizes := []int64{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}
	for seed := uint64(1); seed <= 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		g := GPU{MemoryMiB: []int64{16, 24, 48}[r.IntN(3)] * 1024, Mode: ModeMixedSize}
		var o Occupancy
		var used int64
		owner := make([]int, slotCount(g))
		for k := 1; k <= 20; k++ {
			p := gib(sizes[r.IntN(len(sizes))])
			if !o.FitsOn(p, g) {
				continue
			}
			before := append([]bool(nil), o.Slots...)
			n := o.Add(p, g)
			for i := range before {
				if before[i] != o.Slots[i] {
					t.Fatalf("seed %d: Add changed its receiver", seed)
				}
			}
			at, size := -1, placementSize(p, g)
			for i := range n.Slots {
				if n.Slots[i] && (i >= len(o.Slots) || !o.Slots[i]) {
					if owner[i] != 0 {
						t.Fatalf("seed %d: slot %d taken twice", seed, i)
					}
					owner[i] = k
					if at < 0 {
						at = i
					}
				}
			}
			if r := placementTableOf(g).row(p.FrameBufferMiB); r == nil || !slices.Contains(r.ids, at) || r.size != size {
				t.Fatalf("seed %d: %s placed at %d, size %d, not a placement of NVIDIA's %d GB table", seed, p.Name, at, size, slotCount(g))
			}
			used += p.FrameBufferMiB
			if n.UsedMiB != used || used > g.MemoryMiB {
				t.Fatalf("seed %d: used %d, counted %d, GPU %d", seed, used, n.UsedMiB, g.MemoryMiB)
			}
			o = n
		}
	}
}

// TestPlaceFollowsModeAndPolicy: Place puts a vGPU on a GPU whose mode accepts it.
func TestPlaceFollowsModeAndPolicy(t *testing.T) {
	h := &Host{Policy: PolicyPerformance, GPUs: []GPU{
		{PCIID: "a", MemoryMiB: 16 * 1024, Mode: ModeSameSize},
		{PCIID: "b", MemoryMiB: 16 * 1024, Mode: ModeMixedSize},
	}}
	occ := []Occupancy{{}, {}}
	occ[0] = occ[0].Add(gib(4), h.GPUs[0])
	occ[1] = occ[1].Add(gib(4), h.GPUs[1])
	if got := Place(h, occ, gib(8)); got != 1 {
		t.Errorf("8Q next to 4Q goes to GPU %d, want the mixed-size one (1)", got)
	}
	occ[1] = occ[1].Add(gib(8), h.GPUs[1])
	occ[1] = occ[1].Add(gib(4), h.GPUs[1])
	if got := Place(h, occ, gib(8)); got != -1 {
		t.Errorf("8Q on full GPUs goes to GPU %d, want none", got)
	}
}

func TestHostAvailability(t *testing.T) {
	for _, tc := range []struct {
		h         Host
		why       string
		reachable bool
	}{
		{Host{}, "", true},
		{Host{ConnectionState: Connected}, "", true},
		{Host{InMaintenance: true}, "is in maintenance mode", true},
		{Host{EnteringMaintenance: true}, "is entering maintenance mode", true},
		{Host{ConnectionState: Disconnected, InMaintenance: true}, "is disconnected", false},
		{Host{ConnectionState: NotResponding}, "is not responding", false},
	} {
		if got := tc.h.Unavailable(); got != tc.why {
			t.Errorf("%+v: Unavailable() = %q, want %q", tc.h, got, tc.why)
		}
		if got := tc.h.Reachable(); got != tc.reachable {
			t.Errorf("%+v: Reachable() = %v, want %v", tc.h, got, tc.reachable)
		}
	}
}

func TestVGPUCount(t *testing.T) {
	for _, tc := range []struct {
		vm   VM
		want int
	}{{VM{}, 0}, {VM{VGPUs: 2}, 0}, {VM{Profile: "grid_p100-4q"}, 1}, {VM{Profile: "grid_p100-4q", VGPUs: 3}, 3}} {
		if got := tc.vm.VGPUCount(); got != tc.want {
			t.Errorf("%+v: VGPUCount() = %d, want %d", tc.vm, got, tc.want)
		}
	}
}

// TestMixedSizeFitHoldsWhereverVGPUsSit: the planner's fit must hold whatever placement
// IDs the running vGPUs got (vSphere does not report them; NVIDIA's vGPU manager placing
// vGPUs in an unknown power-on and power-off history can leave them at any of their
// IDs). Random arrangements place each vGPU at a random free placement ID of NVIDIA's
// table; whenever FitsOn says a vGPU fits, the arrangement must have a free ID for it.
// GPUs of 8 GiB have no table: one vGPU, alone.
func TestMixedSizeFitHoldsWhereverVGPUsSit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	sizes := []int64{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24}
	for iter := range 3000 {
		g := GPU{PCIID: "0000:3b:00.0", MemoryMiB: []int64{8, 16, 20, 24, 32, 40, 48, 80}[r.IntN(8)] * 1024, Mode: ModeMixedSize}
		if r.IntN(2) == 0 && g.MemoryMiB == 48*1024 {
			g.Device = "NVIDIA A40" // 48 GB, not Ada: the 30 IDs of 1 GiB vGPUs
		}
		n := slotCount(g)
		taken := make([]bool, n)
		freeAt := func(p Profile) []int {
			tbl := placementTableOf(g)
			if tbl == nil {
				if !slices.Contains(taken, true) {
					return []int{0}
				}
				return nil
			}
			row := tbl.row(p.FrameBufferMiB)
			var out []int
			for _, at := range row.ids {
				if !slices.Contains(taken[at:at+row.size], true) {
					out = append(out, at)
				}
			}
			return out
		}
		var o Occupancy
		for range 1 + r.IntN(10) {
			p := gib(sizes[r.IntN(len(sizes))])
			if !o.FitsOn(p, g) {
				continue
			}
			places := freeAt(p)
			if len(places) == 0 {
				t.Fatalf("iteration %d: FitsOn says %s fits %v on %d GiB, but the GPU has no free placement for it (taken %v)", iter, p.Name, o.Sizes, n, taken)
			}
			at := places[r.IntN(len(places))]
			for i := at; i < at+placementSize(p, g); i++ {
				taken[i] = true
			}
			o = o.Add(p, g)
		}
	}
}

// TestPlaceCountsVMs: vSphere's policies compare VMs per GPU ("assign VM to GPU with
// fewest VMs"), so a VM with two vGPUs on a GPU counts once there.
func TestPlaceCountsVMs(t *testing.T) {
	gpus := []GPU{{PCIID: "a", MemoryMiB: 16 * 1024, Mode: ModeMixedSize}, {PCIID: "b", MemoryMiB: 16 * 1024, Mode: ModeMixedSize}}
	var occ [2]Occupancy
	occ[0] = occ[0].Add(gib(2), gpus[0]).Add(gib(2), gpus[0]) // one VM, two vGPUs
	occ[0].VMs = 1
	occ[1] = occ[1].Add(gib(2), gpus[1])
	occ[1].VMs = 1
	occ[1] = occ[1].Add(gib(2), gpus[1])
	occ[1].VMs = 2 // two VMs
	for _, tc := range []struct {
		policy string
		want   int
	}{{PolicyPerformance, 0}, {PolicyConsolidation, 1}} {
		if got := Place(&Host{Policy: tc.policy, GPUs: gpus}, occ[:], gib(2)); got != tc.want {
			t.Errorf("%s: GPU %d, want %d", tc.policy, got, tc.want)
		}
	}
}
