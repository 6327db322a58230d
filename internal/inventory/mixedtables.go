package inventory

// NVIDIA's placements for GPUs in mixed-size mode. Source: NVIDIA Virtual GPU Software
// User Guide, vGPU 17.0 (docs.nvidia.com/grid/17.0/grid-vgpu-user-guide/index.html),
// appendix A.3 "vGPU Placements for GPUs in Mixed-Size Mode": "The vGPU placements that a
// GPU in mixed-size mode supports depend on the total amount of frame buffer that the
// GPU has." Each table gives, per vGPU size, the placement size (slots of the placement
// region, one per GB), the maximum vGPUs per GPU in equal-size and in mixed-size mode,
// and the supported placement IDs: a vGPU occupies [ID, ID+placement size). The maximum
// in mixed-size mode is the number of placement IDs. The per-board tables of appendix
// A.1 (Q-, B- and A-series) and of NVIDIA AI Enterprise ("NVIDIA AI Enterprise and NVIDIA
// vGPU (C-Series)", "Virtual GPU Types for Supported GPUs": L40 table 38, L40S table 39,
// L4 table 42, A40 table 47, A16 table 48, A10 table 49) give the same maxima, with one
// exception noted at the 48 GB table.
//
// Only the tables below are restated; a GPU whose frame buffer has none (the 94 GB and
// 64 GB tables are not restated: the 64 GB one lists "52, 46, 60", a misprint) is
// treated conservatively: see Occupancy.

// placementRow is one vGPU size of a placement table.
type placementRow struct {
	fbMiB int64 // "vGPU Size (MB of Frame Buffer)"
	size  int   // "Placement Size"
	ids   []int // "Supported Placement IDs"
}

// placementTable is one of A.3's tables: region is its "Placement region size".
type placementTable struct {
	region int
	rows   []placementRow
}

func (t *placementTable) row(fbMiB int64) *placementRow {
	for i := range t.rows {
		if t.rows[i].fbMiB == fbMiB {
			return &t.rows[i]
		}
	}
	return nil
}

func (t *placementTable) bySize(size int) *placementRow {
	for i := range t.rows {
		if t.rows[i].size == size {
			return &t.rows[i]
		}
	}
	return nil
}

func seq(from, step, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i*step
	}
	return out
}

// table48 is A.3.4 "vGPU Placements for GPUs with 48 GB of Frame Buffer" (NVIDIA A40,
// L40, L40S, ...): "the maximum number of vGPUs with 1024 MB of frame buffer allowed on
// GPUs based on the Ada Lovelace GPU architecture is lower than for other GPU
// architectures": 16 (IDs below) instead of 30. Note: A.1.1 lists 32 for A40-1B and
// A40-1A in mixed-size mode but 30 for A40-1Q; gpupool keeps A.3.4's 30 IDs.
var table48 = placementTable{region: 48, rows: []placementRow{
	{49152, 48, []int{0}},
	{24576, 24, []int{0, 24}},
	{16384, 16, []int{0, 32}},
	{12288, 12, []int{0, 12, 24, 36}},
	{8192, 8, []int{0, 16, 24, 40}},
	{6144, 6, seq(0, 6, 8)},
	{4096, 4, []int{0, 8, 12, 20, 24, 32, 36, 44}},
	{3072, 3, seq(0, 3, 16)},
	{2048, 2, []int{0, 4, 6, 10, 12, 16, 18, 22, 24, 28, 30, 34, 36, 40, 42, 46}},
	{1024, 1, []int{0, 2, 3, 5, 6, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23, 24, 26, 27, 29, 30, 33, 35, 36, 38, 39, 41, 42, 44, 45, 47}},
}}

// table48Ada is table48 with A.3.4's row for 1024 MB on the Ada Lovelace architecture.
// Its IDs are a subset of the others', so it is also the table of a 48 GB GPU whose
// architecture gpupool does not know.
var table48Ada = func() placementTable {
	t := placementTable{region: 48, rows: append([]placementRow(nil), table48.rows...)}
	t.rows[len(t.rows)-1] = placementRow{1024, 1, []int{0, 5, 6, 11, 12, 17, 18, 23, 24, 29, 30, 35, 36, 41, 42, 47}}
	return t
}()

