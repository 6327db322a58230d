package vgpusim_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/vgpusim"
)

// The differential test's world generator. It draws every feature both models have:
// GPUs of several NVIDIA boards, mixed in one host (a type runs only on its board's GPUs;
// NVIDIA's mixed-size placement tables differ by frame buffer), same-size and
// mixed-size GPUs (per host, and per GPU overriding the host), A-, B-, Q- and C-series
// profiles offered side by side (including NVIDIA's 512 MiB "0" sizes on Tesla M10),
// VMs and layout workers with several vGPUs (Worker.VGPUs), hosts in a cluster (so a
// powered-off VM on a host in maintenance can be started on another host of it), and
// hosts in maintenance mode, entering it (an EnterMaintenanceMode_Task held running by a
// powered-on VM), disconnected or not responding.

// genOptions choose the features a generated world uses.
type genOptions struct {
	// MixedSize puts some hosts, and some single GPUs, in mixed-size mode.
	MixedSize bool
	// MaxVGPUs gives VMs and layout workers 1..MaxVGPUs vGPUs.
	MaxVGPUs int
	// Unavailable puts some hosts in maintenance mode, entering it, disconnected or not
	// responding, and most worlds' hosts in one cluster.
	Unavailable bool
	// Series offers A-, B-, Q- and C-series profiles (and 512 MiB ones) side by side;
	// without it every profile is Q-series of 1 GiB or more.
	Series bool
	// MixedDevices gives some VMs two or three vGPU devices of different sizes of one
	// series (NVIDIA Multi-vGPU), which no layout worker asks for; started, they often
	// spread over GPUs (mixedDevicesSpread), which vSphere reports without the split.
	MixedDevices bool
	// Datastores gives some hosts a local datastore besides (or instead of) the shared
	// one, and some VMs their files there: a host that does not mount a VM's datastore
	// cannot power it on (vCenter uses the VM's own host instead).
	Datastores bool
	// Boards draws each host's GPUs from several NVIDIA boards (genBoards), a third of
	// them mixing two boards in one host; without it every GPU is an NVIDIA A40.
	Boards bool
	// UnknownBoards rarely gives a GPU a model neither side identifies (unknownBoard).
	UnknownBoards bool
}

// sameSizeOptions is the subset the planner modelled first: same-size GPUs, one vGPU
// per VM, hosts all available.
var sameSizeOptions = genOptions{MaxVGPUs: 1, Boards: true}

// fullOptions is every feature.
var fullOptions = genOptions{MixedSize: true, MaxVGPUs: 2, Unavailable: true, Series: true, MixedDevices: true, Datastores: true, Boards: true, UnknownBoards: true}

// world is a generated scenario: the simulator's inventory, the VMs to power on after
// it starts (in that order; vgpusim refuses the ones that do not fit, as vSphere would),
// the hosts to put into maintenance mode after that (through EnterMaintenanceMode_Task:
// it stays running while a VM runs there), and the pool's spec.
type world struct {
	inv      *vgpusim.Inventory
	startOn  []string
	entering []string
	// down are the hosts that lose their connection (disconnected, notResponding)
	// once the VMs of startOn run, as a host failure would: their VMs keep running.
	down map[string]string
	spec *gpupoolv1.GPUPoolProfileSpec
}

// genBoard is a board the generator puts in hosts, with the sizes (GiB) of its Q- and
// A-series types and of its C-series types (NVIDIA vGPU user guide 17.0, appendix A.1,
// and NVIDIA AI Enterprise, "NVIDIA vGPU (C-Series)"), and whether NVIDIA supports
// mixed-size mode on it. B-series types are the Q sizes up to 2 GiB. The generator's
// statement of the boards is its own: it shares data with neither model.
type genBoard struct {
	model, token string
	gib          int64
	mixed        bool
	q, c         []int64
}

