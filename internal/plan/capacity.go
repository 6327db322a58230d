package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// The capacity half of the feasibility check: per host, whether the layout's vGPUs pack
// onto the physical GPUs under each GPU's mode, and the messages that say why not.

// checkCapacity finds what runs on ha's GPUs now and once the pool's departing vGPUs are
// down, and an order in which vSphere would place the vGPUs to start.
func (a *analysis) checkCapacity(ha *hostAnalysis) {
	if msg := a.capacity(ha); msg != "" {
		a.problem(ReasonInsufficientGPU, "%s", msg)
	}
}

// capacity is checkCapacity without the report: "" when the vGPUs to start fit, else
// why not.
func (a *analysis) capacity(ha *hostAnalysis) string {
	h := ha.host
	freeing := map[string]bool{}
	var starting []*member
	for _, m := range ha.members {
		if m.vm.Host == h.Name && (m.fate == leaves || m.fate == reprofiles) && !m.away {
			freeing[m.vm.Name] = true
		}
		// Note: held VMs count as if they were acted on, so that feasibility does not
		// depend on them; power-ons that need a held VM's GPU stay Later. A VM of an
		// unavailable host is away: it keeps its vGPUs there and starts nothing until
		// the host is back (then the plan is made again), so it is neither freed nor
		// started; counting its start too would count it twice.
		if (m.fate == arrives || m.fate == reprofiles) && !m.blocked && !m.away && a.startsOn(m) == h {
			starting = append(starting, m)
		}
	}
	hs := a.splitsOf(h)
	states := make([]hostState, len(hs.splits))
	for k, sp := range hs.splits {
		states[k] = a.occupy(h, freeing, sp, hs.none)
		states[k].split = k
	}
	ha.splits = states
	ha.set(states[0])
	ha.order = nil
	if len(starting) == 0 {
		return ""
	}

	if msg := a.unsureBoards(ha, starting); msg != "" {
		return msg
	}
	if hs.tooMany {
		return a.everySplit(ha, hs, states, starting)
	}
	states = a.placementWorlds(h, states, starting)
	ha.splits = states
	ha.set(states[0])
	return a.everySplit(ha, hs, states, starting)
}

// hostState is what runs on a host's GPUs under one split (see splits.go): now
// (current), once the pool's departing vGPUs are down (freed), and who keeps running.
type hostState struct {
	current, freed []inventory.Occupancy
	keepers        [][]string
	// split is the index of the state's split (hostSplits.splits).
	split int
	// running are, per GPU, the vGPUs of known profile that run there now; opaque marks
	// a GPU with a vGPU gpupool cannot size (taken whole).
	running [][]runningVGPU
	opaque  []bool
	// where is the state's placement world (worlds.go): where it has the running vGPUs
	// of the GPUs on which their placement matters sit; nil in the worst-case count.
	where []pinnedVGPU
}

func (ha *hostAnalysis) set(st hostState) {
	ha.current, ha.freed, ha.keepers = st.current, st.freed, st.keepers
}

// occupy counts what runs on h's GPUs under split sp; the VMs of none take every GPU
// that lists them whole.
func (a *analysis) occupy(h *inventory.Host, freeing map[string]bool, sp split, none map[string]bool) hostState {
	st := hostState{current: make([]inventory.Occupancy, len(h.GPUs)), freed: make([]inventory.Occupancy, len(h.GPUs)), keepers: make([][]string, len(h.GPUs)),
		running: make([][]runningVGPU, len(h.GPUs)), opaque: make([]bool, len(h.GPUs))}
	seen, devices := map[string]int{}, map[string]int{}
	for i, g := range h.GPUs {
		for _, name := range a.largestFirst(h, g.VMs) {
			var devs []string
			switch at, ok := sp[name]; {
			case none[name]:
				devs = []string{""} // add: the GPU whole
			case ok:
				devs = at[i]
			default:
				for range a.vgpusOn(h, name, seen[name]) {
					devs = append(devs, a.nextDevice(name, devices))
				}
			}
			seen[name]++
			for _, p := range devs {
				if prof, ok := a.runningProfile(h, g, name, p); ok {
					st.running[i] = append(st.running[i], runningVGPU{vm: name, profile: prof, keep: !freeing[name]})
				} else {
					st.opaque[i] = true
				}
				st.current[i] = a.add(st.current[i], h, g, name, p)
				if !freeing[name] {
					st.freed[i] = a.add(st.freed[i], h, g, name, p)
				}
			}
			st.current[i].VMs++ // vSphere's policies count VMs, not vGPUs (inventory.Place)
			if !freeing[name] {
				st.freed[i].VMs++
				st.keepers[i] = append(st.keepers[i], name)
			}
		}
	}
	return st
}

