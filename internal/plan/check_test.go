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

// twoGPUHost is esx-01 with two 16 GiB GPUs and a VM outside the pool, other-vm, that
// runs otherProfile on the second GPU (none if empty).
func twoGPUHost(t testing.TB, otherProfile string) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	spec, _ := sample(t, "day")
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	w.host("esx-01", inventory.PolicyPerformance,
		inventory.GPU{PCIID: "0000:3b:00.0", MemoryMiB: gib16},
		inventory.GPU{PCIID: "0000:af:00.0", MemoryMiB: gib16})
	h := &w.inv.Hosts[0]
	if otherProfile != "" {
		w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: "other-vm", Host: "esx-01", Profile: otherProfile, PowerState: inventory.PoweredOn, GPU: "0000:af:00.0"})
		h.GPUs[1].VMs = []string{"other-vm"}
	}
	for _, name := range []string{"gpu-night-1", "gpu-night-2", "gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"} {
		w.vm(t, name, "esx-01", "grid_p100-16q", inventory.PoweredOff, "")
	}
	spec.Layouts[1] = layout("night", "grid_p100-16q", "gpu-night-1", "gpu-night-2")
	return spec, w
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world)
		layout string
		want   []Problem
	}{
		{
			name:   "day to night is feasible",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return sample(t, "day") },
			layout: "night",
		},
		{
			name:   "night to day is feasible",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return sample(t, "night") },
			layout: "day",
		},
		{
			name:   "unknown layout",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return sample(t, "day") },
			layout: "dusk",
			want:   []Problem{{Reason: ReasonUnknownLayout, Message: `layout "dusk" is not one of spec.layouts (day, night)`}},
		},
		{
			name: "VM not found",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-ghost", Profile: "grid_p100-16q"})
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonVMNotFound, Message: "VM gpu-ghost of layout night (spec.layouts[1].workers[1].vm) is not in the inventory of datacenter dc1: check the name (govc find / -type m lists the VMs)"}},
		},
		{
			name: "VM name with a typo",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				spec.Layouts[1].Workers[0].VM = "gpu-nihgt-1"
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonVMNotFound, Message: "VM gpu-nihgt-1 of layout night (spec.layouts[1].workers[0].vm) is not in the inventory of datacenter dc1: did you mean gpu-night-1? (govc find / -type m lists the VMs)"}},
		},
		{
			name: "VM named twice, by name and by path",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "night")
				spec.Layouts[0].Workers[3].VM = "/dc1/vm/gpu/gpu-day-1"
				return spec, w
			},
			layout: "day",
			want:   []Problem{{Reason: ReasonDuplicateVM, Message: "layout day names VM gpu-day-1 twice (as gpu-day-1 and /dc1/vm/gpu/gpu-day-1)"}},
		},
		{
			name: "host not found",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				w.mustVM("gpu-night-1").Host = "esx-99"
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonHostNotFound, Message: "VM gpu-night-1 is on host esx-99, which is not in the inventory"}},
		},
		{
			name: "profile not offered",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				spec.Layouts[1].Workers[0].Profile = "grid_p100-12q"
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonProfileNotOffered, Message: "VM gpu-night-1: host esx-01 does not offer vGPU profile grid_p100-12q (it offers grid_p100-4q, grid_p100-8q, grid_p100-16q)"}},
		},
		{
			name: "too many vGPUs for one GPU",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "night")
				w.vm(t, "gpu-day-5", "esx-01", "grid_p100-4q", inventory.PoweredOff, "")
				spec.Layouts[0].Workers = append(spec.Layouts[0].Workers, gpupoolv1.Worker{VM: "gpu-day-5", Profile: "grid_p100-4q"})
				return spec, w
			},
			layout: "day",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: 5 x grid_p100-4q need 20 GiB, GPU 0000:3b:00.0 has 16 GiB"}},
		},
		{
			name: "a VM of this pool stays on the GPU",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-day-1", Profile: "grid_p100-4q"})
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: layout night needs 1 GPU for grid_p100-16q, 0 of 1 GPUs free (GPU 0000:3b:00.0 runs grid_p100-4q for VM gpu-day-1 of this pool, which stays)"}},
		},
		{
			name:   "a VM outside the pool holds a GPU",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "grid_p100-8q") },
			layout: "night",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: layout night needs 2 GPUs for grid_p100-16q, 1 of 2 GPUs free (GPU 0000:af:00.0 runs grid_p100-8q for VM other-vm outside this pool)"}},
		},
		{
			name: "a VM outside the pool leaves room for its own profile only",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := twoGPUHost(t, "grid_p100-4q")
				spec.Layouts[1] = layout("night", "grid_p100-8q", "gpu-night-1", "gpu-night-2", "gpu-day-1")
				spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-day-2", Profile: "grid_p100-4q"})
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: layout night needs 2 GPUs for grid_p100-8q, 1 of 2 GPUs free (GPU 0000:af:00.0 runs grid_p100-4q for VM other-vm outside this pool, room for 3 more)"}},
		},
		{
			name: "a VM outside the pool with room to spare",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := twoGPUHost(t, "grid_p100-4q")
				spec.Layouts[1] = layout("night", "grid_p100-4q", "gpu-day-1", "gpu-day-2", "gpu-day-3")
				spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-night-1", Profile: "grid_p100-16q"})
				return spec, w
			},
			layout: "night",
		},
		{
			name: "a profile larger than every GPU",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				w.inv.Hosts[0].Profiles = append(w.inv.Hosts[0].Profiles, inventory.Profile{Name: "grid_p100-32q"})
				spec.Layouts[1].Workers[0].Profile = "grid_p100-32q"
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: grid_p100-32q needs 32 GiB per vGPU, the largest GPU has 16 GiB"}},
		},
		{
			name: "free GPUs of the wrong sizes",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := twoGPUHost(t, "")
				w.inv.Hosts[0].GPUs[0].MemoryMiB = 8 * 1024
				w.inv.Hosts[0].Profiles = append(w.inv.Hosts[0].Profiles, inventory.Profile{Name: "grid_p100-12q", FrameBufferMiB: 12 * 1024})
				spec.Layouts[1] = layout("night", "grid_p100-12q", "gpu-night-1", "gpu-night-2")
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonInsufficientGPU, Message: "host esx-01: layout night needs 2 GPUs for grid_p100-12q, 2 of 2 GPUs free (free: 0000:3b:00.0 with 8 GiB, 0000:af:00.0 with 16 GiB)"}},
		},
		{
			name: "suspend not supported",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				w.inv.Hosts[0].Profiles[0].SuspendSupported = false
				return spec, w
			},
			layout: "night",
			want:   []Problem{{Reason: ReasonSuspendNotSupported, Message: "parking is Suspend, but host esx-01 cannot suspend VMs with vGPU profile grid_p100-4q: VMs gpu-day-1, gpu-day-2, gpu-day-3, gpu-day-4 would be parked; set spec.parking to PowerOff"}},
		},
		{
			name: "suspend not supported does not matter when parking is PowerOff",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "day")
				w.inv.Hosts[0].Profiles[0].SuspendSupported = false
				spec.Parking = gpupoolv1.ParkingPowerOff
				return spec, w
			},
			layout: "night",
		},
		{
			name: "suspend not supported does not matter for VMs that stay parked",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "night")
				w.inv.Hosts[0].Profiles[0].SuspendSupported = false
				return spec, w
			},
			layout: "night",
		},
		{
			name: "several problems, in the order of the layout",
			setup: func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
				spec, w := sample(t, "night")
				spec.Layouts[0].Workers[0].VM = "gpu-ghost"
				spec.Layouts[0].Workers[2].Profile = "grid_p100-2q"
				return spec, w
			},
			layout: "day",
			want: []Problem{
				{Reason: ReasonVMNotFound, Message: "VM gpu-ghost of layout day (spec.layouts[0].workers[0].vm) is not in the inventory of datacenter dc1: check the name (govc find / -type m lists the VMs)"},
				{Reason: ReasonProfileNotOffered, Message: "VM gpu-day-3: host esx-01 does not offer vGPU profile grid_p100-2q (it offers grid_p100-4q, grid_p100-8q, grid_p100-16q)"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := tc.setup(t)
			got := Check(spec, tc.layout, w.inv)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Check =\n%s\nwant\n%s", problemLines(got), problemLines(tc.want))
			}
			p := build(t, spec, w, tc.layout)
			if !slices.Equal(p.Problems, tc.want) || (len(tc.want) > 0 && len(p.Hosts) > 0) {
				t.Errorf("Build: problems %v and %d hosts with steps, want the problems of Check and no steps", p.Problems, len(p.Hosts))
			}
		})
	}
}

