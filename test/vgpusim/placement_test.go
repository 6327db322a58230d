package vgpusim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/types"
)

func prof(name string, gib int64) Profile { return Profile{Name: name, FrameBufferGiB: gib} }

func vmRef(n int) types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "VirtualMachine", Value: fmt.Sprintf("vm-%d", n)}
}

// boardGPUs builds GPUs of the given models and GiB sizes, alternating, in mode.
func boardGPUs(mode string, modelsAndSizes ...any) []*gpuState {
	var out []*gpuState
	for i := 0; i+1 < len(modelsAndSizes); i += 2 {
		out = append(out, &gpuState{pciID: fmt.Sprintf("0000:%02x:00.0", 0x10+i/2), device: modelsAndSizes[i].(string),
			memMiB: int64(modelsAndSizes[i+1].(int)) * 1024, mode: mode})
	}
	return out
}

// gpus builds GPUs of the given GiB sizes and mode, with PCI ids in index order.
func gpus(mode string, gib ...int64) []*gpuState {
	out := make([]*gpuState, len(gib))
	for i, g := range gib {
		out[i] = &gpuState{pciID: fmt.Sprintf("0000:%02x:00.0", 0x10+i), memMiB: g * 1024, mode: mode}
	}
	return out
}

// run places each VM's vGPUs in turn; it returns, per VM, the GPU indexes or nil when
// the power-on was refused, and the refusal messages.
func run(policy string, gs []*gpuState, vms ...[]Profile) ([][]int, []string) {
	var got [][]int
	var why []string
	for i, ps := range vms {
		reqs := make([]request, len(ps))
		for j, p := range ps {
			reqs[j] = request{key: int32(j), profile: p}
		}
		as, reasons := placeAll(policy, gs, vmRef(i), reqs)
		if as == nil {
			got = append(got, nil)
			why = append(why, strings.Join(reasons, "; "))
			continue
		}
		idx := make([]int, len(as))
		for j, a := range as {
			idx[j] = a.gpu
		}
		got = append(got, idx)
	}
	return got, why
}

