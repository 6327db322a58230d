package inventory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// fill starts vGPUs of p on an empty GPU until one does not fit, and returns how many.
func fill(g GPU, p Profile) int {
	var o Occupancy
	n := 0
	for o.FitsOn(p, g) {
		o = o.Add(p, g)
		n++
	}
	return n
}

// TestMixedSizeMaxima: on an empty GPU in mixed-size mode, gpupool starts as many vGPUs
// of one type as NVIDIA's tables allow, no more. Expected values: NVIDIA Virtual GPU
// Software User Guide 17.0, A.1.5 (L40), A.1.6 (L40S), A.1.8 (L4), A.1.1 (A40), A.1.2
// (A16), A.1.3 (A10), column "Maximum vGPUs per GPU in Mixed-Size Mode", and NVIDIA AI
// Enterprise "NVIDIA vGPU (C-Series)" tables 38 (L40), 39 (L40S), 42 (L4), 47 (A40), 48
// (A16), 49 (A10). The equal-size maxima (the frame buffer, and "The maximum vGPUs per
// GPU is limited to 32") are higher for some.
func TestMixedSizeMaxima(t *testing.T) {
	type want struct {
		gib        int64
		mixed, equ int
	}
	for _, tc := range []struct {
		board string
		mem   int64
		types []want
	}{
		// The numbers: 2 x 16C, 4 x 8C and 8 x 4C on a 48 GB L40 or L40S.
		{"NVIDIA L40S", 48, []want{{48, 1, 1}, {24, 2, 2}, {16, 2, 3}, {12, 4, 4}, {8, 4, 6}, {6, 8, 8}, {4, 8, 12}, {3, 16, 16}, {2, 16, 24}, {1, 16, 32}}},
		{"NVIDIA L40", 48, []want{{16, 2, 3}, {8, 4, 6}, {4, 8, 12}, {1, 16, 32}}},
		// The A40 is Ampere: 30 x 1Q (A.1.1 and A.3.4), not the Ada 16.
		{"NVIDIA A40", 48, []want{{48, 1, 1}, {24, 2, 2}, {16, 2, 3}, {12, 4, 4}, {8, 4, 6}, {6, 8, 8}, {4, 8, 12}, {3, 16, 16}, {2, 16, 24}, {1, 30, 32}}},
		{"NVIDIA L4", 24, []want{{24, 1, 1}, {12, 2, 2}, {8, 2, 3}, {6, 4, 4}, {4, 4, 6}, {3, 8, 8}, {2, 8, 12}, {1, 16, 24}}},
		{"NVIDIA A10", 24, []want{{24, 1, 1}, {12, 2, 2}, {8, 2, 3}, {6, 4, 4}, {4, 4, 6}, {3, 8, 8}, {2, 8, 12}, {1, 16, 24}}},
		{"NVIDIA A16", 16, []want{{16, 1, 1}, {8, 2, 2}, {4, 4, 4}, {2, 8, 8}, {1, 16, 16}}},
	} {
		for _, w := range tc.types {
			t.Run(fmt.Sprintf("%s %dGiB", tc.board, w.gib), func(t *testing.T) {
				g := GPU{PCIID: "0000:3b:00.0", Device: tc.board, MemoryMiB: tc.mem * 1024, Mode: ModeMixedSize}
				p := Profile{Name: fmt.Sprintf("grid_x-%dq", w.gib), FrameBufferMiB: w.gib * 1024}
				if got := fill(g, p); got != w.mixed {
					t.Errorf("mixed-size mode: %d fit, NVIDIA's table says %d", got, w.mixed)
				}
				if n, ok := MixedSizeMax(g, p.FrameBufferMiB); !ok || n != w.mixed {
					t.Errorf("MixedSizeMax = %d, %v, want %d", n, ok, w.mixed)
				}
				g.Mode = ModeSameSize
				if got := fill(g, p); got != w.equ {
					t.Errorf("same-size mode: %d fit, NVIDIA's table says %d", got, w.equ)
				}
			})
		}
	}
}