// vgpusOn is how many of the VM's vGPUs run on the k-th GPU of h whose graphicsInfo
// lists it. vSphere lists a VM once per GPU it has vGPUs on, not once per vGPU: a VM
// with n vGPUs listed on k GPUs is taken to have n/k on each, the remainder on the first
// ones listed (sorted by PCI id), so a VM with two vGPUs listed on one GPU counts twice.
func (a *analysis) vgpusOn(h *inventory.Host, name string, k int) int {
	vm, ok := a.vms[name]
	if !ok || vm.VGPUCount() <= 1 {
		return 1
	}
	listed := 0
	for _, g := range h.GPUs {
		if slices.Contains(g.VMs, name) {
			listed++
		}
	}
	n := vm.VGPUCount() / max(listed, 1)
	if k < vm.VGPUCount()%max(listed, 1) {
		n++
	}
	return max(n, 1)
}

// largestFirst orders the VMs running on a GPU by frame buffer, largest first, then by
// name. vSphere does not report placement IDs, so on a mixed-size GPU gpupool assumes
// the running vGPUs sit packed from placement ID 0 as if started largest first; a GPU
// fragmented otherwise fails a power-on that the plan expected to fit, which the
// controller reports and retries after the next observation.
func (a *analysis) largestFirst(h *inventory.Host, names []string) []string {
	fb := func(name string) int64 {
		if vm, ok := a.vms[name]; ok {
			if p, ok := offerOf(h, vm.Profile); ok {
				return p.FrameBufferMiB
			}
		}
		return 1 << 40 // unknown: the whole GPU, see add
	}
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(x, y string) int { return cmp.Or(cmp.Compare(fb(y), fb(x)), cmp.Compare(x, y)) })
	return out
}

// startsOn is the host a member's vGPUs start on: its target, else its own.
func (a *analysis) startsOn(m *member) *inventory.Host {
	if m.target != nil {
		return m.target
	}
	h, _ := a.findHost(m.vm.Host)
	return h
}

// add returns o with one vGPU of profile (of the VM called name) added, as running on
// GPU g of h.
func (a *analysis) add(o inventory.Occupancy, h *inventory.Host, g inventory.GPU, name, profile string) inventory.Occupancy {
	p, ok := a.runningProfile(h, g, name, profile)
	if !ok {
		// Note: an unknown vGPU takes the GPU whole: nothing is known to fit next to it.
		return o.Full(g)
	}
	if !o.FitsOn(p, g) {
		// Note: what runs contradicts the GPU's mode (mixed profiles in same-size mode,
		// a vGPU off the placement grid); keep the first profile and count the memory,
		// so nothing more is placed there.
		full := o.Full(g)
		full.UsedMiB = o.UsedMiB + p.FrameBufferMiB
		if o.Count == 0 {
			full.Profile = p.Name
		}
		return full
	}
	return o.Add(p, g)
}

// runningProfile is the profile a running vGPU of profile (of the VM called name) is
// counted at on GPU g of h; false for an unknown VM or device, which takes the GPU whole.
func (a *analysis) runningProfile(h *inventory.Host, g inventory.GPU, name, profile string) (inventory.Profile, bool) {
	if _, ok := a.vms[name]; !ok || profile == "" {
		return inventory.Profile{}, false
	}
	p, ok := offerOf(h, profile)
	if !ok {
		p = inventory.Profile{Name: profile, FrameBufferMiB: g.MemoryMiB}
		if fb, err := inventory.ProfileFrameBufferMiB(profile); err == nil {
			p.FrameBufferMiB = fb
		}
	}
	return p, true
}

// demands counts the vGPUs to start by profile, largest frame buffer first.
func demands(ms []*member) []demand {
	var ds []demand
	for _, m := range ms {
		i := slices.IndexFunc(ds, func(d demand) bool { return d.profile.Name == m.offer.Name })
		if i < 0 {
			ds = append(ds, demand{profile: m.offer})
			i = len(ds) - 1
		}
		ds[i].count += max(m.count, 1)
	}
	slices.SortFunc(ds, func(x, y demand) int {
		return cmp.Or(cmp.Compare(y.profile.FrameBufferMiB, x.profile.FrameBufferMiB), cmp.Compare(x.profile.Name, y.profile.Name))
	})
	return ds
}

// shortage says why the vGPUs of ds do not fit ha's GPUs, naming the GPUs and what
// runs on them.
func (a *analysis) shortage(ha *hostAnalysis, ds []demand) string {
	if msg := a.boardShortage(ha, ds); msg != "" {
		return msg
	}
	if slices.ContainsFunc(ha.host.GPUs, inventory.GPU.Mixed) {
		return a.slotShortage(ha, ds)
	}
	return a.sizeShortage(ha, ds) + mixedHint(ha.host, ha.freed, ds)
}

