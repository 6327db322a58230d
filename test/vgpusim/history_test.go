package vgpusim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// TestDifferentialPlacementHistory (issue 33): on one GPU in mixed-size mode, random
// histories of arrivals and departures of VMs outside the pool (each arrival at a random
// placement ID, as after other vGPUs came and went: vgpusim's Sim.SetPlacements) leave
// the running vGPUs wherever NVIDIA's table allows; vSphere does not report where. After
// each history the planner is asked, for each layout of one pool VM, whether it fits;
// where it says so, the plan's power-ons run on vgpusim (the judge, whose placement
// shares no code with the planner; the pool VM too lands at a random ID) and none may
// fail. Refusals are counted: a planner refusing everything would pass.
func TestDifferentialPlacementHistory(t *testing.T) {
	histories := 20
	if testing.Short() {
		histories = 10
	}
	for _, c := range []struct {
		model   string
		token   string
		gib     int64
		outside []int64 // the outside VMs' sizes (GiB)
		pool    []int64 // one pool VM per size
	}{
		{"NVIDIA A40", "a40", 48, []int64{16, 8, 8, 4, 12, 6}, []int64{24, 16, 12, 8, 4}},
		{"NVIDIA L4", "l4", 24, []int64{8, 4, 4, 6, 2, 12}, []int64{12, 8, 6, 4}},
		{"NVIDIA A16", "a16", 16, []int64{8, 4, 4, 2, 2, 1}, []int64{8, 4, 2}},
	} {
		t.Run(c.model, func(t *testing.T) {
			inv := &vgpusim.Inventory{Datacenter: "dc1", Hosts: []vgpusim.Host{{Name: "esx-01", Policy: "performance", VGPUMode: "mixedSize",
				GPUs: []vgpusim.GPU{{Model: c.model, MemoryGiB: c.gib, PCIID: "0000:3b:00.0"}}}}}
			spec := &gpupoolv1.GPUPoolProfileSpec{Parking: gpupoolv1.ParkingPowerOff}
			offered := map[int64]bool{}
			for _, sizes := range [][]int64{c.outside, c.pool} {
				for _, gib := range sizes {
					if !offered[gib] {
						offered[gib] = true
						inv.Hosts[0].Profiles = append(inv.Hosts[0].Profiles, vgpusim.Profile{Name: profileName(c.token, gib, "q")})
					}
				}
			}
			for i, gib := range c.outside {
				inv.VMs = append(inv.VMs, vgpusim.VM{Name: fmt.Sprintf("other-%d", i), Host: "esx-01", Profile: profileName(c.token, gib, "q")})
			}
			for _, gib := range c.pool {
				name := fmt.Sprintf("pool-%d", gib)
				inv.VMs = append(inv.VMs, vgpusim.VM{Name: name, Host: "esx-01", Profile: profileName(c.token, gib, "q")})
				spec.Layouts = append(spec.Layouts, gpupoolv1.Layout{Name: name, Workers: []gpupoolv1.Worker{{VM: name, Profile: profileName(c.token, gib, "q")}}})
			}
			spec.DefaultLayout = spec.Layouts[0].Name
			h := startHistorySim(t, inv)
			r := rand.New(rand.NewPCG(33, uint64(c.gib)))
			fits, refused := 0, 0
			for range histories {
				h.history(r, len(c.outside), int(c.gib))
				for _, l := range spec.Layouts {
					if ps := plan.Check(spec, l.Name, h.inventory()); len(ps) > 0 {
						refused++
						continue
					}
					fits++
					h.startLayout(r, spec, l.Name, int(c.gib))
				}
			}
			t.Logf("%d histories: the planner said fits %d times (each power-on succeeded), refused %d", histories, fits, refused)
			if fits < histories || refused < histories/4 {
				t.Errorf("fits %d, refused %d in %d histories: the histories stopped exercising both answers", fits, refused, histories)
			}
		})
	}
}