// TestCheckPlacementOrder shows a host whose GPUs can hold the layout only if the vGPUs
// are started in the right order: under the performance policy, two 8q started first
// would take one GPU each and leave none for the 4q.
func TestCheckPlacementOrder(t *testing.T) {
	h := &inventory.Host{Name: "esx-01", Policy: inventory.PolicyPerformance, Profiles: p100(), GPUs: []inventory.GPU{
		{PCIID: "0000:3b:00.0", MemoryMiB: gib16}, {PCIID: "0000:af:00.0", MemoryMiB: gib16},
	}}
	var ms []*member
	for _, vm := range []struct{ name, profile string }{{"a", "grid_p100-8q"}, {"b", "grid_p100-8q"}, {"c", "grid_p100-4q"}, {"d", "grid_p100-4q"}} {
		offer, _ := h.Profile(vm.profile)
		ms = append(ms, &member{vm: &inventory.VM{Name: vm.name}, offer: offer})
	}
	occ := make([]inventory.Occupancy, 2)

	order, stuck := powerOnOrder(h, occ, ms)
	if len(stuck) > 0 {
		t.Fatalf("stuck: %v", stuck)
	}
	var got []string
	for _, m := range order {
		gpu := inventory.Place(h, occ, m.offer)
		if gpu < 0 {
			t.Fatalf("order %v: %s does not fit", got, m.vm.Name)
		}
		occ[gpu] = occ[gpu].Add(m.offer, h.GPUs[gpu])
		got = append(got, m.vm.Name)
	}
	if want := []string{"a", "c", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}

	// Largest first, the naive order, fails.
	occ = make([]inventory.Occupancy, 2)
	for _, m := range []*member{ms[0], ms[1], ms[2]} {
		gpu := inventory.Place(h, occ, m.offer)
		if gpu < 0 {
			return
		}
		occ[gpu] = occ[gpu].Add(m.offer, h.GPUs[gpu])
	}
	t.Error("largest first places all; the test shows nothing")
}

