package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Where the running vGPUs of a mixed-size GPU sit. vSphere does not report placement
// IDs (docs/vgpu-model.md, "Where running vGPUs sit": none of HostGraphicsInfo,
// VirtualPCIPassthroughVmiopBackingInfo, VirtualMachineVgpuProfileInfo or vSphere 9.0's
// DirectPathProfileManager carries one), and NVIDIA's vGPU manager places a vGPU when it
// starts, so after other vGPUs came and went a running vGPU may sit at any ID NVIDIA's
// table lists for its size. A placement world is one such choice for every running vGPU
// of a GPU, consistent among themselves (no two overlap). The planner asks that a layout
// fit in every world; PlacementWorlds enumerates them, up to what matters for the
// vGPUs to start.

// Running is a vGPU that runs on a GPU at a placement gpupool cannot read.
type Running struct {
	Profile Profile
	// Keep tells whether it keeps running while the layout starts (the pool's departing
	// vGPUs do not): worlds are told apart by the room left with and without the others.
	Keep bool
}

// PlacementIDs are the placement IDs NVIDIA's table for mixed-size GPU g lists for a
// vGPU of fbMiB, and its placement size; false when g has no table or the table no
// such size.
func PlacementIDs(g GPU, fbMiB int64) (ids []int, size int, ok bool) {
	t := placementTableOf(g)
	if t == nil {
		return nil, 0, false
	}
	r := t.row(fbMiB)
	if r == nil {
		return nil, 0, false
	}
	return r.ids, r.size, true
}

// PlacementWorlds are the placement worlds of the vGPUs running on mixed-size GPU g:
// each world gives the placement ID of each running vGPU (indexed like running). Worlds
// that leave the same placement IDs free for every size of starting (with all running
// vGPUs, and with those that Keep) are one world to the vGPUs to start: one stands for
// all. nil with ok when the running vGPUs have no world to choose from (a size without
// a row, no table, MIG, or no consistent choice: the report contradicts the model, and
// the caller keeps its worst-case count); ok is false when the search passed limit
// steps.
func PlacementWorlds(g GPU, running []Running, starting []Profile, limit int) (worlds [][]int, ok bool) {
	// Every pass plans from a fresh inventory read and asks the same few questions: the
	// answers are kept (they depend on the table, the sizes and the limit only).
	var key strings.Builder
	fmt.Fprintf(&key, "%p/%t/%d|", placementTableOf(g), g.Mixed(), limit)
	for _, r := range running {
		fmt.Fprintf(&key, "%s:%d:%t,", r.Profile.Name, r.Profile.FrameBufferMiB, r.Keep)
	}
	key.WriteByte('|')
	for _, p := range starting {
		fmt.Fprintf(&key, "%d,", p.FrameBufferMiB)
	}
	if v, ok := worldCache.Load(key.String()); ok {
		c := v.(cachedWorlds)
		return c.worlds, c.ok
	}
	worlds, ok = placementWorlds(g, running, starting, limit)
	if worldCacheSize.Add(1) < maxCachedWorlds {
		worldCache.Store(key.String(), cachedWorlds{worlds, ok})
	}
	return worlds, ok
}

type cachedWorlds struct {
	worlds [][]int
	ok     bool
}

// maxCachedWorlds bounds the cache: a long-running manager sees few distinct GPUs.
const maxCachedWorlds = 4096

var (
	worldCache     sync.Map
	worldCacheSize atomic.Int64
)

