package inventory

import (
	"cmp"
	"slices"
)

// CanRun tells whether the vGPUs ps can all run on GPU g at once under its mode, placed
// anywhere NVIDIA allows: in same-size mode one profile up to the frame buffer; in
// mixed-size mode one family, no MIG-backed type next to another vGPU, and some choice
// of placement IDs from the GPU's table at which none overlap; at most MaxVGPUsPerGPU.
// It is the test of whether a reported state can be true, not of whether one more vGPU
// fits (Occupancy.FitsOn assumes the worst of where running vGPUs sit; this assumes
// nothing). A profile of unknown frame buffer (0) is not judged here.
func CanRun(g GPU, ps []Profile) bool {
	if len(ps) == 0 {
		return true
	}
	if len(ps) > MaxVGPUsPerGPU {
		return false
	}
	var used int64
	for _, p := range ps {
		used += p.FrameBufferMiB
	}
	if used > g.MemoryMiB {
		return false
	}
	if !g.Mixed() {
		return !slices.ContainsFunc(ps, func(p Profile) bool { return p.Name != ps[0].Name })
	}
	if len(ps) == 1 {
		return true // every table starts every size it lists at 0; no table: one alone
	}
	t := placementTableOf(g)
	if t == nil {
		return false
	}
	rows := make([]*placementRow, len(ps))
	for i, p := range ps {
		if IsMIG(p.Name) || Family(p.Name) != Family(ps[0].Name) {
			return false
		}
		if rows[i] = t.row(p.FrameBufferMiB); rows[i] == nil {
			return false
		}
	}
	slices.SortFunc(rows, func(x, y *placementRow) int { return cmp.Compare(y.size, x.size) })
	return placeRows(make([]bool, t.region), rows)
}

// placeRows tells whether the vGPUs of rows (largest first) can sit at placement IDs
// of their rows without overlapping, given the slots taken.
func placeRows(taken []bool, rows []*placementRow) bool {
	if len(rows) == 0 {
		return true
	}
	r := rows[0]
	for _, at := range r.ids {
		if at+r.size > len(taken) || slices.Contains(taken[at:at+r.size], true) {
			continue
		}
		for i := at; i < at+r.size; i++ {
			taken[i] = true
		}
		ok := placeRows(taken, rows[1:])
		for i := at; i < at+r.size; i++ {
			taken[i] = false
		}
		if ok {
			return true
		}
	}
	return false
}
