package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// boardHost is esx-01 with an NVIDIA L4 (24 GB) at 0000:3b:00.0 and an NVIDIA A16 GPU
// (16 GB) at 0000:af:00.0 in the given modes, offering the L4's and the A16's types
// (grid_l4-16c is the example; NVIDIA has no 16 GiB L4 type, so NVIDIA's
// 24 GB placement table has no row for it).
func boardHost(l4Mode, a16Mode string) inventory.Host {
	var profiles []inventory.Profile
	for _, p := range []string{"grid_l4-16c", "grid_l4-12c", "grid_l4-8c", "grid_l4-4c", "grid_a16-8q", "grid_a16-4q", "grid_a16-8c"} {
		fb, _ := inventory.ProfileFrameBufferMiB(p)
		profiles = append(profiles, inventory.Profile{Name: p, FrameBufferMiB: fb, SuspendSupported: true})
	}
	return inventory.Host{Name: "esx-01", Policy: inventory.PolicyPerformance, Profiles: profiles, GPUs: []inventory.GPU{
		{PCIID: "0000:3b:00.0", Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 24 * 1024, Mode: l4Mode},
		{PCIID: "0000:af:00.0", Device: "NVIDIA A16", DeviceID: 0x25b6, MemoryMiB: 16 * 1024, Mode: a16Mode},
	}}
}

// boardWorld puts powered-off VMs with the given workers' profiles on host h; the
// layout "want" runs them all (worker i is VM vm-i with want[i] vGPUs of profile).
func boardWorld(t *testing.T, h inventory.Host, workers ...gpupoolv1.Worker) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{Hosts: []inventory.Host{h}}, nodes: map[string]*node{}}
	lay := gpupoolv1.Layout{Name: "want"}
	for i, wk := range workers {
		wk.VM = fmt.Sprintf("vm-%d", i)
		w.vm(t, wk.VM, h.Name, wk.Profile, inventory.PoweredOff, "")
		w.mustVM(wk.VM).VGPUs = max(int(wk.VGPUs), 1)
		lay.Workers = append(lay.Workers, wk)
	}
	return &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{lay, {Name: "none"}}, DefaultLayout: "none", Parking: gpupoolv1.ParkingPowerOff}, w
}

func wk(profile string, n int32) gpupoolv1.Worker {
	return gpupoolv1.Worker{Profile: profile, VGPUs: n}
}

// TestBoardsMixedInOneHost: a vGPU type runs only on GPUs of its own board, and a host
// with an L4 and an A16 gives each type only its own GPU.
func TestBoardsMixedInOneHost(t *testing.T) {
	mixed, same := inventory.ModeMixedSize, inventory.ModeSameSize
	for _, tc := range []struct {
		name     string
		l4, a16  string
		workers  []gpupoolv1.Worker
		feasible bool
		contains []string // in the message when infeasible
	}{
		{"the issue: 2 x grid_l4-16c on an L4 and an A16, mixed-size", mixed, mixed, []gpupoolv1.Worker{wk("grid_l4-16c", 2)}, false,
			[]string{"host esx-01", "2 x grid_l4-16c (NVIDIA L4)", "runs only on GPUs of its own board", "GPU 0000:3b:00.0 (24 GiB, mixed-size mode, free)",
				"lists no vGPU of 16 GiB in mixed-size mode", "GPU 0000:af:00.0 is an NVIDIA A16", "register the VMs on a host with more NVIDIA L4 GPUs"}},
		{"2 x grid_l4-16c, same-size: one fits the L4, the A16 takes none", same, same, []gpupoolv1.Worker{wk("grid_l4-16c", 2)}, false,
			[]string{"2 x grid_l4-16c (NVIDIA L4)", "is the only NVIDIA L4 GPU", "GPU 0000:af:00.0 is an NVIDIA A16 and runs only its own types"}},
		{"3 x grid_l4-8c, mixed-size: NVIDIA allows 2 on the L4", mixed, mixed, []gpupoolv1.Worker{wk("grid_l4-8c", 1), wk("grid_l4-8c", 1), wk("grid_l4-8c", 1)}, false,
			[]string{"3 x grid_l4-8c (NVIDIA L4)", "allows at most 2 x grid_l4-8c per GPU in mixed-size mode", "24 GB"}},
		{"3 x grid_l4-8c, same-size: the L4's frame buffer holds 3", same, mixed, []gpupoolv1.Worker{wk("grid_l4-8c", 1), wk("grid_l4-8c", 1), wk("grid_l4-8c", 1)}, true, nil},
		{"4 x grid_l4-8c, same-size: not on the A16", same, same, []gpupoolv1.Worker{wk("grid_l4-8c", 2), wk("grid_l4-8c", 2)}, false,
			[]string{"4 x grid_l4-8c (NVIDIA L4)", "GPU 0000:af:00.0 is an NVIDIA A16"}},
		{"each board its own types, mixed-size", mixed, mixed, []gpupoolv1.Worker{wk("grid_l4-8c", 2), wk("grid_a16-8q", 1), wk("grid_a16-4q", 1), wk("grid_l4-4c", 1)}, true, nil},
		{"each board its own types, same-size", same, same, []gpupoolv1.Worker{wk("grid_l4-12c", 2), wk("grid_a16-4q", 1), wk("grid_a16-4q", 1)}, true, nil},
		{"C next to Q on the A16, mixed-size: series family", same, mixed, []gpupoolv1.Worker{wk("grid_a16-8q", 1), wk("grid_a16-8c", 1)}, false,
			[]string{"grid_a16-8c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := boardWorld(t, boardHost(tc.l4, tc.a16), tc.workers...)
			ps := Check(spec, "want", w.inv)
			if tc.feasible {
				if len(ps) > 0 {
					t.Fatalf("Check:\n%s", problemLines(ps))
				}
				converge(t, spec, w, "want", 1)
				checkBoards(t, w.inv)
				return
			}
			if len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
				t.Fatalf("Check:\n%s", problemLines(ps))
			}
			for _, c := range tc.contains {
				if !strings.Contains(ps[0].Message, c) {
					t.Errorf("message %q does not contain %q", ps[0].Message, c)
				}
			}
		})
	}
}