func TestPlacementRules(t *testing.T) {
	q4, q8, q2, q16 := prof("grid_p100-4q", 4), prof("grid_p100-8q", 8), prof("grid_p100-2q", 2), prof("grid_p100-16q", 16)
	c4, b4, a4 := prof("grid_p100-4c", 4), prof("grid_p100-4b", 4), prof("grid_p100-4a", 4)
	capped := q2
	capped.MixedSizeMax = 2
	one := func(p Profile) []Profile { return []Profile{p} }
	tests := []struct {
		name   string
		policy string
		gpus   []*gpuState
		vms    [][]Profile
		want   string // per VM: GPU indexes joined by +, "-" when refused
		reason string // a refusal message contains it
	}{
		{"performance spreads", "performance", gpus(modeSameSize, 16, 16), [][]Profile{one(q4), one(q4), one(q4)}, "0 1 0", ""},
		{"consolidation fills first", "consolidation", gpus(modeSameSize, 16, 16), [][]Profile{one(q4), one(q4), one(q4)}, "0 0 0", ""},
		{"same-size: one profile per GPU", "consolidation", gpus(modeSameSize, 16), [][]Profile{one(q4), one(q8)}, "0 -", "same-size rule"},
		{"same-size: other GPU takes the other profile", "consolidation", gpus(modeSameSize, 16, 16), [][]Profile{one(q4), one(q8)}, "0 1", ""},
		{"frame buffer", "performance", gpus(modeSameSize, 8), [][]Profile{one(q4), one(q4), one(q4)}, "0 0 -", "frame-buffer rule"},
		{"performance: fewest VMs, ties to the lowest PCI id", "performance", gpus(modeSameSize, 8, 16), [][]Profile{one(q8), one(q4), one(q4)}, "0 1 1", ""},
		{"performance: fewest VMs, not least frame buffer", "performance", gpus(modeMixedSize, 16, 16), [][]Profile{one(q8), one(q2), one(q2), one(q2)}, "0 1 0 1", ""},
		{"mixed-size: A, B and Q mix", "performance", gpus(modeMixedSize, 16), [][]Profile{one(q4), one(b4), one(a4)}, "0 0 0", ""},
		{"mixed-size: sizes share a GPU", "performance", gpus(modeMixedSize, 16), [][]Profile{one(q4), one(q8), one(q2), one(q2)}, "0 0 0 0", ""},
		{"mixed-size: alignment leaves a hole", "performance", gpus(modeMixedSize, 16), [][]Profile{one(q2), one(q8), one(q4), one(q4)}, "0 0 0 -", "placement rule"},
		{"mixed-size: C does not mix with Q", "performance", gpus(modeMixedSize, 16), [][]Profile{one(q4), one(c4)}, "0 -", "same board and series family"},
		{"mixed-size: per-profile maximum", "performance", gpus(modeMixedSize, 16), [][]Profile{one(capped), one(capped), one(capped)}, "0 0 -", "mixed-size maximum"},
		{"mixed-size: full-size needs an empty GPU", "consolidation", gpus(modeMixedSize, 16, 16), [][]Profile{one(q2), one(q16)}, "0 1", ""},
		{"multi-vGPU: all placed", "performance", gpus(modeSameSize, 16, 16), [][]Profile{{q8, q8}}, "0+1", ""},
		{"multi-vGPU: consolidation packs one GPU", "consolidation", gpus(modeSameSize, 16, 16), [][]Profile{{q8, q8}}, "0+0", ""},
		{"multi-vGPU: all or nothing", "performance", gpus(modeSameSize, 16, 16), [][]Profile{one(q16), {q8, q8, q8}, one(q8), one(q8)}, "0 - 1 1", "insufficient"},
		{"no GPU", "performance", gpus(modeSameSize), [][]Profile{one(q4)}, "-", "no physical GPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := run(tc.policy, tc.gpus, tc.vms...)
			parts := make([]string, len(got))
			for i, g := range got {
				if g == nil {
					parts[i] = "-"
					continue
				}
				s := make([]string, len(g))
				for j, x := range g {
					s[j] = fmt.Sprint(x)
				}
				parts[i] = strings.Join(s, "+")
			}
			if s := strings.Join(parts, " "); s != tc.want {
				t.Fatalf("placed %q, want %q (refusals: %v)", s, tc.want, why)
			}
			if tc.reason != "" && tc.reason != "insufficient" && !strings.Contains(strings.Join(why, "|"), tc.reason) {
				t.Fatalf("refusals %q do not name %q", why, tc.reason)
			}
		})
	}
}

// TestPlacementInvariants places and releases random vGPUs on random GPUs and checks
// after every step what NVIDIA's rules guarantee: no GPU holds more frame buffer than it
// has, a same-size GPU runs one profile, and in mixed-size mode every vGPU sits on its
// own aligned run of slots inside the GPU.
func TestPlacementInvariants(t *testing.T) {
	profiles := []Profile{prof("grid_a40-1q", 1), prof("grid_a40-2q", 2), prof("grid_a40-4q", 4),
		prof("grid_a40-6q", 6), prof("grid_a40-8q", 8), prof("grid_a40-12q", 12), prof("grid_a40-24q", 24)}
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		mode := []string{modeSameSize, modeMixedSize}[r.IntN(2)]
		policy := []string{"performance", "consolidation"}[r.IntN(2)]
		var sizes []int64
		for range 1 + r.IntN(3) {
			sizes = append(sizes, []int64{8, 16, 24, 48}[r.IntN(4)])
		}
		gs := gpus(mode, sizes...)
		placedN := 0
		for step := range 60 {
			vm := vmRef(r.IntN(12))
			if r.IntN(3) == 0 {
				release(gs, vm)
			} else if !running(gs, vm) {
				var reqs []request
				for k := range 1 + r.IntN(2) {
					reqs = append(reqs, request{key: int32(k), profile: profiles[r.IntN(len(profiles))]})
				}
				if as, _ := placeAll(policy, gs, vm, reqs); as != nil {
					placedN++
				}
			}
			if err := checkInvariants(gs); err != nil {
				t.Fatalf("seed %d (%s, %s, GPUs %v GiB), step %d: %v", seed, mode, policy, sizes, step, err)
			}
		}
		if placedN == 0 {
			t.Fatalf("seed %d: nothing was ever placed", seed)
		}
	}
}