// TestMixedSizeTablesWithoutRows: a size NVIDIA's table does not list does not start in
// mixed-size mode (grid_l4-16c: the L4 has no 16 GiB type); a GPU whose frame buffer has
// no table takes one vGPU, alone.
func TestMixedSizeTablesWithoutRows(t *testing.T) {
	l4 := GPU{Device: "NVIDIA L4", MemoryMiB: 24 * 1024, Mode: ModeMixedSize}
	if n := fill(l4, Profile{Name: "grid_l4-16c", FrameBufferMiB: 16 * 1024}); n != 0 {
		t.Errorf("%d x 16 GiB on an L4 in mixed-size mode, want none", n)
	}
	odd := GPU{Device: "NVIDIA X9", MemoryMiB: 12 * 1024, Mode: ModeMixedSize}
	var o Occupancy
	if !o.FitsOn(Profile{Name: "grid_x9-2q", FrameBufferMiB: 2048}, odd) {
		t.Fatal("one vGPU does not fit an empty GPU without a table")
	}
	o = o.Add(Profile{Name: "grid_x9-2q", FrameBufferMiB: 2048}, odd)
	if o.FitsOn(Profile{Name: "grid_x9-2q", FrameBufferMiB: 2048}, odd) {
		t.Error("a second vGPU fits a GPU without a table")
	}
	if _, ok := MixedSizeMax(odd, 2048); ok {
		t.Error("MixedSizeMax has a table for a 12 GiB GPU")
	}
	// A reported frame buffer below the board's (vSphere may report less): the table is
	// the board's.
	less := GPU{Device: "NVIDIA L40S", MemoryMiB: 46068, Mode: ModeMixedSize}
	if n := fill(less, Profile{Name: "grid_l40s-16c", FrameBufferMiB: 16 * 1024}); n != 2 {
		t.Errorf("%d x 16 GiB on an L40S reporting 46068 MiB, want 2", n)
	}
}

// TestPlacementTablesAreConsistent: each restated row's IDs are sorted, inside the
// region, and do not overlap one another; every size starts at 0 (what the conservative
// rule for GPUs without a table relies on).
func TestPlacementTablesAreConsistent(t *testing.T) {
	all := []*placementTable{&table48Ada}
	for _, tb := range tables {
		all = append(all, tb)
	}
	for _, tb := range all {
		for _, r := range tb.rows {
			if !slices.IsSorted(r.ids) || r.ids[0] != 0 || int64(r.size)*1024 != r.fbMiB && r.fbMiB%1024 == 0 && r.size > int(r.fbMiB/1024) {
				t.Errorf("%d GB, %d MB: ids %v", tb.region, r.fbMiB, r.ids)
			}
			for k, id := range r.ids {
				if id+r.size > tb.region || (k > 0 && r.ids[k-1]+r.size > id) {
					t.Errorf("%d GB, %d MB: placement %d of size %d overlaps or leaves the region", tb.region, r.fbMiB, id, r.size)
				}
			}
		}
	}
}

// TestMixedSizeNeverExceedsNVIDIAMaxima: whatever mixture is started on a GPU in
// mixed-size mode, no size runs more often than NVIDIA's table allows and the frame
// buffer is never exceeded.
func TestMixedSizeNeverExceedsNVIDIAMaxima(t *testing.T) {
	boards := []struct {
		name string
		gib  int64
	}{{"NVIDIA L40S", 48}, {"NVIDIA A40", 48}, {"NVIDIA L4", 24}, {"NVIDIA A10", 24}, {"NVIDIA A16", 16}}
	sizes := []int64{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}
	for seed := uint64(1); seed <= 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		b := boards[r.IntN(len(boards))]
		g := GPU{Device: b.name, MemoryMiB: b.gib * 1024, Mode: ModeMixedSize}
		var o Occupancy
		count := map[int64]int{}
		for range 30 {
			gib := sizes[r.IntN(len(sizes))]
			p := Profile{Name: fmt.Sprintf("grid_x-%dq", gib), FrameBufferMiB: gib * 1024}
			if !o.FitsOn(p, g) {
				continue
			}
			o = o.Add(p, g)
			count[gib]++
			if n, _ := MixedSizeMax(g, p.FrameBufferMiB); count[gib] > n {
				t.Fatalf("seed %d: %d x %d GiB on %s, NVIDIA allows %d", seed, count[gib], gib, b.name, n)
			}
			if o.UsedMiB > g.MemoryMiB {
				t.Fatalf("seed %d: %d MiB used on %s", seed, o.UsedMiB, b.name)
			}
		}
	}
}