var (
	q48, c48 = []int64{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}, []int64{4, 6, 8, 12, 16, 24, 48}
	q24, c24 = []int64{1, 2, 3, 4, 6, 8, 12, 24}, []int64{4, 6, 8, 12, 24}
	q16, c16 = []int64{1, 2, 4, 8, 16}, []int64{4, 8, 16}
)

var genBoards = []genBoard{
	{"NVIDIA A40", "a40", 48, true, q48, c48},
	{"NVIDIA L40S", "l40s", 48, true, q48, c48},
	{"NVIDIA L4", "l4", 24, true, q24, c24},
	{"NVIDIA A10", "a10", 24, true, q24, c24},
	{"NVIDIA A16", "a16", 16, true, q16, c16},
	{"Tesla T4", "t4", 16, false, q16, c16},
	// Maxwell: 512 MiB types ("0" sizes), no mixed-size mode.
	{"Tesla M10", "m10", 8, false, []int64{0, 1, 2, 4, 8}, nil},
}

// unknownBoard is a GPU model neither model identifies: the simulator lets it run
// whatever its host offers, the planner does not start types it cannot judge on a host
// whose GPUs are of several kinds (known strictness "unknownBoard"). It offers A40 types.
var unknownBoard = genBoard{"NVIDIA GPU", "a40", 48, true, q48, c48}

func profileName(token string, gib int64, series string) string {
	return fmt.Sprintf("grid_%s-%d%s", token, gib, series)
}

// boardOf is the generator's board of a type name: grid_l4-8c is l4.
func boardOf(profile string) string {
	rest, _ := strings.CutPrefix(profile, "grid_")
	token, _, _ := strings.Cut(rest, "-")
	return token
}

// genWorld makes 1-3 hosts with 1-3 GPUs of 8-48 GiB, random policies and profile
// offers, 1-5 pool VMs and 0-2 foreign VMs per host, and two layouts of the pool.
func genWorld(r *rand.Rand, o genOptions) *world {
	w := &world{inv: &vgpusim.Inventory{Datacenter: "dc1"}}
	cluster := ""
	if o.Unavailable && r.IntN(4) > 0 {
		cluster = "gpu"
	}
	var pool []*vgpusim.VM
	for h := range 1 + r.IntN(3) {
		host := genHost(r, o, h)
		if cluster != "" && r.IntN(6) > 0 {
			host.Cluster = cluster
			// Clusters are mostly built of like hosts: offering what the first one
			// offers lets a VM whose host is in maintenance start on another.
			if first := clusterHost(w.inv, cluster); first != nil && r.IntN(4) > 0 {
				host.GPUs = slices.Clone(first.GPUs)
				host.Profiles = slices.Clone(first.Profiles)
			}
		}
		if host.ConnectionState != "" {
			if w.down == nil {
				w.down = map[string]string{}
			}
			w.down[host.Name], host.ConnectionState = host.ConnectionState, ""
		} else if o.Unavailable && !host.InMaintenanceMode && r.IntN(8) == 0 {
			w.entering = append(w.entering, host.Name)
		}
		if o.Datastores && r.IntN(3) == 0 {
			host.Datastores = [][]string{{"datastore1", "local-" + host.Name}, {"local-" + host.Name}}[r.IntN(2)]
		}
		w.inv.Hosts = append(w.inv.Hosts, host)
		for i := range 1 + r.IntN(5) {
			w.inv.VMs = append(w.inv.VMs, genVM(r, o, &host, fmt.Sprintf("vm-%d-%d", h, i)))
		}
		for i := range r.IntN(3) {
			w.inv.VMs = append(w.inv.VMs, genVM(r, o, &host, fmt.Sprintf("other-%d-%d", h, i)))
		}
	}
	for i := range w.inv.VMs {
		vm := &w.inv.VMs[i]
		if strings.HasPrefix(vm.Name, "vm-") {
			pool = append(pool, vm)
		}
		on := 6
		if !strings.HasPrefix(vm.Name, "vm-") {
			on = 3
		}
		// A host in maintenance mode runs no VM and rarely keeps suspended ones (they
		// can resume only there): mostly powered off, the VMs gpupool may start elsewhere.
		maintenance := hostByName(w.inv, vm.Host).InMaintenanceMode
		switch n := r.IntN(10); {
		case maintenance:
			if n == 0 {
				vm.PowerState = string(inventory.Suspended)
			}
		case n < on && vm.Profile != "":
			w.startOn = append(w.startOn, vm.Name)
		case n < 8:
			vm.PowerState = string(inventory.Suspended)
		}
	}
	r.Shuffle(len(w.startOn), func(i, j int) { w.startOn[i], w.startOn[j] = w.startOn[j], w.startOn[i] })
	if o.MixedSize {
		drawHistories(rand.New(rand.NewPCG(r.Uint64(), 33)), w.inv)
	}

	w.spec = &gpupoolv1.GPUPoolProfileSpec{Parking: gpupoolv1.ParkingSuspend, DiscardSuspendedState: true}
	if r.IntN(3) == 0 {
		w.spec.Parking = gpupoolv1.ParkingPowerOff
	}
	for l := range 2 {
		w.spec.Layouts = append(w.spec.Layouts, genLayout(r, o, w.inv, pool, fmt.Sprintf("l%d", l)))
	}
	w.spec.DefaultLayout = "l0"
	return w
}