func running(gs []*gpuState, vm types.ManagedObjectReference) bool {
	for _, g := range gs {
		for _, v := range g.vgpus {
			if v.vm == vm {
				return true
			}
		}
	}
	return false
}

func checkInvariants(gs []*gpuState) error {
	for _, g := range gs {
		if g.usedMiB() > g.memMiB {
			return fmt.Errorf("%s: %d MiB used of %d", g.describe(), g.usedMiB(), g.memMiB)
		}
		taken := make([]bool, g.slots())
		for _, v := range g.vgpus {
			if g.mode == modeSameSize {
				if v.profile.Name != g.vgpus[0].profile.Name {
					return fmt.Errorf("same-size GPU %s", g.describe())
				}
				continue
			}
			if v.start%v.slots != 0 || v.start+v.slots > len(taken) {
				return fmt.Errorf("%s: %s at slot %d of %d is misaligned or outside", g.pciID, v.profile.Name, v.start, len(taken))
			}
			if ids, table := g.placementIDs(v.profile.frameBufferMiB()); table && !slices.Contains(ids, v.start*slotMiB/1024) {
				return fmt.Errorf("%s: %s at slot %d, not one of NVIDIA's placement IDs %v", g.pciID, v.profile.Name, v.start, ids)
			}
			for s := v.start; s < v.start+v.slots; s++ {
				if taken[s] {
					return fmt.Errorf("%s: slot %d taken twice", g.describe(), s)
				}
				taken[s] = true
			}
		}
	}
	return nil
}