// checkBoards fails when a GPU runs a vGPU of another board.
func checkBoards(t *testing.T, inv *inventory.Inventory) {
	t.Helper()
	for _, h := range inv.Hosts {
		for _, g := range h.GPUs {
			gb, _, _ := inventory.BoardOf(g)
			for _, name := range g.VMs {
				vm, _ := inv.FindVM(name)
				if pb, ok := inventory.ProfileBoard(vm.Profile); ok && pb.Token != gb.Token {
					t.Errorf("GPU %s (%s) runs %s of VM %s", g.PCIID, gb.Name, vm.Profile, name)
				}
			}
		}
	}
}

// TestUnknownBoardIsConservative: next to an L4, a GPU whose board gpupool cannot
// identify gets no vGPU gpupool cannot judge, and the message names it; a host whose
// GPUs are all of one unknown kind runs what it offers.
func TestUnknownBoardIsConservative(t *testing.T) {
	h := boardHost(inventory.ModeSameSize, inventory.ModeSameSize)
	h.GPUs[1] = inventory.GPU{PCIID: "0000:af:00.0", Device: "NVIDIA X9", DeviceID: 0x2999, MemoryMiB: 16 * 1024, Mode: inventory.ModeSameSize}
	spec, w := boardWorld(t, h, wk("grid_l4-8c", 1))
	ps := Check(spec, "want", w.inv)
	if len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
		t.Fatalf("Check:\n%s", problemLines(ps))
	}
	for _, c := range []string{"host esx-01", "GPU 0000:af:00.0", `device name "NVIDIA X9" and PCI device id 0x2999`, "cannot identify",
		"grid_l4-8c (NVIDIA L4)", "GPU 0000:3b:00.0 is an NVIDIA L4", "VM vm-0", "report the device name and PCI device id"} {
		if !strings.Contains(ps[0].Message, c) {
			t.Errorf("message %q does not contain %q", ps[0].Message, c)
		}
	}

	// One kind: two unknown GPUs of the same name run every type the host offers.
	h.GPUs[0] = inventory.GPU{PCIID: "0000:3b:00.0", Device: "NVIDIA X9", DeviceID: 0x2999, MemoryMiB: 16 * 1024, Mode: inventory.ModeSameSize}
	h.Profiles = []inventory.Profile{{Name: "grid_x9-8q", FrameBufferMiB: 8 * 1024}}
	spec, w = boardWorld(t, h, wk("grid_x9-8q", 2), wk("grid_x9-8q", 2))
	if ps := Check(spec, "want", w.inv); len(ps) > 0 {
		t.Fatalf("Check:\n%s", problemLines(ps))
	}
	converge(t, spec, w, "want", 1)
}