// sizeShortage is shortage on a host whose GPUs are all in same-size mode.
func (a *analysis) sizeShortage(ha *hostAnalysis, ds []demand) string {
	h := ha.host
	var largest int64
	for _, g := range h.GPUs {
		largest = max(largest, g.MemoryMiB)
	}
	for _, d := range ds {
		if d.profile.FrameBufferMiB > largest {
			if len(h.GPUs) == 0 {
				return fmt.Sprintf("host %s: layout %s needs %d x %s, but the host reports no GPUs", h.Name, a.layout.Name, d.count, d.profile.Name)
			}
			return fmt.Sprintf("host %s: %s needs %s per vGPU, the largest GPU has %s", h.Name, d.profile.Name, gib(d.profile.FrameBufferMiB), gib(largest))
		}
	}
	var free []int
	for i, o := range ha.freed {
		if o.Count == 0 {
			free = append(free, i)
		}
	}
	if len(h.GPUs) == 1 && len(ds) == 1 && len(free) == 1 {
		d, g := ds[0], h.GPUs[0]
		return fmt.Sprintf("host %s: %d x %s need %s, GPU %s has %s", h.Name, d.count, d.profile.Name, gib(int64(d.count)*d.profile.FrameBufferMiB), g.PCIID, gib(g.MemoryMiB))
	}

	sizes := make([]int64, len(free))
	for k, i := range free {
		sizes[k] = h.GPUs[i].MemoryMiB
	}
	slices.SortFunc(sizes, func(x, y int64) int { return cmp.Compare(y, x) })
	var needs []string
	for _, d := range ds {
		left := d.count - lockedRoom(h, ha.freed, d.profile)
		if left <= 0 {
			continue
		}
		n := 0
		for _, mem := range sizes {
			if per := inventory.PerGPU(mem, d.profile.FrameBufferMiB); per > 0 && left > 0 {
				left -= per
				n++
			}
		}
		if left > 0 {
			per := max(inventory.PerGPU(largest, d.profile.FrameBufferMiB), 1)
			n += (left + per - 1) / per
		}
		needs = append(needs, fmt.Sprintf("%d %s for %s", n, plural(n, "GPU"), d.profile.Name))
	}
	msg := fmt.Sprintf("host %s: layout %s needs %s, %d of %d GPUs free", h.Name, a.layout.Name, strings.Join(needs, " and "), len(free), len(h.GPUs))

	var details []string
	for i, o := range ha.freed {
		if o.Count > 0 {
			details = append(details, a.describeGPU(ha, i, ds))
		}
	}
	if len(free) > 1 && slices.Min(sizes) != slices.Max(sizes) {
		var fs []string
		for _, i := range free {
			fs = append(fs, fmt.Sprintf("%s with %s", h.GPUs[i].PCIID, gib(h.GPUs[i].MemoryMiB)))
		}
		details = append(details, "free: "+strings.Join(fs, ", "))
	}
	if len(details) > 0 {
		msg += " (" + strings.Join(details, "; ") + ")"
	}
	return msg
}

// describeGPU says what keeps running on GPU i of ha, for whom, and whether there is
// room for more of a demanded profile.
func (a *analysis) describeGPU(ha *hostAnalysis, i int, ds []demand) string {
	h, o := ha.host, ha.freed[i]
	var foreign, ours []string
	for _, name := range ha.keepers[i] {
		if vm, ok := a.vms[name]; ok && a.pool[vm] {
			ours = append(ours, name)
		} else {
			foreign = append(foreign, name)
		}
	}
	what := o.Profile
	if what == "" {
		what = "a vGPU of unknown profile"
	}
	if o.Count > 1 {
		what = fmt.Sprintf("%d x %s", o.Count, what)
	}
	var whose []string
	if len(foreign) > 0 {
		whose = append(whose, vmList(foreign)+" outside this pool")
	}
	if len(ours) == 1 {
		whose = append(whose, vmList(ours)+" of this pool, which stays")
	} else if len(ours) > 1 {
		whose = append(whose, vmList(ours)+" of this pool, which stay")
	}
	msg := fmt.Sprintf("GPU %s runs %s for %s", h.GPUs[i].PCIID, what, strings.Join(whose, " and "))
	for _, d := range ds {
		if d.profile.Name == o.Profile {
			if room := min(int((h.GPUs[i].MemoryMiB-o.UsedMiB)/d.profile.FrameBufferMiB), inventory.MaxVGPUsPerGPU-o.Count); room > 0 {
				msg += fmt.Sprintf(", room for %d more", room)
			}
		}
	}
	return msg
}
