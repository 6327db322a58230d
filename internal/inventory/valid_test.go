package inventory

import "testing"

func TestCanRun(t *testing.T) {
	l4 := GPU{PCIID: "0000:3b:00.0", Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 23034, Mode: ModeMixedSize}
	a16 := GPU{PCIID: "0000:3b:00.0", MemoryMiB: 16384, Mode: ModeMixedSize}
	same := GPU{MemoryMiB: 16384, Mode: ModeSameSize}
	p := func(name string, gib int64) Profile { return Profile{Name: name, FrameBufferMiB: gib * 1024} }
	for _, tc := range []struct {
		name string
		g    GPU
		ps   []Profile
		want bool
	}{
		{"empty", l4, nil, true},
		{"12q and 4q on a 24 GB L4: 12Q at 0, 4Q at 12", GPU{Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24576, Mode: ModeMixedSize}, []Profile{p("grid_l4-4q", 4), p("grid_l4-12q", 12)}, true},
		{"two 12q and a 4q exceed 24 GiB", GPU{Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24576, Mode: ModeMixedSize}, []Profile{p("grid_l4-12q", 12), p("grid_l4-12q", 12), p("grid_l4-4q", 4)}, false},
		{"8q, 8q and 4q: 8Q IDs 0 and 16 leave 4Q only 8 or 12", GPU{Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24576, Mode: ModeMixedSize}, []Profile{p("grid_l4-8q", 8), p("grid_l4-8q", 8), p("grid_l4-4q", 4)}, true},
		{"12q, 8q and 4q: 8Q at 0, 4Q at 8, 12Q at 12", GPU{Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24576, Mode: ModeMixedSize}, []Profile{p("grid_l4-12q", 12), p("grid_l4-8q", 8), p("grid_l4-4q", 4)}, true},
		{"8q and four 4q fill 24 GiB, but 8Q leaves three 4Q IDs", GPU{Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24576, Mode: ModeMixedSize}, []Profile{p("grid_l4-8q", 8), p("grid_l4-4q", 4), p("grid_l4-4q", 4), p("grid_l4-4q", 4), p("grid_l4-4q", 4)}, false},
		{"q and c do not mix", a16, []Profile{p("grid_a16-4q", 4), p("grid_a16-4c", 4)}, false},
		{"same-size: one profile", same, []Profile{p("grid_a16-4q", 4), p("grid_a16-8q", 8)}, false},
		{"same-size: four 4q", same, []Profile{p("grid_a16-4q", 4), p("grid_a16-4q", 4), p("grid_a16-4q", 4), p("grid_a16-4q", 4)}, true},
		{"same-size: five 4q", same, []Profile{p("grid_a16-4q", 4), p("grid_a16-4q", 4), p("grid_a16-4q", 4), p("grid_a16-4q", 4), p("grid_a16-4q", 4)}, false},
	} {
		if got := CanRun(tc.g, tc.ps); got != tc.want {
			t.Errorf("%s: CanRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
