package vgpusim_test

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/test/vgpusim"
)

// The differential test's classification and coverage helpers, and its fixed cases.

// knownTooStrict names the classes of plannerTooStrict that are the planner's
// documented conservatism (docs/vgpu-model.md), and tells a refusal's class from its
// messages; "" for a refusal no class explains, which fails the test.
//
//   - placementUnknown: on a mixed-size GPU the planner counts a vGPU as fitting only
//     where a placement ID is free wherever the running vGPUs sit, since vSphere does not
//     report placement IDs (inventory.Occupancy.fitsWherever); the simulator knows where
//     its vGPUs sit and may find the place the worst case ruled out.
//   - subGiBSlots: the planner's placement slot is 1 GiB, so a 512 MiB type (grid_m60-0q)
//     takes a whole slot; the simulator's slot is 512 MiB. NVIDIA's 512 MiB types are
//     Maxwell-era boards', which have no mixed-size mode, so this is strict only in
//     worlds the generator makes up.
//   - splitUnknown: vSphere lists the GPUs a VM runs on, not which of its devices runs
//     on which; the planner starts a layout only if it fits under every split
//     consistent with the report, the simulator knows the true one.
//   - unknownBoard: on a host whose GPUs are of several kinds, the planner starts no
//     type on a host with a GPU whose board it cannot identify; the simulator lets such a
//     GPU run whatever its host offers.
func knownTooStrict(problems []plan.Problem) string {
	class := ""
	for _, p := range problems {
		switch {
		case p.Reason != plan.ReasonInsufficientGPU:
			return ""
		case strings.Contains(p.Message, "vSphere does not report which of the vGPUs of"):
			class = "splitUnknown"
		case class == "splitUnknown":
		case strings.Contains(p.Message, "whose board gpupool cannot identify") || strings.Contains(p.Message, "does not know the board of"):
			class = "unknownBoard"
		case !strings.Contains(p.Message, "does not report where running vGPUs sit"):
			return ""
		case class == "unknownBoard" || class == "subGiBSlots":
		case subGiBRE.MatchString(p.Message):
			class = "subGiBSlots"
		default:
			class = "placementUnknown"
		}
	}
	return class
}

var subGiBRE = regexp.MustCompile(`x grid_[a-z0-9]+-0[abqc]\b`)

// enterMaintenance starts EnterMaintenanceMode_Task on the world's entering hosts, once
// the initial VMs run: on a host with a powered-on VM the task stays running (the host
// reads as entering maintenance mode), on an idle host it completes at once.
func (d *diff) enterMaintenance() {
	d.t.Helper()
	if len(d.w.entering) == 0 {
		return
	}
	c := connect(d.t, d.sim)
	defer func() { _ = c.Logout(d.ctx) }()
	for _, name := range d.w.entering {
		if _, err := hostObj(d.t, c, name).EnterMaintenanceMode(d.ctx, 0, false, nil); err != nil {
			d.fatalf("enter maintenance mode on %s: %v", name, err)
		}
		if st, _ := d.sim.Host(name); st.EnteringMaintenanceMode {
			d.stats["hostEntering"]++
		}
	}
}

// countWorld counts the features a seed's world reached, for the coverage assertions.
func (d *diff) countWorld() {
	for _, h := range d.w.inv.Hosts {
		if h.InMaintenanceMode {
			d.stats["hostInMaintenance"]++
		}
		if slices.ContainsFunc(h.GPUs, func(g vgpusim.GPU) bool { return g.Model != h.GPUs[0].Model }) {
			d.stats["mixedBoardHost"]++
		}
		if slices.ContainsFunc(h.GPUs, func(g vgpusim.GPU) bool { return g.Model == unknownBoard.model }) {
			d.stats["gpuUnknownBoard"]++
		}
		for _, g := range h.GPUs {
			if g.VGPUMode == "mixedSize" || (g.VGPUMode == "" && h.VGPUMode == "mixedSize") {
				d.stats["gpuMixedSize"]++
			}
			if g.VGPUMode != "" && g.VGPUMode != h.VGPUMode {
				d.stats["gpuModeOverride"]++
			}
		}
	}
	for _, vm := range d.w.inv.VMs {
		if vm.Datastore != "" && vm.Datastore != "datastore1" {
			d.stats["vmOnLocalDatastore"]++
		}
		if len(vm.Profiles) > 0 {
			d.stats["mixedDevicesVM"]++
			if slices.Contains(d.w.startOn, vm.Name) {
				d.stats["mixedDevicesStarted"]++
			}
		}
	}
}

