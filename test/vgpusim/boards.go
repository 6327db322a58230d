package vgpusim

import (
	"fmt"
	"strings"
	"unicode"
)

// The simulator's own statement of two of NVIDIA's rules, written apart from the
// planner's (internal/inventory boards.go and mixedtables.go) and sharing no code with
// it, so that the differential test compares two readings of the documentation:
//
//   - Boards: a vGPU type runs only on a physical GPU of its own board. NVIDIA Virtual
//     GPU Software User Guide (vGPU 17.0), "Virtual GPU Types for Supported GPUs": the
//     types are listed per board ("A16-4Q" runs "on an NVIDIA A16 board"). The simulator
//     reads the board of a GPU off its model name (the words "L4", "A16", ... of
//     graphicsInfo[].deviceName) and the board of a type off its name (grid_l4-16c: l4).
//     A GPU whose model names no board it knows runs every type its host offers, as the
//     simulator did before it knew boards.
//   - Mixed-size placements: same guide, appendix A.3 "vGPU Placements for GPUs in
//     Mixed-Size Mode": per total frame buffer of the GPU, the placement IDs at which a
//     vGPU of each size may start (it then occupies as many 1 GB slots as its size), with
//     fewer IDs for 1 GB vGPUs on 48 GB GPUs of the Ada Lovelace architecture. A size the
//     table does not list is refused; a GPU whose frame buffer has no table keeps the
//     simulator's older rule (start at a multiple of the size).
//   - "The maximum vGPUs per GPU is limited to 32" (same guide, footnote to the A.1
//     tables).

// maxVGPUsPerGPU is NVIDIA's cap on the vGPUs of one physical GPU.
const maxVGPUsPerGPU = 32

// modelBoards maps a word of a GPU's model name to the board word of its vGPU types,
// and tells the Ada Lovelace boards.
var modelBoards = map[string]struct {
	token string
	ada   bool
}{
	"L4": {"l4", true}, "L40": {"l40", true}, "L40S": {"l40s", true}, "L20": {"l20", true},
	"A40": {"a40", false}, "A10": {"a10", false}, "A16": {"a16", false}, "A2": {"a2", false},
	"T4": {"t4", false}, "P100": {"p100", false}, "P40": {"p40", false}, "V100": {"v100", false},
	"M10": {"m10", false}, "M60": {"m60", false},
}

// boardOfModel is the board word of a GPU model ("NVIDIA L40S": l40s) and whether it is
// an Ada Lovelace board; "" for a model that names no board the simulator knows, or
// names two ("GA107GL [A2 / A16]").
func boardOfModel(model string) (string, bool) {
	token, ada := "", false
	for _, w := range strings.FieldsFunc(strings.ToUpper(model), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if b, ok := modelBoards[w]; ok {
			if token != "" && token != b.token {
				return "", false
			}
			token, ada = b.token, b.ada
		}
	}
	return token, ada
}

// boardOfType is the board word of a vGPU type name: l4 in grid_l4-16c.
func boardOfType(name string) string {
	if m := seriesRE.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}

// boardRefuses says why g does not run a vGPU of p under the board rule, "" when it
// may.
func (g *gpuState) boardRefuses(p Profile) string {
	gb, _ := boardOfModel(g.device)
	pb := boardOfType(p.Name)
	if gb == "" || pb == "" || gb == pb {
		return ""
	}
	return fmt.Sprintf("GPU %s is a %s and runs only %s vGPU types, %s is of board %s (board rule)", g.pciID, g.device, gb, p.Name, pb)
}

// nvidiaPlacements are A.3's "Supported Placement IDs", by the GPU's frame buffer in GB
// and the vGPU's frame buffer in GB (A.3.9 16 GB, A.3.8 20 GB, A.3.7 24 GB, A.3.6 32 GB,
// A.3.5 40 GB, A.3.4 48 GB, A.3.2 80 GB). A vGPU of N GB occupies N slots from its ID.
var nvidiaPlacements = map[int64]map[int64][]int{
	16: {16: {0}, 8: {0, 8}, 4: {0, 4, 8, 12}, 2: {0, 2, 4, 6, 8, 10, 12, 14},
		1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
	20: {20: {0}, 10: {0, 10}, 5: {0, 5, 10, 15}, 4: {0, 6, 10, 16}, 2: {0, 3, 5, 8, 10, 13, 15, 18},
		1: {0, 1, 2, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17, 19}},
	24: {24: {0}, 12: {0, 12}, 8: {0, 16}, 6: {0, 6, 12, 18}, 4: {0, 8, 12, 20}, 3: {0, 3, 6, 9, 12, 15, 18, 21},
		2: {0, 4, 6, 10, 12, 16, 18, 22}, 1: {0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23}},
	32: {32: {0}, 16: {0, 16}, 8: {0, 8, 16, 24}, 4: {0, 4, 8, 12, 16, 20, 24, 28},
		2: {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
		1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}},
	40: {40: {0}, 20: {0, 20}, 10: {0, 10, 20, 30}, 8: {0, 12, 20, 32}, 5: {0, 5, 10, 15, 20, 25, 30, 35},
		4: {0, 6, 10, 16, 20, 26, 30, 36}},
	48: {48: {0}, 24: {0, 24}, 16: {0, 32}, 12: {0, 12, 24, 36}, 8: {0, 16, 24, 40},
		6: {0, 6, 12, 18, 24, 30, 36, 42}, 4: {0, 8, 12, 20, 24, 32, 36, 44},
		3: {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45},
		2: {0, 4, 6, 10, 12, 16, 18, 22, 24, 28, 30, 34, 36, 40, 42, 46},
		1: {0, 2, 3, 5, 6, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23, 24, 26, 27, 29, 30, 33, 35, 36, 38, 39, 41, 42, 44, 45, 47}},
	80: {80: {0}, 40: {0, 40}, 20: {0, 20, 40, 60}, 16: {0, 24, 40, 64}, 10: {0, 10, 20, 30, 40, 50, 60, 70},
		8: {0, 12, 20, 32, 40, 52, 60, 72}, 5: {0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75},
		4: {0, 6, 10, 16, 20, 26, 30, 36, 40, 46, 50, 56, 60, 66, 70, 76}},
}

// adaPlacements48 is A.3.4's row for 1 GB vGPUs on 48 GB GPUs of the Ada Lovelace
// architecture.
var adaPlacements48 = []int{0, 5, 6, 11, 12, 17, 18, 23, 24, 29, 30, 35, 36, 41, 42, 47}

// placementIDs are the placement IDs (in GB) at which a vGPU of fbMiB may start on g in
// mixed-size mode. table is false when NVIDIA has no table for g's frame buffer; ids is
// nil when the table does not list the size.
func (g *gpuState) placementIDs(fbMiB int64) (ids []int, table bool) {
	if g.memMiB%1024 != 0 {
		return nil, false
	}
	rows, ok := nvidiaPlacements[g.memMiB/1024]
	if !ok {
		return nil, false
	}
	if fbMiB%1024 != 0 {
		return nil, true
	}
	if _, ada := boardOfModel(g.device); ada && g.memMiB == 48*1024 && fbMiB == 1024 {
		return adaPlacements48, true
	}
	return rows[fbMiB/1024], true
}
