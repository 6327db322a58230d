package inventory

import (
	"slices"
	"testing"
)

// TestPlacementWorlds: the placement worlds of running vGPUs on a GPU in mixed-size
// mode are the consistent choices of NVIDIA's placement IDs, one per distinct room left
// for the sizes to start.
func TestPlacementWorlds(t *testing.T) {
	a40 := GPU{PCIID: "0000:3b:00.0", Device: "NVIDIA A40", DeviceID: 0x2235, MemoryMiB: 48 * 1024, Mode: ModeMixedSize}
	q := func(gib int64) Profile { return Profile{Name: "grid_a40-q", FrameBufferMiB: gib * 1024} }
	run := func(keep bool, gib ...int64) []Running {
		var rs []Running
		for _, g := range gib {
			rs = append(rs, Running{Profile: q(g), Keep: keep})
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		running []Running
		start   []Profile
		want    [][]int // nil: no world (the worst-case count stands)
	}{
		// A.3.4: 16 GiB at 0 or 32; each leaves one 24 GiB ID.
		{"one 16Q, a 24Q to start", run(true, 16), []Profile{q(24)}, [][]int{{0}, {32}}},
		// Two 8Q: both below 24, both above, or one each side (no 24 GiB ID left).
		{"two 8Q, a 24Q to start", run(true, 8, 8), []Profile{q(24)}, [][]int{{0, 16}, {0, 24}, {24, 40}}},
		// A departing vGPU (Keep false) tells worlds apart by the room once it is down
		// too: the one that stays below 24 or above, each with the room now.
		{"an 8Q that stays and one that leaves", []Running{{q(8), true}, {q(8), false}}, []Profile{q(24)}, [][]int{{0, 16}, {0, 24}, {24, 0}, {24, 40}}},
		// Three 16 GiB vGPUs cannot sit together (two IDs): the report contradicts the table.
		{"three 16Q: no consistent placement", run(true, 16, 16, 16), []Profile{q(8)}, nil},
		{"a size without a row", run(true, 5), []Profile{q(8)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PlacementWorlds(a40, tc.running, tc.start, 10_000)
			if !ok {
				t.Fatal("passed the bound")
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("worlds %v, want %v", got, tc.want)
			}
		})
	}
	if _, ok := PlacementWorlds(a40, run(true, 1, 1, 1, 1, 1, 1), []Profile{q(4)}, 1000); ok {
		t.Error("six 1Q within 1,000 steps: want the bound passed")
	}
}

// TestFitsWhereverPinned: a vGPU whose placement is known (AddAt) blocks exactly the IDs
// it overlaps; one of unknown placement (Add) the worst of them.
func TestFitsWhereverPinned(t *testing.T) {
	a40 := GPU{PCIID: "0000:3b:00.0", Device: "NVIDIA A40", DeviceID: 0x2235, MemoryMiB: 48 * 1024, Mode: ModeMixedSize}
	p8 := Profile{Name: "grid_a40-8q", FrameBufferMiB: 8 * 1024}
	p24 := Profile{Name: "grid_a40-24q", FrameBufferMiB: 24 * 1024}
	if o := (Occupancy{}).AddAt(p8, a40, 16).AddAt(p8, a40, 24); o.FitsOn(p24, a40) {
		t.Error("8Q at 16 and 24: a 24Q fits, want not (IDs 0 and 24 both overlap)")
	}
	if o := (Occupancy{}).AddAt(p8, a40, 0).AddAt(p8, a40, 16); !o.FitsOn(p24, a40) {
		t.Error("8Q at 0 and 16: a 24Q does not fit, want at 24")
	}
	if o := (Occupancy{}).Add(p8, a40).Add(p8, a40); o.FitsOn(p24, a40) {
		t.Error("two 8Q of unknown placement: a 24Q fits, want not (they may sit at 16 and 24)")
	}
}