// TestMixedSizeMaximaInPlans: the planner admits no more vGPUs of a size than NVIDIA's
// mixed-size table allows on a 48 GB L40S (2 x 16C, 4 x 8C, 8 x 4C; NVIDIA AI
// Enterprise table 39, vGPU user guide A.3.4), where the frame buffer alone would take
// 3, 6 and 12.
func TestMixedSizeMaximaInPlans(t *testing.T) {
	for _, tc := range []struct {
		profile string
		most    int
	}{{"grid_l40s-16c", 2}, {"grid_l40s-8c", 4}, {"grid_l40s-4c", 8}} {
		fb, _ := inventory.ProfileFrameBufferMiB(tc.profile)
		h := inventory.Host{Name: "esx-01", Policy: inventory.PolicyConsolidation,
			Profiles: []inventory.Profile{{Name: tc.profile, FrameBufferMiB: fb}},
			GPUs:     []inventory.GPU{{PCIID: "0000:3b:00.0", Device: "NVIDIA L40S", DeviceID: 0x26b9, MemoryMiB: 48 * 1024, Mode: inventory.ModeMixedSize}}}
		for _, n := range []int{tc.most, tc.most + 1} {
			workers := make([]gpupoolv1.Worker, n)
			for i := range workers {
				workers[i] = wk(tc.profile, 1)
			}
			spec, w := boardWorld(t, h, workers...)
			ps := Check(spec, "want", w.inv)
			if (len(ps) == 0) != (n <= tc.most) {
				t.Fatalf("%d x %s: Check:\n%s", n, tc.profile, problemLines(ps))
			}
			if len(ps) > 0 && !strings.Contains(ps[0].Message, fmt.Sprintf("allows at most %d x %s per GPU in mixed-size mode", tc.most, tc.profile)) {
				t.Errorf("%d x %s: message %q does not give NVIDIA's maximum", n, tc.profile, ps[0].Message)
			}
			if len(ps) == 0 {
				converge(t, spec, w, "want", 1)
			}
		}
	}
}

type randomBoard struct {
	name, token string
	id          uint16
	gib         int64
	mixed       bool
	sizes       []int64
}

// randomBoards are the boards of the random worlds: name, PCI device id, frame buffer,
// whether it has mixed-size mode, and the sizes of its Q-series types (vGPU user guide
// 17.0, A.1).
var randomBoards = []randomBoard{
	{"NVIDIA L4", "l4", 0x27b8, 24, true, []int64{1, 2, 3, 4, 6, 8, 12, 24}},
	{"NVIDIA A16", "a16", 0x25b6, 16, true, []int64{1, 2, 4, 8, 16}},
	{"NVIDIA L40S", "l40s", 0x26b9, 48, true, []int64{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}},
	{"NVIDIA A10", "a10", 0x2236, 24, true, []int64{1, 2, 3, 4, 6, 8, 12, 24}},
	{"Tesla T4", "t4", 0x1eb8, 16, false, []int64{1, 2, 4, 8, 16}},
}

// randomBoardGPUs gives host 1-4 GPUs of one or two boards and some types of each.
func randomBoardGPUs(r *rand.Rand, host *inventory.Host) {
	first, second := r.IntN(len(randomBoards)), r.IntN(len(randomBoards))
	for g := range 1 + r.IntN(4) {
		b := randomBoards[first]
		if g > 0 && r.IntN(2) == 0 {
			b = randomBoards[second]
		}
		mode := []string{"", inventory.ModeSameSize, inventory.ModeMixedSize}[r.IntN(3)]
		if !b.mixed && mode == inventory.ModeMixedSize {
			mode = inventory.ModeSameSize
		}
		host.GPUs = append(host.GPUs, inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), Device: b.name, DeviceID: b.id, MemoryMiB: b.gib * 1024, Mode: mode})
	}
	for _, g := range host.GPUs {
		b := randomBoards[slices.IndexFunc(randomBoards, func(x randomBoard) bool { return x.name == g.Device })]
		for _, gib := range b.sizes {
			name := fmt.Sprintf("grid_%s-%dq", b.token, gib)
			if r.IntN(10) < 5 && !slices.ContainsFunc(host.Profiles, func(p inventory.Profile) bool { return p.Name == name }) {
				host.Profiles = append(host.Profiles, inventory.Profile{Name: name, FrameBufferMiB: gib * 1024, SuspendSupported: r.IntN(10) < 9})
			}
		}
	}
}

// TestRandomTransitionsWithBoards is TestRandomTransitions on hosts whose GPUs are of
// one or two NVIDIA boards: no vGPU ever runs on a GPU of another board or more often
// than NVIDIA's mixed-size table allows (checkGPUs), and feasible layouts converge.
func TestRandomTransitionsWithBoards(t *testing.T) {
	seeds := uint64(200)
	stats := map[string]int{}
	for seed := uint64(1); seed <= seeds; seed++ {
		r := rand.New(rand.NewPCG(seed, 43))
		spec, w := randomWorldOf(r, true)
		for _, h := range w.inv.Hosts {
			if !h.OneKind() {
				stats["host with two boards"]++
			}
		}
		for range 4 {
			target := spec.Layouts[r.IntN(len(spec.Layouts))].Name
			sim := &simulation{t: t, seed: seed, spec: spec, w: w, target: target, r: r}
			sim.run(stats)
		}
	}
	t.Logf("%d seeds: %v", seeds, stats)
	if stats["converged"] < int(seeds) || stats["host with two boards"] < int(seeds)/4 {
		t.Errorf("converged %d, hosts with two boards %d: the random worlds test too little", stats["converged"], stats["host with two boards"])
	}
}