// historySim is a running vgpusim and gpupool's client to it.
type historySim struct {
	t   *testing.T
	sim *vgpusim.Sim
	c   vsphere.Client
	ctx context.Context
}

func startHistorySim(t *testing.T, inv *vgpusim.Inventory) *historySim {
	t.Helper()
	// A vCenter before 9.0: vgpusim's DirectPathProfileManager counts from its own
	// placements (the truth the planner cannot read), and gpupool follows it where it
	// says less: it would hide the planner's errors (docs/vgpu-model.md, "vCenter's
	// second opinion").
	sim, err := vgpusim.Start(inv, vgpusim.Options{NoDirectPathProfileManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	conn := vsphere.NewConnector()
	t.Cleanup(func() { _ = conn.Close() })
	c, err := conn.Connect(ctx, vsphere.Config{Server: sim.URL.Host, Datacenter: sim.Datacenter(),
		Username: sim.Username, Password: sim.Password, Thumbprint: sim.ThumbprintSHA256()})
	if err != nil {
		t.Fatal(err)
	}
	return &historySim{t: t, sim: sim, c: c, ctx: ctx}
}

func (h *historySim) inventory() *inventory.Inventory {
	h.t.Helper()
	inv, err := h.c.Inventory(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return inv
}

// op runs one power operation and returns the task's fault, "" on success.
func (h *historySim) op(f func(vsphere.Client, context.Context, string) (string, error), name string) string {
	h.t.Helper()
	ref, _ := h.sim.VMRef(name)
	id, err := f(h.c, h.ctx, ref)
	if err != nil {
		h.t.Fatalf("%s: %v", name, err)
	}
	if id == "" {
		return ""
	}
	info, err := h.c.Task(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if info.State != vsphere.TaskSuccess {
		return info.Fault + ": " + info.Error
	}
	return ""
}

// history powers every outside VM off, then runs 4-15 random arrivals (at a random
// placement ID) and departures; arrivals that do not fit are refused, as vSphere would.
func (h *historySim) history(r *rand.Rand, outside, region int) {
	h.t.Helper()
	on := make([]bool, outside)
	for i := range outside {
		h.op(vsphere.Client.PowerOff, fmt.Sprintf("other-%d", i))
	}
	for range 4 + r.IntN(12) {
		i := r.IntN(outside)
		name := fmt.Sprintf("other-%d", i)
		if on[i] {
			h.op(vsphere.Client.PowerOff, name)
			on[i] = false
			continue
		}
		if err := h.sim.SetPlacements(name, []int{r.IntN(region)}); err != nil {
			h.t.Fatal(err)
		}
		on[i] = h.op(powerOnOn(""), name) == ""
	}
}

// startLayout runs the power-ons of the plan for layout (the pool VM lands at a random
// placement ID) and fails the test on a refused one; then powers the pool VM off.
func (h *historySim) startLayout(r *rand.Rand, spec *gpupoolv1.GPUPoolProfileSpec, layout string, region int) {
	h.t.Helper()
	before := h.sim.Placements("esx-01")
	p, err := plan.Build(plan.Input{Spec: spec, Layout: layout, Inventory: h.inventory()})
	if err != nil || len(p.Problems) > 0 {
		h.t.Fatalf("layout %s: Check fits, Build: %v %v", layout, err, p.Problems)
	}
	started := 0
	for _, st := range p.Due(10) {
		if st.Action != plan.PowerOn {
			continue
		}
		started++
		if err := h.sim.SetPlacements(st.VM, []int{r.IntN(region)}); err != nil {
			h.t.Fatal(err)
		}
		if fault := h.op(powerOnOn(""), st.VM); fault != "" {
			h.t.Fatalf("the planner says layout %s fits, vgpusim refuses the power-on of %s: %s\nrunning vGPUs (VM, placement ID): %v", layout, st.VM, fault, before)
		}
		h.op(vsphere.Client.PowerOff, st.VM)
	}
	if started == 0 {
		h.t.Fatalf("layout %s: no power-on due:\n%s", layout, p)
	}
}
