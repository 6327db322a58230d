package plan

import (
	"cmp"
	"fmt"
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
// them (occ, indexed like h.GPUs), under the board rule (a type runs only on GPUs of
// its board: inventory.Host.RunsOn), the same-size rule and the frame-buffer limit.
//
// It is exact rather than greedy: a GPU that runs a profile takes only more of that
// profile, up to its memory; every free GPU goes to one profile of its board, and the
// search over which profile gets which free GPU treats free GPUs of equal memory and
// kind (board) as interchangeable, which keeps it small (hosts carry one or two GPU
// models).
func packable(h *inventory.Host, occ []inventory.Occupancy, ds []demand) bool {
	if slices.ContainsFunc(h.GPUs, inventory.GPU.Mixed) {
		return packSlots(h, occ, ds)
	}
	left := make([]demand, 0, len(ds))
	for _, d := range ds {
		if n := d.count - lockedRoom(h, occ, d.profile); n > 0 {
			left = append(left, demand{profile: d.profile, count: n})
		}
	}
	if len(left) == 0 {
		return true
	}
	classes := freeGPUClasses(h, occ)
	memo := map[string]bool{}
	return assign(h, left, classes, memo)
}

// lockedRoom is how many more vGPUs of p fit the GPUs that already run p.
func lockedRoom(h *inventory.Host, occ []inventory.Occupancy, p inventory.Profile) int {
	n := 0
	for i, o := range occ {
		if o.Count > 0 && o.Profile == p.Name && p.FrameBufferMiB > 0 {
			n += max(min(int((h.GPUs[i].MemoryMiB-o.UsedMiB)/p.FrameBufferMiB), inventory.MaxVGPUsPerGPU-o.Count), 0)
		}
	}
	return n
}

// gpuClass is a set of interchangeable free GPUs: equal memory, one kind (board).
type gpuClass struct {
	mem   int64
	first int // a GPU of the class, for asking which profiles it runs
	count int
}

// freeGPUClasses returns h's free GPUs by memory and kind, largest first.
func freeGPUClasses(h *inventory.Host, occ []inventory.Occupancy) []gpuClass {
	var cs []gpuClass
	for i, o := range occ {
		if o.Count > 0 {
			continue
		}
		j := slices.IndexFunc(cs, func(c gpuClass) bool {
			return c.mem == h.GPUs[i].MemoryMiB && sameKind(h, c.first, i)
		})
		if j >= 0 {
			cs[j].count++
			continue
		}
		cs = append(cs, gpuClass{mem: h.GPUs[i].MemoryMiB, first: i, count: 1})
	}
	slices.SortStableFunc(cs, func(a, b gpuClass) int { return cmp.Compare(b.mem, a.mem) })
	return cs
}

// sameKind tells whether two GPUs of h run the same profiles.
func sameKind(h *inventory.Host, i, j int) bool {
	gi, gj := h.GPUs[i], h.GPUs[j]
	bi, oki, _ := inventory.BoardOf(gi)
	bj, okj, _ := inventory.BoardOf(gj)
	if oki || okj {
		return oki && okj && bi.Token == bj.Token
	}
	return gi.Device == gj.Device && gi.DeviceID == gj.DeviceID
}

// assign tells whether the free GPU classes can take the demands left, giving each
// free GPU to one profile that runs on it.
func assign(h *inventory.Host, left []demand, cs []gpuClass, memo map[string]bool) bool {
	if len(left) == 0 {
		return true
	}
	key := memoKey(len(left), cs)
	if ok, seen := memo[key]; seen {
		return ok
	}
	d := left[0]
	// take chooses how many free GPUs of class c onwards profile d gets.
	var take func(c, need int) bool
	take = func(c, need int) bool {
		if need <= 0 {
			return assign(h, left[1:], cs, memo)
		}
		if c == len(cs) {
			return false
		}
		per := inventory.PerGPU(cs[c].mem, d.profile.FrameBufferMiB)
		if per == 0 || h.RunsOn(cs[c].first, d.profile.Name) != inventory.Runs {
			return take(c+1, need)
		}
		for k := min(cs[c].count, (need+per-1)/per); k >= 0; k-- {
			cs[c].count -= k
			ok := take(c+1, need-k*per)
			cs[c].count += k
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

func memoKey(n int, cs []gpuClass) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(n))
	for _, c := range cs {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(c.count))
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
// placement blocks the VMs after it, and it backtracks when vSphere's choice of GPU
// strands a later VM anyway (the differential test found layouts of C- and Q-series
// vGPUs on mixed-size GPUs that only a later choice could reach).
//
// Note: on a host whose GPUs are all in same-size mode this never gets stuck on a
// packable host: of a packing, the profile given the free GPU with the lowest PCI id can
// always go next (Place puts it on that GPU, on one the packing leaves free, or next to
// vGPUs of its own profile, all of which keep the rest packable). With GPUs in mixed-size
// mode vSphere's choice of GPU can strand placement slots, and a VM with several vGPUs
// is placed vGPU by vGPU; then no order may exist (or none within orderBudget), which the
// stuck result reports.
func powerOnOrder(h *inventory.Host, occ []inventory.Occupancy, ms []*member) (order, stuck []*member) {
	search := &orderSearch{h: h, groups: groupByProfile(ms), want: len(ms), budget: orderBudget, failed: map[string]bool{}}
	if search.next(slices.Clone(occ)) {
		return search.order, nil
	}
	for _, m := range ms {
		if !slices.Contains(search.longest, m) {
			stuck = append(stuck, m)
		}
	}
	return search.longest, stuck
}

// groupByProfile queues the VMs by the profile they are offered, the largest profile
// first (then by name), each queue by VM name: the order powerOnOrder tries them in.
func groupByProfile(ms []*member) []*orderGroup {
	var groups []*orderGroup
	for _, m := range ms {
		i := slices.IndexFunc(groups, func(g *orderGroup) bool { return g.profile.Name == m.offer.Name })
		if i < 0 {
			groups = append(groups, &orderGroup{profile: m.offer})
			i = len(groups) - 1
		}
		groups[i].queue = append(groups[i].queue, m)
	}
	slices.SortFunc(groups, func(a, b *orderGroup) int {
		return cmp.Or(cmp.Compare(b.profile.FrameBufferMiB, a.profile.FrameBufferMiB), cmp.Compare(a.profile.Name, b.profile.Name))
	})
	for _, g := range groups {
		slices.SortFunc(g.queue, func(a, b *member) int { return cmp.Compare(a.vm.Name, b.vm.Name) })
	}
	return groups
}

// remaining is the demand of the VMs still queued, by profile, in vGPUs.
func remaining(groups []*orderGroup) []demand {
	ds := make([]demand, 0, len(groups))
	for _, g := range groups {
		if len(g.queue) > 0 {
			n := 0
			for _, m := range g.queue {
				n += max(m.count, 1)
			}
			ds = append(ds, demand{profile: g.profile, count: n})
		}
	}
	return ds
}

// orderSearch is powerOnOrder's search: depth first over which profile goes next, the
// largest first at each step, so the first order tried is the greedy one; a dead end
// (vSphere's choice of GPU stranded a later VM) backtracks. States already found to
// fail are skipped, and the search is bounded: past orderBudget it reports the longest
// prefix found as stuck.
type orderSearch struct {
	h      *inventory.Host
	groups []*orderGroup
	// want is how many VMs the order must hold.
	want int
	// order is the prefix being tried; longest the longest one that failed.
	order, longest []*member
	budget         int
	failed         map[string]bool
}

// next extends the order from the occupancy occ, and tells whether it completed it.
func (s *orderSearch) next(occ []inventory.Occupancy) bool {
	if len(s.order) == s.want {
		return true
	}
	if s.budget--; s.budget < 0 {
		return false
	}
	key := orderKey(occ, s.groups)
	if s.failed[key] {
		return false
	}
	for _, g := range s.groups {
		// VMs of one profile are interchangeable only when they have as many vGPUs:
		// the first of each count is tried.
		tried := map[int]bool{}
		for k, m := range g.queue {
			if tried[m.count] {
				continue
			}
			tried[m.count] = true
			next, ok := placeAll(s.h, occ, g.profile, m.count)
			if !ok {
				continue
			}
			g.queue = slices.Delete(g.queue, k, k+1)
			if packable(s.h, next, remaining(s.groups)) {
				s.order = append(s.order, m)
				if s.next(next) {
					return true
				}
				s.order = s.order[:len(s.order)-1]
			}
			g.queue = slices.Insert(g.queue, k, m)
		}
	}
	if len(s.order) > len(s.longest) || s.longest == nil {
		s.longest = slices.Clone(s.order)
	}
	s.failed[key] = true
	return false
}

// orderBudget bounds powerOnOrder's search. On hosts in same-size mode the first order
// tried works (see powerOnOrder's note); mixed-size hosts with a handful of profiles stay
// far below it. Past it the layout is refused rather than started.
const orderBudget = 20_000

// orderKey identifies powerOnOrder's search state: the GPUs' occupancy and the vGPU
// counts of the VMs of each profile left (in queue order, which is by name).
func orderKey(occ []inventory.Occupancy, groups []*orderGroup) string {
	var b strings.Builder
	for _, o := range occ {
		fmt.Fprintf(&b, "%s/%d/%d/%d/%v/%v/%v|", o.Profile, o.UsedMiB, o.Count, o.VMs, o.Slots, o.Sizes, o.Pinned)
	}
	for _, g := range groups {
		for _, m := range g.queue {
			fmt.Fprintf(&b, "%d,", m.count)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// orderGroup is powerOnOrder's queue of the VMs of one profile, by name.
type orderGroup struct {
	profile inventory.Profile
	queue   []*member
}

// placeAll places n vGPUs of p one after the other as vSphere's placement would (the
// vGPUs of one VM are placed in turn; NVIDIA lets them share a GPU), and returns the
// occupancy after, or false when one finds no GPU.
func placeAll(h *inventory.Host, occ []inventory.Occupancy, p inventory.Profile, n int) ([]inventory.Occupancy, bool) {
	next := slices.Clone(occ)
	on := map[int]bool{} // the GPUs the VM has a vGPU on: it counts once there
	for range max(n, 1) {
		gpu := inventory.Place(h, next, p)
		if gpu < 0 {
			return occ, false
		}
		next[gpu] = next[gpu].Add(p, h.GPUs[gpu])
		if !on[gpu] {
			on[gpu] = true
			next[gpu].VMs++
		}
	}
	return next, true
}

// packBudget bounds packSlots' search. A host has a handful of GPUs and a pool a few
// dozen vGPUs per host; the memo on GPU states keeps real searches far below it. Past
// it the answer is "does not fit", which stalls the pool with a message rather than
// starting a transition that might not finish.
const packBudget = 200_000

// packSlots is packable for hosts with GPUs in mixed-size mode: an exact search that
// puts each vGPU to start, largest first, on each GPU that can take it (inventory.Fits:
// its board, at the lowest free placement ID, as inventory.Occupancy.Add does), skipping
// GPUs in the same state and host states already found not to work.
func packSlots(h *inventory.Host, occ []inventory.Occupancy, ds []demand) bool {
	var items []inventory.Profile
	for _, d := range ds {
		for range d.count {
			items = append(items, d.profile)
		}
	}
	slices.SortStableFunc(items, func(x, y inventory.Profile) int { return cmp.Compare(y.FrameBufferMiB, x.FrameBufferMiB) })
	failed := map[string]bool{}
	budget := packBudget
	var rec func(k int, occ []inventory.Occupancy) bool
	rec = func(k int, occ []inventory.Occupancy) bool {
		if k == len(items) {
			return true
		}
		if budget--; budget < 0 {
			return false
		}
		keys := make([]string, len(occ))
		for i := range occ {
			keys[i] = gpuKey(h.GPUs[i], occ[i])
		}
		state := strconv.Itoa(k) + "|" + strings.Join(slices.Sorted(slices.Values(keys)), "|")
		if failed[state] {
			return false
		}
		tried := map[string]bool{}
		for i := range h.GPUs {
			if tried[keys[i]] || !inventory.Fits(h, occ, i, items[k]) {
				continue
			}
			tried[keys[i]] = true
			next := slices.Clone(occ)
			next[i] = occ[i].Add(items[k], h.GPUs[i])
			if rec(k+1, next) {
				return true
			}
		}
		failed[state] = true
		return false
	}
	return rec(0, slices.Clone(occ))
}

// gpuKey identifies a GPU's state for packSlots: GPUs with equal keys are
// interchangeable.
func gpuKey(g inventory.GPU, o inventory.Occupancy) string {
	var b strings.Builder
	// Sizes count too: the worst-case fit (inventory.Occupancy.fitsWherever) depends on
	// the sizes that run, not only on the slots the packed model marks.
	fmt.Fprintf(&b, "%s/%d/%s/%d/%s/%v/%s/%d/", g.Mode, g.MemoryMiB, o.Profile, o.UsedMiB, o.Family, slices.Sorted(slices.Values(o.Sizes)), g.Device, g.DeviceID)
	for k, t := range o.Slots {
		switch {
		case k < len(o.Pinned) && o.Pinned[k]:
			b.WriteByte('p') // pinned slots block exactly (fitsWherever)
		case t:
			b.WriteByte('1')
		default:
			b.WriteByte('0')
		}
	}
	return b.String()
}