func TestPackable(t *testing.T) {
	mixed := &inventory.Host{Profiles: p100(), GPUs: []inventory.GPU{{MemoryMiB: 8 * 1024}, {MemoryMiB: 24 * 1024}, {MemoryMiB: gib16}}}
	p := func(gib int64) inventory.Profile {
		return inventory.Profile{Name: fmt.Sprintf("grid_x-%dq", gib), FrameBufferMiB: gib * 1024}
	}
	tests := []struct {
		name string
		occ  []inventory.Occupancy
		ds   []demand
		want bool
	}{
		{"nothing to start", make([]inventory.Occupancy, 3), nil, true},
		{"one of each size", make([]inventory.Occupancy, 3), []demand{{p(8), 1}, {p(24), 1}, {p(16), 1}}, true},
		// 2 x 12q fit only the 24 GiB GPU, so 16q must take the 16 GiB one and 8q the 8 GiB one.
		{"sizes must match up", make([]inventory.Occupancy, 3), []demand{{p(12), 2}, {p(16), 1}, {p(8), 1}}, true},
		{"too much", make([]inventory.Occupancy, 3), []demand{{p(12), 2}, {p(16), 2}}, false},
		{"room on a GPU that runs the profile", []inventory.Occupancy{{}, {Profile: "grid_x-4q", UsedMiB: 8 * 1024, Count: 2}, {}}, []demand{{p(4), 4}, {p(16), 1}, {p(8), 1}}, true},
		{"no room for another profile next to it", []inventory.Occupancy{{}, {Profile: "grid_x-4q", UsedMiB: 4 * 1024, Count: 1}, {}}, []demand{{p(16), 1}, {p(8), 2}}, false},
	}
	for _, tc := range tests {
		if got := packable(mixed, tc.occ, tc.ds); got != tc.want {
			t.Errorf("%s: packable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestVMIndexMatchesFindVM(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		inv := &inventory.Inventory{}
		for range 20 {
			vm := inventory.VM{Name: fmt.Sprintf("vm-%d", r.IntN(10))}
			if r.IntN(2) == 0 {
				vm.Path = fmt.Sprintf("/dc/vm-%d", r.IntN(10))
			}
			if r.IntN(5) == 0 {
				vm.Path = fmt.Sprintf("vm-%d", r.IntN(10)) // a path that is another VM's name
			}
			inv.VMs = append(inv.VMs, vm)
		}
		idx := newVMIndex(inv)
		for i := range 10 {
			for _, id := range []string{fmt.Sprintf("vm-%d", i), fmt.Sprintf("/dc/vm-%d", i)} {
				want, wantOK := inv.FindVM(id)
				got, ok := idx[id]
				if ok != wantOK || got != want {
					t.Fatalf("index[%s] = %v, %v; FindVM = %v, %v", id, got, ok, want, wantOK)
				}
			}
		}
	}
}

func problemLines(ps []Problem) string {
	if len(ps) == 0 {
		return "  (none)"
	}
	var s string
	for _, p := range ps {
		s += fmt.Sprintf("  %s: %s\n", p.Reason, p.Message)
	}
	return s
}

// TestAmbiguousVMNameStopsThePlan: two VMs of the datacenter carry a layout's VM name
// (in different folders). gpupool must never act on the first match: Check names both
// paths, Build has no steps, and naming the VM by its path resolves it.
func TestAmbiguousVMNameStopsThePlan(t *testing.T) {
	spec, w := sample(t, "day")
	w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: "gpu-day-1", Path: "/dc1/vm/other/gpu-day-1", Host: "esx-01", PowerState: inventory.PoweredOff})
	got := Check(spec, "night", w.inv)
	if len(got) != 1 || got[0].Reason != ReasonAmbiguousVM ||
		!strings.Contains(got[0].Message, "/dc1/vm/gpu/gpu-day-1") || !strings.Contains(got[0].Message, "/dc1/vm/other/gpu-day-1") {
		t.Fatalf("Check = %v, want one AmbiguousVM naming both paths", got)
	}
	if p := build(t, spec, w, "night"); len(p.Hosts) != 0 {
		t.Errorf("Build planned steps for an ambiguous VM name:\n%s", p)
	}
	if _, ok := w.inv.FindVM("gpu-day-1"); ok {
		t.Error("FindVM resolved an ambiguous name")
	}
	for i := range spec.Layouts {
		for j := range spec.Layouts[i].Workers {
			if spec.Layouts[i].Workers[j].VM == "gpu-day-1" {
				spec.Layouts[i].Workers[j].VM = "/dc1/vm/gpu/gpu-day-1"
			}
		}
	}
	if got := Check(spec, "night", w.inv); len(got) != 0 {
		t.Errorf("by path: Check = %v, want none", got)
	}
}

