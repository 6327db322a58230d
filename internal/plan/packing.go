package plan

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// demand is how many more vGPUs of one profile a host must start.
type demand struct {
	profile inventory.Profile
	count   int
}

// packable tells whether the vGPUs of ds can all run on h's GPUs, given what runs on
// them (occ, indexed like h.GPUs), under the same-size rule and the frame-buffer limit.
//
// It is exact rather than greedy: a GPU that runs a profile takes only more of that
// profile, up to its memory; every free GPU goes to one profile, and the search over
// which profile gets which free GPU treats free GPUs of equal memory as interchangeable,
// which keeps it small (hosts carry one or two GPU models).
func packable(h *inventory.Host, occ []inventory.Occupancy, ds []demand) bool {
	left := make([]demand, 0, len(ds))
	for _, d := range ds {
		if n := d.count - lockedRoom(h, occ, d.profile); n > 0 {
			left = append(left, demand{profile: d.profile, count: n})
		}
	}
	if len(left) == 0 {
		return true
	}
	sizes, counts := freeGPUsBySize(h, occ)
	memo := map[string]bool{}
	return assign(left, sizes, counts, memo)
}

// lockedRoom is how many more vGPUs of p fit the GPUs that already run p.
func lockedRoom(h *inventory.Host, occ []inventory.Occupancy, p inventory.Profile) int {
	n := 0
	for i, o := range occ {
		if o.Count > 0 && o.Profile == p.Name && p.FrameBufferMiB > 0 {
			n += int((h.GPUs[i].MemoryMiB - o.UsedMiB) / p.FrameBufferMiB)
		}
	}
	return n
}

// freeGPUsBySize returns the memory sizes of h's free GPUs, largest first, and how many
// free GPUs have each.
func freeGPUsBySize(h *inventory.Host, occ []inventory.Occupancy) (sizes []int64, counts []int) {
	for i, o := range occ {
		if o.Count > 0 {
			continue
		}
		mem := h.GPUs[i].MemoryMiB
		if j := slices.Index(sizes, mem); j >= 0 {
			counts[j]++
			continue
		}
		sizes = append(sizes, mem)
		counts = append(counts, 1)
	}
	idx := make([]int, len(sizes))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(sizes[b], sizes[a]) })
	s, c := make([]int64, len(idx)), make([]int, len(idx))
	for k, i := range idx {
		s[k], c[k] = sizes[i], counts[i]
	}
	return s, c
}

// assign tells whether the free GPUs (counts of each size) can take the demands left,
// giving each free GPU to one profile.
func assign(left []demand, sizes []int64, counts []int, memo map[string]bool) bool {
	if len(left) == 0 {
		return true
	}
	key := memoKey(len(left), counts)
	if ok, seen := memo[key]; seen {
		return ok
	}
	d := left[0]
	// take chooses how many free GPUs of size class c onwards profile d gets.
	var take func(c, need int) bool
	take = func(c, need int) bool {
		if need <= 0 {
			return assign(left[1:], sizes, counts, memo)
		}
		if c == len(sizes) {
			return false
		}
		per := int(sizes[c] / d.profile.FrameBufferMiB)
		if per == 0 {
			return take(c+1, need)
		}
		for k := min(counts[c], (need+per-1)/per); k >= 0; k-- {
			counts[c] -= k
			ok := take(c+1, need-k*per)
			counts[c] += k
			if ok {
				return true
			}
		}
		return false
	}
	ok := take(0, d.count)
	memo[key] = ok
	return ok
}

func memoKey(n int, counts []int) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(n))
	for _, c := range counts {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(c))
	}
	return b.String()
}

// powerOnOrder returns an order in which vSphere's placement (inventory.Place) accepts
// every VM of ms on h, one after the other, starting from occupancy occ. When it finds
// none, it returns the VMs it placed and those it could not.
//
// The order matters because vSphere, not gpupool, picks the GPU: under the performance
// policy a vGPU goes to the emptiest compatible GPU, so starting four small vGPUs first
// may spread them over every GPU and leave none free for a large one. At each step this
// powers on a VM of the largest profile whose placement leaves the rest packable, so no
// placement blocks the VMs after it.
//
// Note: with inventory.Place as it is, this never gets stuck on a packable host: of a
// packing, the profile given the free GPU with the lowest PCI id can always go next
// (Place puts it on that GPU, on one the packing leaves free, or next to vGPUs of its
// own profile, all of which keep the rest packable). The stuck result is for a placement
// model that changes, such as mixed-size mode.
func powerOnOrder(h *inventory.Host, occ []inventory.Occupancy, ms []*member) (order, stuck []*member) {
	type group struct {
		profile inventory.Profile
		queue   []*member
	}
	var groups []*group
	for _, m := range ms {
		i := slices.IndexFunc(groups, func(g *group) bool { return g.profile.Name == m.offer.Name })
		if i < 0 {
			groups = append(groups, &group{profile: m.offer})
			i = len(groups) - 1
		}
		groups[i].queue = append(groups[i].queue, m)
	}
	slices.SortFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.profile.FrameBufferMiB, a.profile.FrameBufferMiB), cmp.Compare(a.profile.Name, b.profile.Name))
	})
	for _, g := range groups {
		slices.SortFunc(g.queue, func(a, b *member) int { return cmp.Compare(a.vm.Name, b.vm.Name) })
	}
	remaining := func() []demand {
		ds := make([]demand, 0, len(groups))
		for _, g := range groups {
			if len(g.queue) > 0 {
				ds = append(ds, demand{profile: g.profile, count: len(g.queue)})
			}
		}
		return ds
	}

	occ = slices.Clone(occ)
	for len(order) < len(ms) {
		placed := false
		for _, g := range groups {
			if len(g.queue) == 0 {
				continue
			}
			gpu := inventory.Place(h, occ, g.profile)
			if gpu < 0 {
				continue
			}
			next := slices.Clone(occ)
			next[gpu] = occupy(next[gpu], g.profile)
			m := g.queue[0]
			g.queue = g.queue[1:]
			if packable(h, next, remaining()) {
				order, occ, placed = append(order, m), next, true
				break
			}
			g.queue = append([]*member{m}, g.queue...)
		}
		if !placed {
			for _, g := range groups {
				stuck = append(stuck, g.queue...)
			}
			return order, stuck
		}
	}
	return order, nil
}

// occupy returns o with one more vGPU of p.
func occupy(o inventory.Occupancy, p inventory.Profile) inventory.Occupancy {
	return inventory.Occupancy{Profile: p.Name, UsedMiB: o.UsedMiB + p.FrameBufferMiB, Count: o.Count + 1}
}