// drawHistories gives half the VMs with vGPUs a history's placements (vgpusim's
// VM.Placements): on a GPU in mixed-size mode each of their vGPUs starts at the lowest
// free ID at or above a random one, as if other vGPUs had come and gone, not where a
// fresh GPU would put it. vSphere does not report it; the planner must hold wherever it
// is. The pool's VMs keep theirs at every power-on, so the vGPUs gpupool starts land
// anywhere too. Its own generator (seeded from the world's) leaves the world's draws as
// they were.
func drawHistories(r *rand.Rand, inv *vgpusim.Inventory) {
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if vm.Profile == "" || r.IntN(2) == 0 {
			continue
		}
		vm.Placements = make([]int, max(vm.VGPUs, len(vm.Profiles), 1))
		for k := range vm.Placements {
			vm.Placements[k] = r.IntN(48)
		}
	}
}

func genHost(r *rand.Rand, o genOptions, n int) vgpusim.Host {
	host := vgpusim.Host{Name: fmt.Sprintf("esx-%02d", n), Policy: inventory.PolicyPerformance}
	if r.IntN(2) == 0 {
		host.Policy = inventory.PolicyConsolidation
	}
	if o.MixedSize && r.IntN(2) == 0 {
		host.VGPUMode = "mixedSize"
	}
	if o.Unavailable {
		switch r.IntN(30) {
		case 0, 1, 2, 3:
			host.InMaintenanceMode = true
		case 4:
			host.ConnectionState = inventory.Disconnected
		case 5:
			host.ConnectionState = inventory.NotResponding
		}
	}
	for g, b := range genHostBoards(r, o, 1+r.IntN(3)) {
		gpu := vgpusim.GPU{Model: b.model, MemoryGiB: b.gib, PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20)}
		if o.MixedSize && r.IntN(4) == 0 {
			gpu.VGPUMode = []string{"sameSize", "mixedSize"}[r.IntN(2)]
		}
		if !b.mixed && (gpu.VGPUMode == "mixedSize" || (gpu.VGPUMode == "" && host.VGPUMode == "mixedSize")) {
			gpu.VGPUMode = "sameSize" // vSphere offers mixed-size mode only where NVIDIA does
		}
		host.GPUs = append(host.GPUs, gpu)
		if g == 0 || host.GPUs[g-1].Model != b.model {
			host.Profiles = append(host.Profiles, genProfiles(r, o, b, host.Profiles)...)
		}
	}
	if len(host.Profiles) == 0 {
		b := genBoardOf(host.GPUs[0].Model)
		host.Profiles = append(host.Profiles, vgpusim.Profile{Name: profileName(b.token, b.q[len(b.q)-1], "q"), SuspendSupported: true})
	}
	return host
}