// TestPowerOnOrderBacktracks is what the differential test found (seed 1468): on a
// 24 GiB mixed-size GPU and a 16 GiB same-size one, under performance, 2 x 4q and
// 2 x 1c + 1 x 1c fit only if the single 1c starts first (on the mixed GPU), the 4q VM
// next (both on the same-size GPU, the mixed one being C-series now), then the 2 x 1c.
// Largest first, or the 2 x 1c VM first, strands a family; VMs of one profile with
// different vGPU counts are not interchangeable.
func TestPowerOnOrderBacktracks(t *testing.T) {
	q4 := inventory.Profile{Name: "grid_a40-4q", FrameBufferMiB: 4096}
	c1 := inventory.Profile{Name: "grid_a40-1c", FrameBufferMiB: 1024}
	h := &inventory.Host{Name: "esx-00", Policy: inventory.PolicyPerformance, Profiles: []inventory.Profile{q4, c1}, GPUs: []inventory.GPU{
		{PCIID: "0000:3b:00.0", MemoryMiB: 24 * 1024, Mode: inventory.ModeMixedSize},
		{PCIID: "0000:5b:00.0", MemoryMiB: 16 * 1024, Mode: inventory.ModeSameSize},
	}}
	ms := []*member{
		{vm: &inventory.VM{Name: "vm-0-1"}, offer: c1, count: 2},
		{vm: &inventory.VM{Name: "vm-0-2"}, offer: c1, count: 1},
		{vm: &inventory.VM{Name: "vm-0-4"}, offer: q4, count: 2},
	}
	order, stuck := powerOnOrder(h, make([]inventory.Occupancy, 2), ms)
	if len(stuck) > 0 {
		t.Fatalf("stuck: %v", stuck)
	}
	var got []string
	for _, m := range order {
		got = append(got, m.vm.Name)
	}
	if want := []string{"vm-0-2", "vm-0-4", "vm-0-1"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}