// countSpread counts the running VMs whose devices differ and run on several GPUs:
// the splits vSphere does not report.
func (d *diff) countSpread() {
	hinted := map[string]bool{}
	for _, vm := range d.w.inv.VMs {
		hinted[vm.Name] = len(vm.Placements) > 0
	}
	for _, h := range d.w.inv.Hosts {
		for _, ps := range d.sim.Placements(h.Name) {
			for _, p := range ps {
				if hinted[p.VM] && p.Mixed && p.ID > 0 {
					d.stats["historyPlaced"]++
				}
			}
		}
	}
	for _, vm := range d.w.inv.VMs {
		if len(vm.Profiles) == 0 {
			continue
		}
		if st, ok := d.sim.VM(vm.Name); ok && len(slices.Compact(slices.Sorted(slices.Values(st.GPUs)))) > 1 {
			d.stats["mixedDevicesSpread"]++
		}
	}
}

// checkHeld ends a transition whose only remaining work is held (HostUnavailable): the
// simulator must agree that each held VM's host is unavailable, and a VM held on a host
// entering maintenance mode is what keeps the host from entering it.
func (d *diff) checkHeld(p *plan.Plan) {
	d.t.Helper()
	d.stats["held"]++
	for _, h := range p.Held {
		if h.Reason != plan.ReasonHostUnavailable {
			d.fatalf("notConverged: %s held for %s: %s", h.VM, h.Reason, h.Message)
		}
		st, _ := d.sim.VM(h.VM)
		hs, _ := d.sim.Host(st.Host)
		if !hs.InMaintenanceMode && !hs.EnteringMaintenanceMode && hs.ConnectionState == "connected" {
			d.fatalf("notConverged: %s held, but the simulator has its host %s available: %s", h.VM, st.Host, h.Message)
		}
	}
}

// countPowerOn counts a planned power-on and the features it exercises.
func (d *diff) countPowerOn(st plan.Step) {
	d.stats["powerOns"]++
	inv := d.inventory()
	if vm, ok := inv.FindVM(st.VM); ok && vm.VGPUs > 1 {
		d.stats["multiVGPUPowerOns"]++
	}
	if h, ok := inv.FindHost(st.Host); ok {
		if !h.OneKind() {
			d.stats["powerOnMixedBoardHost"]++
		}
		for _, g := range h.GPUs {
			if g.Mixed() {
				d.stats["mixedSizePowerOns"]++
				return
			}
		}
	}
}

// TestDifferentialFragmentedGPU is the case that made the planner assume the worst of
// running vGPUs' placement: four 4Q vGPUs start on a 16 GB mixed-size A16 at placement
// IDs 0, 4, 8 and 12 (NVIDIA: lowest free place, in power-on order); the layout parks
// the first and third and wants an 8Q next to the other two. vSphere does not report
// placement IDs; the running 4Qs sit at 4 and 12, so no 8-aligned place is free. The
// planner must not order that power-on (it did when it assumed the running vGPUs packed
// from 0): both sides refuse the layout.
func TestDifferentialFragmentedGPU(t *testing.T) {
	inv := &vgpusim.Inventory{Datacenter: "dc1", Hosts: []vgpusim.Host{{
		Name: "esx-00", Policy: inventory.PolicyPerformance, VGPUMode: "mixedSize",
		GPUs:     []vgpusim.GPU{{Model: "NVIDIA A16", MemoryGiB: 16, PCIID: "0000:3b:00.0"}},
		Profiles: []vgpusim.Profile{{Name: "grid_a16-4q", SuspendSupported: true}, {Name: "grid_a16-8q", SuspendSupported: true}},
	}}}
	for _, n := range []string{"vm-a", "vm-x", "vm-b", "vm-y"} {
		inv.VMs = append(inv.VMs, vgpusim.VM{Name: n, Host: "esx-00", Folder: "pool", Profile: "grid_a16-4q"})
	}
	inv.VMs = append(inv.VMs, vgpusim.VM{Name: "vm-z", Host: "esx-00", Folder: "pool", Profile: "grid_a16-8q"})
	w := &world{inv: inv, startOn: []string{"vm-a", "vm-x", "vm-b", "vm-y"}, spec: &gpupoolv1.GPUPoolProfileSpec{
		Parking: gpupoolv1.ParkingPowerOff, DefaultLayout: "all",
		Layouts: []gpupoolv1.Layout{{Name: "all", Workers: []gpupoolv1.Worker{
			{VM: "vm-x", Profile: "grid_a16-4q", NoNode: true}, {VM: "vm-y", Profile: "grid_a16-4q", NoNode: true},
			{VM: "vm-z", Profile: "grid_a16-8q", NoNode: true},
		}}, {Name: "fours", Workers: []gpupoolv1.Worker{
			{VM: "vm-a", Profile: "grid_a16-4q", NoNode: true}, {VM: "vm-b", Profile: "grid_a16-4q", NoNode: true},
		}}},
	}}
	stats := map[string]int{}
	runWorld(t, 1, rand.New(rand.NewPCG(1, 2026)), w, stats, false, "all")
	if stats["agreedInfeasible"] != 3 || stats["powerOns"] != 0 {
		t.Fatalf("want the layout refused by both sides on each of 3 transitions, no power-on ordered: %v", stats)
	}
}