// genHostBoards picks the boards of a host's n GPUs: one board, or with o.Boards two
// (a third of the hosts with two GPUs or more), and with o.UnknownBoards rarely a model
// no one identifies.
func genHostBoards(r *rand.Rand, o genOptions, n int) []genBoard {
	pick := func() genBoard {
		if o.UnknownBoards && r.IntN(40) == 0 {
			return unknownBoard
		}
		if !o.Boards {
			return genBoards[0]
		}
		return genBoards[r.IntN(len(genBoards))]
	}
	first, second := pick(), pick()
	out := make([]genBoard, n)
	for i := range out {
		out[i] = first
		if i > 0 && o.Boards && r.IntN(3) == 0 {
			out[i] = second
		}
	}
	return out
}

func genBoardOf(model string) genBoard {
	for _, b := range genBoards {
		if b.model == model {
			return b
		}
	}
	return unknownBoard
}

// genProfiles offers some types of board b, of the series seriesOffered picks per size,
// that have not been offered yet.
func genProfiles(r *rand.Rand, o genOptions, b genBoard, have []vgpusim.Profile) []vgpusim.Profile {
	var out []vgpusim.Profile
	for _, gib := range b.q {
		if gib == 0 && !o.Series {
			continue
		}
		for _, series := range seriesOffered(r, o) {
			if (series == "b" && gib > 2) || (series == "c" && !slices.Contains(b.c, gib)) {
				continue
			}
			name := profileName(b.token, gib, series)
			if !slices.ContainsFunc(have, func(p vgpusim.Profile) bool { return p.Name == name }) &&
				!slices.ContainsFunc(out, func(p vgpusim.Profile) bool { return p.Name == name }) {
				out = append(out, vgpusim.Profile{Name: name, SuspendSupported: r.IntN(20) > 0})
			}
		}
	}
	return out
}

// seriesOffered picks the series a host offers of one size: mostly Q, with A, B and C
// side by side when o.Series.
func seriesOffered(r *rand.Rand, o genOptions) []string {
	if !o.Series {
		if r.IntN(10) < 6 {
			return []string{"q"}
		}
		return nil
	}
	var out []string
	for _, s := range []string{"q", "a", "b", "c"} {
		if r.IntN(10) < map[string]int{"q": 5, "a": 2, "b": 2, "c": 3}[s] {
			out = append(out, s)
		}
	}
	return out
}

func genVM(r *rand.Rand, o genOptions, h *vgpusim.Host, name string) vgpusim.VM {
	vm := vgpusim.VM{Name: name, Host: h.Name, Folder: "pool"}
	if len(h.Datastores) > 0 {
		vm.Datastore = h.Datastores[r.IntN(len(h.Datastores))]
	}
	if r.IntN(10) > 0 {
		vm.Profile = h.Profiles[r.IntN(len(h.Profiles))].Name
		vm.VGPUs = 1 + r.IntN(max(o.MaxVGPUs, 1))
		if o.MixedDevices && vm.VGPUs > 1 && r.IntN(4) == 0 {
			vm.Profiles = mixedDevices(r, h, vm.Profile, vm.VGPUs)
		} else if side := sideRand(vm); o.MixedDevices && side.IntN(8) == 0 {
			// Two or three devices that differ, which vSphere's placement often spreads
			// over GPUs without reporting the split. Drawn from sideRand, so that the
			// worlds the seeds made before keep their other draws.
			n := 2 + side.IntN(2)
			if vm.Profiles = mixedDevices(side, h, vm.Profile, n); vm.Profiles != nil {
				vm.VGPUs = n
			}
		}
	}
	return vm
}