func placementWorlds(g GPU, running []Running, starting []Profile, limit int) (worlds [][]int, ok bool) {
	t := placementTableOf(g)
	if t == nil || !g.Mixed() || len(running) == 0 {
		return nil, true
	}
	rows := make([]*placementRow, len(running))
	for i, r := range running {
		if rows[i] = t.row(r.Profile.FrameBufferMiB); rows[i] == nil || IsMIG(r.Profile.Name) {
			return nil, true
		}
	}
	var targets []*placementRow
	for _, p := range starting {
		if r := t.row(p.FrameBufferMiB); r != nil && !slices.Contains(targets, r) {
			targets = append(targets, r)
		}
	}
	// The vGPUs that keep running first, then those that leave; largest first; equal
	// sizes with the same Keep are interchangeable, so their IDs are taken in increasing
	// order only.
	//
	// Note: the keepers' worlds are those consistent among the keepers alone. Were the
	// leaving vGPUs to rule some out, the worlds would grow once they are down (gpupool
	// re-reads what runs and remembers nothing), and a layout found feasible would be
	// refused half way (the differential sweep's seed 1902). A keepers' world with no
	// room for the leaving ones keeps them unplaced (-1): they are counted wherever they
	// may sit (Occupancy.Add) while they still run.
	order := make([]int, len(running))
	nKeep := 0
	for i := range order {
		order[i] = i
		if running[i].Keep {
			nKeep++
		}
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return cmp.Or(cmp.Compare(keepRank(running[x]), keepRank(running[y])), cmp.Compare(rows[y].size, rows[x].size))
	})
	all, kept := make([]bool, t.region), make([]bool, t.region)
	at := make([]int, len(running))
	seen := map[string]bool{}
	steps := 0
	emitted := false
	emit := func() {
		emitted = true
		if key := worldKey(targets, all, kept) + fmt.Sprint(slices.Contains(at, -1)); !seen[key] {
			seen[key] = true
			worlds = append(worlds, slices.Clone(at))
		}
	}
	var rec, place func(k, from int) bool
	rec = func(k, from int) bool {
		if steps++; steps > limit {
			return false
		}
		switch {
		case k == len(order):
			emit()
			return true
		case k == nKeep:
			// The leaving vGPUs: placed where the keepers leave room, else unplaced.
			before := emitted
			emitted = false
			if !place(k, from) {
				return false
			}
			if !emitted {
				for _, i := range order[k:] {
					at[i] = -1
				}
				emit()
			}
			emitted = emitted || before
			return true
		}
		return place(k, from)
	}
	place = func(k, from int) bool {
		i := order[k]
		r := rows[i]
		for _, id := range r.ids {
			if id < from || id+r.size > t.region || slices.Contains(all[id:id+r.size], true) {
				continue
			}
			mark(all, id, r.size, true)
			if running[i].Keep {
				mark(kept, id, r.size, true)
			}
			at[i] = id
			next := 0
			if k+1 < len(order) {
				if j := order[k+1]; rows[j].size == r.size && running[j].Keep == running[i].Keep {
					next = id + r.size
				}
			}
			ok := rec(k+1, next)
			mark(all, id, r.size, false)
			if running[i].Keep {
				mark(kept, id, r.size, false)
			}
			if !ok {
				return false
			}
		}
		return true
	}
	if !rec(0, 0) {
		return nil, false
	}
	return worlds, true
}

// keepRank orders the vGPUs that keep running before those that leave.
func keepRank(r Running) int {
	if r.Keep {
		return 0
	}
	return 1
}

func mark(slots []bool, at, size int, v bool) {
	for i := at; i < at+size; i++ {
		slots[i] = v
	}
}

// worldKey is what a world leaves to the vGPUs to start: per size, which of its IDs
// are free with every running vGPU and with those that keep running.
func worldKey(targets []*placementRow, all, kept []bool) string {
	var b strings.Builder
	for _, r := range targets {
		for _, slots := range [][]bool{all, kept} {
			for _, id := range r.ids {
				if id+r.size <= len(slots) && !slices.Contains(slots[id:id+r.size], true) {
					b.WriteByte('1')
				} else {
					b.WriteByte('0')
				}
			}
			b.WriteByte('/')
		}
	}
	return b.String()
}

// AddAt returns o with one more vGPU of p on mixed-size GPU g at placement ID at: a
// vGPU whose placement is known (a placement world's), which the worst-case fit for
// the vGPUs to start counts where it sits rather than wherever it could (Pinned).
func (o Occupancy) AddAt(p Profile, g GPU, at int) Occupancy {
	n := Occupancy{Profile: o.Profile, UsedMiB: o.UsedMiB + p.FrameBufferMiB, Count: o.Count + 1, Family: Family(p.Name), VMs: o.VMs, Sizes: slices.Clip(o.Sizes)}
	if n.Profile == "" {
		n.Profile = p.Name
	}
	n.Slots = o.slots(g)
	n.Pinned = slices.Clone(o.Pinned)
	if n.Pinned == nil {
		n.Pinned = make([]bool, len(n.Slots))
	}
	size := placementSize(p, g)
	for i := at; i < at+size && i < len(n.Slots); i++ {
		n.Slots[i], n.Pinned[i] = true, true
	}
	return n
}