func TestSameSeries(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"grid_p100-4q", "grid_p100-8q", true},
		{"grid_p100-4q", "grid_p100-4c", false},
		{"grid_p100-4q", "grid_t4-4q", false},
		{"nvidia_l40s-4q", "nvidia_l40s-48q", true},
		{"odd", "odd", true},
		{"odd", "grid_p100-4q", false},
	} {
		if got := sameSeries(tc.a, tc.b); got != tc.want {
			t.Errorf("sameSeries(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestBoardsAndNVIDIAPlacements: the simulator's board rule and NVIDIA's mixed-size
// placement tables (vGPU user guide 17.0, A.1 and A.3).
func TestBoardsAndNVIDIAPlacements(t *testing.T) {
	n := func(p Profile, k int) [][]Profile {
		out := make([][]Profile, k)
		for i := range out {
			out[i] = []Profile{p}
		}
		return out
	}
	l4c8, l4c16, a16q4 := prof("grid_l4-8c", 8), prof("grid_l4-16c", 16), prof("grid_a16-4q", 4)
	l40s16, l40s1, a40q1 := prof("grid_l40s-16c", 16), prof("grid_l40s-1q", 1), prof("grid_a40-1q", 1)
	for _, tc := range []struct {
		name   string
		gpus   []*gpuState
		vms    [][]Profile
		placed int
		reason string
	}{
		{"an L4 type never on the A16", boardGPUs(modeMixedSize, "NVIDIA L4", 24, "NVIDIA A16", 16), n(l4c8, 3), 2, "board rule"},
		{"an A16 type on the A16 only", boardGPUs(modeSameSize, "NVIDIA L4", 24, "NVIDIA A16", 16), n(a16q4, 5), 4, "board rule"},
		{"no 16 GiB vGPU on a 24 GB GPU in mixed-size mode", boardGPUs(modeMixedSize, "NVIDIA L4", 24), n(l4c16, 1), 0, "placement table"},
		{"16 GiB on an L4 in same-size mode", boardGPUs(modeSameSize, "NVIDIA L4", 24), n(l4c16, 2), 1, "frame-buffer rule"},
		{"2 x 16 GiB on a 48 GB L40S in mixed-size mode", boardGPUs(modeMixedSize, "NVIDIA L40S", 48), n(l40s16, 3), 2, "placement rule"},
		{"3 x 16 GiB in same-size mode", boardGPUs(modeSameSize, "NVIDIA L40S", 48), n(l40s16, 3), 3, ""},
		{"16 x 1 GiB on an Ada 48 GB GPU", boardGPUs(modeMixedSize, "NVIDIA L40S", 48), n(l40s1, 17), 16, "placement rule"},
		{"30 x 1 GiB on an Ampere 48 GB GPU", boardGPUs(modeMixedSize, "NVIDIA A40", 48), n(a40q1, 31), 30, "placement rule"},
		{"at most 32 vGPUs per GPU", boardGPUs(modeSameSize, "NVIDIA A40", 48), n(a40q1, 33), 32, "vGPU limit"},
		{"a model of no known board runs what is offered", boardGPUs(modeSameSize, "NVIDIA GPU", 24, "NVIDIA L4", 24), n(a16q4, 7), 6, "frame-buffer rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := run("performance", tc.gpus, tc.vms...)
			placed := 0
			for _, g := range got {
				if g != nil {
					placed++
				}
			}
			if placed != tc.placed {
				t.Fatalf("placed %d, want %d (refusals: %v)", placed, tc.placed, why)
			}
			if tc.reason != "" && !strings.Contains(strings.Join(why, "|"), tc.reason) {
				t.Fatalf("refusals %q do not name %q", why, tc.reason)
			}
			if err := checkInvariants(tc.gpus); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPlacementHistory: a history's placement hint (VM.Placements) puts a vGPU at any
// ID NVIDIA's table lists, the lowest free at or above the hint, and never at an ID the
// table does not list. The 48 GB case: a 16 GiB vGPU sits at 0 or 32 (A.3.4), and
// beside it a 24 GiB one still starts, wherever it sits.
func TestPlacementHistory(t *testing.T) {
	for _, c := range []struct {
		name    string
		gib     int64
		running []request
		want    []int // start slots (512 MiB) of the running vGPUs
		next    Profile
		fits    bool
	}{
		{"16 GiB hinted to 16 sits at 32", 48, []request{{profile: prof("grid_a40-16q", 16), at: 16}}, []int{64}, prof("grid_a40-24q", 24), true},
		{"16 GiB hinted to 0 sits at 0", 48, []request{{profile: prof("grid_a40-16q", 16), at: 0}}, []int{0}, prof("grid_a40-24q", 24), true},
		{"8 GiB at 16 and 24 block both 24 GiB IDs", 48, []request{{profile: prof("grid_a40-8q", 8), at: 16}, {profile: prof("grid_a40-8q", 8), at: 24}}, []int{32, 48}, prof("grid_a40-24q", 24), false},
		{"hint past the last ID: the lowest free", 48, []request{{profile: prof("grid_a40-16q", 16), at: 40}}, []int{0}, prof("grid_a40-24q", 24), true},
		{"4 GiB at 4 and 12 of 16 GB leave no 8 GiB ID", 16, []request{{profile: prof("grid_a16-4q", 4), at: 4}, {profile: prof("grid_a16-4q", 4), at: 12}}, []int{8, 24}, prof("grid_a16-8q", 8), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := gpus(modeMixedSize, c.gib)
			for i, r := range c.running {
				r.key = int32(i)
				if as, why := placeAll("performance", gs, vmRef(i), []request{r}); as == nil {
					t.Fatalf("running vGPU %d refused: %v", i, why)
				}
			}
			var got []int
			for _, v := range gs[0].vgpus {
				got = append(got, v.start)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("running vGPUs start at slots %v, want %v", got, c.want)
			}
			if start, _ := gs[0].fit(c.next); (start >= 0) != c.fits {
				t.Errorf("%s fits: %v, want %v", c.next.Name, start >= 0, c.fits)
			}
		})
	}
}
