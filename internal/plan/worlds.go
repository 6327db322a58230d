package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// vSphere does not report where a running vGPU sits on a GPU in mixed-size mode, and
// NVIDIA's vGPU manager places each vGPU when it starts: after others came and went, a
// running vGPU may sit at any placement ID NVIDIA's table lists for its size. A 16 GiB
// vGPU on a 48 GB GPU sits at 0 or 32, an 8 GiB one at 0, 16, 24 or 40: two 8 GiB
// vGPUs at 16 and 24 leave no place for a 24 GiB one, at 0 and 16 they leave 24.
// gpupool never claims a layout fits on a guess of where they sit: on each GPU where it
// matters, every placement world (inventory.PlacementWorlds: a consistent choice of
// placement for each running vGPU) becomes a host state of its own, next to the device
// splits (splits.go), and the layout is feasible only if it fits, with one power-on
// order, in every state. The vGPUs gpupool starts are still counted at the worst of
// where NVIDIA may put them (inventory.Occupancy.fitsWherever).

// maxWorldStates bounds the host states (device splits times placement worlds)
// checked; past it the GPUs left out keep the worst-case count, which never says a vGPU
// fits where some placement of the running vGPUs would refuse it (see placementWorlds).
const maxWorldStates = 64

// maxWorldSteps bounds the search for one GPU's placement worlds.
const maxWorldSteps = 4_000

// runningVGPU is a vGPU that runs on a GPU now: whose, its profile, and whether it keeps
// running while the layout starts.
type runningVGPU struct {
	vm      string
	profile inventory.Profile
	keep    bool
}

// pinnedVGPU is a running vGPU of a placement world: at is its placement ID, ids those
// it could hold.
type pinnedVGPU struct {
	gpu     int
	vm      string
	profile string
	at      int
	ids     []int
}

// placementWorlds replaces each state by one state per placement world of the running
// vGPUs on the GPUs where their placement matters to the vGPUs to start.
//
// Note: the worlds are bounded (maxWorldSteps per GPU, maxWorldStates per host). Past
// the bound a GPU keeps the worst-case count (inventory.Occupancy.fitsWherever: a vGPU
// fits only if a placement ID is free wherever the running vGPUs sit), not a refusal:
// the vGPUs gpupool starts are counted that way when it plans, so a transition that
// started under that count must not be refused half way when they run and make the
// worlds too many (TestPlacementWorldsBound).
func (a *analysis) placementWorlds(h *inventory.Host, states []hostState, starting []*member) []hostState {
	var out []hostState
	for _, st := range states {
		var gpus []int
		var worlds [][][]int
		n, budget := 1, maxWorldStates/len(states)
		for i, g := range h.GPUs {
			if !placementMatters(h, i, st, starting) {
				continue
			}
			ws, ok := inventory.PlacementWorlds(g, runningOf(st.running[i]), offerProfiles(starting), maxWorldSteps)
			if !ok || len(ws) == 0 || n*len(ws) > budget {
				continue // the worst-case count stands (see the note)
			}
			gpus, worlds = append(gpus, i), append(worlds, ws)
			n *= len(ws)
		}
		if len(gpus) == 0 {
			out = append(out, st)
			continue
		}
		choice := make([]int, len(gpus))
		for range n {
			out = append(out, a.world(h, st, gpus, worlds, choice))
			for j := len(choice) - 1; j >= 0; j-- { // next choice, as a counter
				if choice[j]++; choice[j] < len(worlds[j]) {
					break
				}
				choice[j] = 0
			}
		}
	}
	return out
}

// placementMatters tells whether where the running vGPUs of GPU i sit can decide
// whether a vGPU to start fits there: a mixed-size GPU running vGPUs gpupool can size,
// of the board and series family of one of the vGPUs to start.
func placementMatters(h *inventory.Host, i int, st hostState, starting []*member) bool {
	g := h.GPUs[i]
	if !g.Mixed() || len(st.running[i]) == 0 || st.opaque[i] {
		return false
	}
	family := inventory.Family(st.running[i][0].profile.Name)
	return slices.ContainsFunc(starting, func(m *member) bool {
		return h.RunsOn(i, m.offer.Name) == inventory.Runs && !inventory.IsMIG(m.offer.Name) && inventory.Family(m.offer.Name) == family
	})
}

