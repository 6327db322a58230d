package inventory

import (
	"strings"
	"testing"
)

func TestBoardOf(t *testing.T) {
	for _, tc := range []struct {
		device string
		id     uint16
		want   string // board token, "" when not identified
		why    string // part of the reason when not identified
	}{
		{"NVIDIA L4", 0x27b8, "l4", ""},
		{"NVIDIA L4", 0, "l4", ""},
		{"", 0x27b8, "l4", ""},
		{"AD104GL [L4]", 0, "l4", ""},
		{"NVIDIA L40", 0x26b5, "l40", ""},
		{"NVIDIA L40S", 0x26b9, "l40s", ""},
		{"NVIDIA L40S", 0, "l40s", ""},
		{"NVIDIA A40", 0x2235, "a40", ""},
		{"NVIDIA A10", 0x2236, "a10", ""},
		{"NVIDIA A16", 0x25b6, "a16", ""},
		{"NVIDIA A2", 0x25b6, "a2", ""},
		{"GA107GL [A2 / A16]", 0x25b6, "", "NVIDIA A16 or NVIDIA A2"},
		{"", 0x25b6, "", "NVIDIA A16 or NVIDIA A2"},
		{"Tesla T4", 0x1eb8, "t4", ""},
		{"Tesla P100", 0, "p100", ""},
		{"Tesla P100-PCIE-12GB", 0, "p100c", ""},
		{"Tesla P100-SXM2-16GB", 0x15f9, "p100x", ""},
		{"NVIDIA L4", 0x26b9, "", "PCI device id says NVIDIA L40S, its device name NVIDIA L4"},
		{"NVIDIA RTX A6000", 0x2230, "", "knows no board"},
		{"NVIDIA GPU", 0, "", "knows no board"},
		{"", 0, "", "neither its device name nor its PCI device id"},
	} {
		b, ok, why := BoardOf(GPU{Device: tc.device, DeviceID: tc.id})
		switch {
		case tc.want != "" && (!ok || b.Token != tc.want):
			t.Errorf("%q/%#x: board %q (%v, %s), want %s", tc.device, tc.id, b.Token, ok, why, tc.want)
		case tc.want == "" && ok:
			t.Errorf("%q/%#x: identified as %s, want not identified", tc.device, tc.id, b.Name)
		case tc.want == "" && !strings.Contains(why, tc.why):
			t.Errorf("%q/%#x: why %q, want it to contain %q", tc.device, tc.id, why, tc.why)
		}
	}
}

func TestProfileBoard(t *testing.T) {
	for _, tc := range []struct{ profile, token, board string }{
		{"grid_l4-16c", "l4", "NVIDIA L4"},
		{"grid_l40s-48q", "l40s", "NVIDIA L40S"},
		{"grid_a16-4q", "a16", "NVIDIA A16"},
		{"nvidia_a100-3-20c", "a100", ""},
		{"grid_p100c-4q", "p100c", "Tesla P100 PCIe 12GB"},
		{"odd", "", ""},
	} {
		b, ok := ProfileBoard(tc.profile)
		if got := ProfileBoardToken(tc.profile); got != tc.token || ok != (tc.board != "") || b.Name != tc.board {
			t.Errorf("%s: token %q, board %q (%v), want %q, %q", tc.profile, got, b.Name, ok, tc.token, tc.board)
		}
	}
}

// TestRunsOn: the board rule per GPU of a host.
func TestRunsOn(t *testing.T) {
	l4 := GPU{PCIID: "0000:3b:00.0", Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24 * 1024}
	a16 := GPU{PCIID: "0000:af:00.0", Device: "NVIDIA A16", DeviceID: 0x25b6, MemoryMiB: 16 * 1024}
	odd := GPU{PCIID: "0000:d8:00.0", Device: "NVIDIA X9", MemoryMiB: 16 * 1024}
	bare := GPU{PCIID: "0000:d8:00.0", MemoryMiB: 16 * 1024}
	for _, tc := range []struct {
		name    string
		gpus    []GPU
		i       int
		profile string
		want    Verdict
	}{
		{"its own board", []GPU{l4, a16}, 0, "grid_l4-8c", Runs},
		{"the A16 in the same host", []GPU{l4, a16}, 1, "grid_l4-8c", OtherBoard},
		{"an A16 type on the A16", []GPU{l4, a16}, 1, "grid_a16-4q", Runs},
		{"one board, a type of another (offered by mistake)", []GPU{a16, a16}, 0, "grid_l4-8c", OtherBoard},
		{"unknown board, host of one kind", []GPU{odd, odd}, 0, "grid_l4-8c", Runs},
		{"unreported devices, host of one kind", []GPU{bare, bare}, 1, "grid_t4-4q", Runs},
		{"unknown board next to an L4", []GPU{l4, odd}, 1, "grid_l4-8c", Unsure},
		{"L4 next to an unknown board, L4 type", []GPU{l4, odd}, 0, "grid_l4-8c", Runs},
		{"unknown type board on a host of two boards", []GPU{l4, a16}, 0, "grid_x9-8q", Unsure},
		{"unknown type board on a host of one board", []GPU{l4, l4}, 1, "grid_x9-8q", Runs},
	} {
		h := &Host{GPUs: tc.gpus}
		if got := h.RunsOn(tc.i, tc.profile); got != tc.want {
			t.Errorf("%s: RunsOn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPlaceKeepsBoards: vSphere starts a vGPU only on a GPU of its board, whatever the
// policy prefers: an A16 with fewer VMs does not take an L4 type.
func TestPlaceKeepsBoards(t *testing.T) {
	h := &Host{Policy: PolicyPerformance, GPUs: []GPU{
		{PCIID: "0000:3b:00.0", Device: "NVIDIA L4", MemoryMiB: 24 * 1024, Mode: ModeMixedSize},
		{PCIID: "0000:af:00.0", Device: "NVIDIA A16", MemoryMiB: 16 * 1024, Mode: ModeMixedSize},
	}}
	l4 := Profile{Name: "grid_l4-8c", FrameBufferMiB: 8 * 1024}
	occ := []Occupancy{{}, {}}
	for k, want := range []int{0, 0, -1} {
		got := Place(h, occ, l4)
		if got != want {
			t.Fatalf("grid_l4-8c #%d goes to GPU %d, want %d (occupancy %+v)", k+1, got, want, occ)
		}
		if got >= 0 {
			occ[got] = occ[got].Add(l4, h.GPUs[got])
			occ[got].VMs++
		}
	}
	if got := Place(h, occ, Profile{Name: "grid_a16-8q", FrameBufferMiB: 8 * 1024}); got != 1 {
		t.Errorf("grid_a16-8q goes to GPU %d, want the A16", got)
	}
}