// tables are A.3.2 (80 GB), A.3.5 (40 GB), A.3.6 (32 GB), A.3.7 (24 GB: NVIDIA L4, A10),
// A.3.8 (20 GB) and A.3.9 (16 GB: NVIDIA A16, A2), by placement region.
var tables = map[int]*placementTable{
	80: {region: 80, rows: []placementRow{
		{81920, 80, []int{0}},
		{40960, 40, []int{0, 40}},
		{20480, 20, []int{0, 20, 40, 60}},
		{16384, 16, []int{0, 24, 40, 64}},
		{10240, 10, seq(0, 10, 8)},
		{8192, 8, []int{0, 12, 20, 32, 40, 52, 60, 72}},
		{5120, 5, seq(0, 5, 16)},
		{4096, 4, []int{0, 6, 10, 16, 20, 26, 30, 36, 40, 46, 50, 56, 60, 66, 70, 76}},
	}},
	48: &table48,
	40: {region: 40, rows: []placementRow{
		{40960, 40, []int{0}},
		{20480, 20, []int{0, 20}},
		{10240, 10, []int{0, 10, 20, 30}},
		{8192, 8, []int{0, 12, 20, 32}},
		{5120, 5, seq(0, 5, 8)},
		{4096, 4, []int{0, 6, 10, 16, 20, 26, 30, 36}},
	}},
	32: {region: 32, rows: []placementRow{
		{32768, 32, []int{0}},
		{16384, 16, []int{0, 16}},
		{8192, 8, seq(0, 8, 4)},
		{4096, 4, seq(0, 4, 8)},
		{2048, 2, seq(0, 2, 16)},
		{1024, 1, seq(0, 1, 32)},
	}},
	24: {region: 24, rows: []placementRow{
		{24576, 24, []int{0}},
		{12288, 12, []int{0, 12}},
		{8192, 8, []int{0, 16}},
		{6144, 6, seq(0, 6, 4)},
		{4096, 4, []int{0, 8, 12, 20}},
		{3072, 3, seq(0, 3, 8)},
		{2048, 2, []int{0, 4, 6, 10, 12, 16, 18, 22}},
		{1024, 1, []int{0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23}},
	}},
	20: {region: 20, rows: []placementRow{
		{20480, 20, []int{0}},
		{10240, 10, []int{0, 10}},
		{5120, 5, seq(0, 5, 4)},
		{4096, 4, []int{0, 6, 10, 16}},
		{2048, 2, []int{0, 3, 5, 8, 10, 13, 15, 18}},
		{1024, 1, []int{0, 1, 2, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17, 19}},
	}},
	16: {region: 16, rows: []placementRow{
		{16384, 16, []int{0}},
		{8192, 8, []int{0, 8}},
		{4096, 4, seq(0, 4, 4)},
		{2048, 2, seq(0, 2, 8)},
		{1024, 1, seq(0, 1, 16)},
	}},
}

// placementTableOf is the A.3 table of a GPU in mixed-size mode: by its board's frame
// buffer when gpupool identifies the board (vSphere may report a little less than the
// board has), else by the frame buffer it reports in whole GiB; nil when there is none.
func placementTableOf(g GPU) *placementTable {
	b, known, _ := BoardOf(g)
	gib := b.MemGiB
	if !known {
		if g.MemoryMiB%1024 != 0 {
			return nil
		}
		gib = g.MemoryMiB / 1024
	}
	if gib == 48 && (!known || b.Ada) {
		return &table48Ada
	}
	return tables[int(gib)]
}

// MixedSizeMax is how many vGPUs of fbMiB a GPU in mixed-size mode runs at most under
// NVIDIA's placement table for it, and false when gpupool has no table for the GPU
// (then it counts at most one vGPU on it). 0 with true: the table has no such size.
func MixedSizeMax(g GPU, fbMiB int64) (int, bool) {
	t := placementTableOf(g)
	if t == nil {
		return 0, false
	}
	if r := t.row(fbMiB); r != nil {
		return len(r.ids), true
	}
	return 0, true
}

// PlacementRegionGB is the placement region of the GPU's table (its frame buffer in GB),
// 0 when gpupool has no table for it.
func PlacementRegionGB(g GPU) int {
	if t := placementTableOf(g); t != nil {
		return t.region
	}
	return 0
}