func runningOf(rs []runningVGPU) []inventory.Running {
	out := make([]inventory.Running, len(rs))
	for i, r := range rs {
		out[i] = inventory.Running{Profile: r.profile, Keep: r.keep}
	}
	return out
}

func offerProfiles(ms []*member) []inventory.Profile {
	out := make([]inventory.Profile, len(ms))
	for i, m := range ms {
		out[i] = m.offer
	}
	return out
}

// world is state st with the running vGPUs of GPUs gpus at the placements of the
// chosen worlds: each pinned where it sits.
func (a *analysis) world(h *inventory.Host, st hostState, gpus []int, worlds [][][]int, choice []int) hostState {
	ns := st
	ns.current, ns.freed = slices.Clone(st.current), slices.Clone(st.freed)
	ns.where = nil
	for j, i := range gpus {
		g := h.GPUs[i]
		at := worlds[j][choice[j]]
		cur, freed := inventory.Occupancy{VMs: st.current[i].VMs}, inventory.Occupancy{VMs: st.freed[i].VMs}
		for k, r := range st.running[i] {
			if at[k] < 0 {
				continue // a leaving vGPU the keepers leave no room for: added below
			}
			cur = cur.AddAt(r.profile, g, at[k])
			if r.keep {
				freed = freed.AddAt(r.profile, g, at[k])
			}
			ids, _, _ := inventory.PlacementIDs(g, r.profile.FrameBufferMiB)
			ns.where = append(ns.where, pinnedVGPU{gpu: i, vm: r.vm, profile: r.profile.Name, at: at[k], ids: ids})
		}
		for k, r := range st.running[i] {
			if at[k] < 0 {
				cur = cur.Add(r.profile, g) // counted wherever it may sit, while it runs
			}
		}
		ns.current[i], ns.freed[i] = cur, freed
	}
	return ns
}

// placementRefusal is msg, the reason the layout does not fit in state k, said as a
// refusal that comes from not knowing where the running vGPUs sit (and, when the
// split is unknown too, which split holds).
func (a *analysis) placementRefusal(ha *hostAnalysis, hs hostSplits, states []hostState, k int, msg string) string {
	h, st := ha.host, states[k]
	var may, at, vms []string
	for _, p := range st.where {
		may = append(may, fmt.Sprintf("VM %s's %s on GPU %s may sit at placement %s", p.vm, p.profile, h.GPUs[p.gpu].PCIID, orList(p.ids)))
		at = append(at, fmt.Sprintf("VM %s's %s at %d", p.vm, p.profile, p.at))
		if !slices.Contains(vms, p.vm) {
			vms = append(vms, p.vm)
		}
	}
	under := "with " + strings.Join(at, ", ")
	if len(hs.unknown) > 0 {
		under += ", under " + a.describeSplit(h, hs, st.split)
	}
	return fmt.Sprintf("host %s: vSphere does not report where running vGPUs sit on a GPU in mixed-size mode, and NVIDIA's vGPU manager may have put each at any placement ID its table lists (%s); layout %s fits with some of these placements but not %s, and gpupool starts a layout only if it fits wherever they sit. There: %s. %s",
		h.Name, strings.Join(may, "; "), a.layout.Name, under, msg, a.placementHelp(vms))
}

// placementHelp says what lets the layout start whatever the placements: fewer
// running vGPUs of unknown placement next to it.
func (a *analysis) placementHelp(vms []string) string {
	var outside []string
	for _, name := range vms {
		if vm, ok := a.vms[name]; !ok || !a.pool[vm] {
			outside = append(outside, name)
		}
	}
	if len(outside) == 0 {
		return "The layout starts once those vGPUs stop (or run elsewhere)"
	}
	them := "it"
	if len(outside) > 1 {
		them = "them"
	}
	return fmt.Sprintf("Power %s off (or move %s to another host) while the layout starts: on a GPU with no running vGPU gpupool knows every placement", vmList(outside), them)
}

// orList writes placement IDs as "0, 16, 24 or 40".
func orList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