// genLayout picks some pool VMs with one or two profiles per host and 1..MaxVGPUs vGPUs
// each, mostly only what packs into the host's empty GPUs one profile per GPU (first
// fit), so that many layouts are feasible; foreign VMs and the odd unchecked worker make
// some infeasible.
func genLayout(r *rand.Rand, o genOptions, inv *vgpusim.Inventory, pool []*vgpusim.VM, name string) gpupoolv1.Layout {
	lay := gpupoolv1.Layout{Name: name}
	type gpu struct {
		free    int64
		profile string
		board   string
	}
	free := map[string][]*gpu{}
	hosts := map[string]*vgpusim.Host{}
	choice := map[string][]string{}
	for i := range inv.Hosts {
		h := &inv.Hosts[i]
		hosts[h.Name] = h
		for _, g := range h.GPUs {
			board := genBoardOf(g.Model).token
			if g.Model == unknownBoard.model {
				board = "" // runs what the host offers
			}
			free[h.Name] = append(free[h.Name], &gpu{free: g.MemoryGiB * 1024, board: board})
		}
		for range 1 + r.IntN(2) {
			choice[h.Name] = append(choice[h.Name], h.Profiles[r.IntN(len(h.Profiles))].Name)
		}
	}
	fits := func(host, p string, n int) bool {
		mib, _ := inventory.ProfileFrameBufferMiB(p)
		for range n {
			placed := false
			for _, g := range free[host] {
				if (g.profile == "" || g.profile == p) && (g.board == "" || g.board == boardOf(p)) && g.free >= mib {
					g.profile, g.free, placed = p, g.free-mib, true
					break
				}
			}
			if !placed {
				return false
			}
		}
		return true
	}
	for _, vm := range pool {
		if r.IntN(4) == 0 {
			continue
		}
		ps := choice[vm.Host]
		p := ps[r.IntN(len(ps))]
		n := 1 + r.IntN(max(o.MaxVGPUs, 1))
		if !fits(vm.Host, p, n) && r.IntN(8) > 0 {
			continue
		}
		// Every worker is noNode: the differential test is about vSphere, not nodes.
		wk := gpupoolv1.Worker{VM: vm.Name, Profile: p, NoNode: true}
		if n > 1 || r.IntN(3) == 0 {
			wk.VGPUs = int32(n) // 1 written out, or left to its default, means the same
		}
		lay.Workers = append(lay.Workers, wk)
	}
	if len(lay.Workers) == 0 {
		vm := pool[0]
		lay.Workers = append(lay.Workers, gpupoolv1.Worker{VM: vm.Name, Profile: hosts[vm.Host].Profiles[0].Name, NoNode: true})
	}
	return lay
}

func hostByName(inv *vgpusim.Inventory, name string) *vgpusim.Host {
	for i := range inv.Hosts {
		if inv.Hosts[i].Name == name {
			return &inv.Hosts[i]
		}
	}
	return &vgpusim.Host{}
}

func clusterHost(inv *vgpusim.Inventory, cluster string) *vgpusim.Host {
	for i := range inv.Hosts {
		if inv.Hosts[i].Cluster == cluster {
			return &inv.Hosts[i]
		}
	}
	return nil
}

// sideRand is a generator of the VM's own, from what was drawn for it: draws from it
// leave the world's generator alone.
func sideRand(vm vgpusim.VM) *rand.Rand {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%s/%s/%d", vm.Name, vm.Host, vm.Profile, vm.VGPUs)
	return rand.New(rand.NewPCG(h.Sum64(), 22))
}

// mixedDevices gives n devices: first, then others of first's board and series and
// other sizes that h offers (nil when it offers none: the VM keeps n x first).
func mixedDevices(r *rand.Rand, h *vgpusim.Host, first string, n int) []string {
	var same []string
	for _, p := range h.Profiles {
		if p.Name != first && p.Name[len(p.Name)-1] == first[len(first)-1] && boardOf(p.Name) == boardOf(first) {
			same = append(same, p.Name)
		}
	}
	if len(same) == 0 {
		return nil
	}
	out := []string{first}
	for len(out) < n {
		out = append(out, same[r.IntN(len(same))])
	}
	return out
}
