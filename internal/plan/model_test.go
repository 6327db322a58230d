package plan

import (
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// l40 are the profiles of the mixed-size tests' hosts.
func l40() []inventory.Profile {
	return []inventory.Profile{
		{Name: "grid_l40-4q", FrameBufferMiB: 4 * 1024, SuspendSupported: true},
		{Name: "grid_l40-8q", FrameBufferMiB: 8 * 1024, SuspendSupported: true},
		{Name: "grid_l40-16q", FrameBufferMiB: 16 * 1024, SuspendSupported: true},
		{Name: "grid_l40-4c", FrameBufferMiB: 4 * 1024},
	}
}

// mixedWorld is esx-01 with one 16 GiB GPU in the given vGPU mode and three powered-off
// VMs, a and b with grid_l40-4q and c with grid_l40-8q; the layout "shared" runs all
// three, the layout "one" runs c alone.
func mixedWorld(t *testing.T, mode string) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	w.inv.Hosts = []inventory.Host{{Name: "esx-01", Policy: inventory.PolicyPerformance, Profiles: l40(),
		GPUs: []inventory.GPU{{PCIID: "0000:3b:00.0", MemoryMiB: gib16, Mode: mode}}}}
	for _, vm := range []struct{ name, profile string }{{"a", "grid_l40-4q"}, {"b", "grid_l40-4q"}, {"c", "grid_l40-8q"}} {
		w.vm(t, vm.name, "esx-01", vm.profile, inventory.PoweredOff, "")
	}
	shared := gpupoolv1.Layout{Name: "shared", Workers: []gpupoolv1.Worker{
		{VM: "a", Profile: "grid_l40-4q"}, {VM: "b", Profile: "grid_l40-4q"}, {VM: "c", Profile: "grid_l40-8q"}}}
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{shared, layout("one", "grid_l40-8q", "c")},
		DefaultLayout: "one", Parking: gpupoolv1.ParkingPowerOff}
	return spec, w
}

// TestMixedSizeMode: two 4Q and one 8Q share one 16 GiB GPU in mixed-size mode; in
// same-size mode they are refused, with a message that names the mode and the switch.
func TestMixedSizeMode(t *testing.T) {
	t.Run("mixed-size mode", func(t *testing.T) {
		spec, w := mixedWorld(t, inventory.ModeMixedSize)
		if ps := Check(spec, "shared", w.inv); len(ps) > 0 {
			t.Fatalf("Check:\n%s", problemLines(ps))
		}
		converge(t, spec, w, "shared", 1)
		if got := w.inv.Hosts[0].GPUs[0].VMs; len(got) != 3 {
			t.Errorf("GPU runs %v, want a, b and c", got)
		}
		// And back: c alone, a and b parked.
		converge(t, spec, w, "one", 1)
		if got := w.inv.Hosts[0].GPUs[0].VMs; !slices.Equal(got, []string{"c"}) {
			t.Errorf("GPU runs %v, want c", got)
		}
	})
	for _, tc := range []struct {
		mode     string
		hint     bool
		contains string
	}{
		{inventory.ModeSameSize, true, "GPU 0000:3b:00.0 is in same-size vGPU mode, which runs one profile per GPU: in mixed-size mode"},
		{"", false, "host esx-01"},
	} {
		t.Run("mode "+tc.mode, func(t *testing.T) {
			spec, w := mixedWorld(t, tc.mode)
			ps := Check(spec, "shared", w.inv)
			if len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
				t.Fatalf("Check:\n%s", problemLines(ps))
			}
			msg := ps[0].Message
			if !strings.Contains(msg, tc.contains) || strings.Contains(msg, "mixed-size mode") != tc.hint {
				t.Errorf("message %q: want %q, hint %v", msg, tc.contains, tc.hint)
			}
			if tc.hint && !strings.Contains(msg, "2 x grid_l40-4q") {
				t.Errorf("message %q does not say what would fit", msg)
			}
		})
	}
}

// TestMixedSizeRefusals: in mixed-size mode a layout that breaks the placement rules is
// refused with the GPUs' state, and Check agrees with a brute-force search over every
// placement.
func TestMixedSizeRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign string // runs on the GPU, outside the pool
		want    map[string]string
		ok      bool
	}{
		{"16Q next to a 4Q outside the pool", "grid_l40-4q", map[string]string{"c": "grid_l40-16q"}, false},
		{"8Q and two 4Q next to nothing", "", map[string]string{"a": "grid_l40-4q", "b": "grid_l40-4q", "c": "grid_l40-8q"}, true},
		{"two 4Q and an 8Q next to a 4Q", "grid_l40-4q", map[string]string{"a": "grid_l40-4q", "b": "grid_l40-4q", "c": "grid_l40-8q"}, false},
		{"4Q and 8Q next to a 4Q", "grid_l40-4q", map[string]string{"a": "grid_l40-4q", "c": "grid_l40-8q"}, true},
		{"C-series next to Q-series", "grid_l40-4q", map[string]string{"a": "grid_l40-4c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := mixedWorld(t, inventory.ModeMixedSize)
			if tc.foreign != "" {
				w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: "other", Host: "esx-01", Profile: tc.foreign, PowerState: inventory.PoweredOff})
				if err := powerOn(w.inv, "other"); err != nil {
					t.Fatal(err)
				}
			}
			l := gpupoolv1.Layout{Name: "try"}
			for _, vm := range []string{"a", "b", "c"} {
				if p, ok := tc.want[vm]; ok {
					l.Workers = append(l.Workers, gpupoolv1.Worker{VM: vm, Profile: p})
				}
			}
			spec.Layouts = append(spec.Layouts, l)
			ps := Check(spec, "try", w.inv)
			if (len(ps) == 0) != tc.ok {
				t.Fatalf("Check = %s, want ok %v", problemLines(ps), tc.ok)
			}
			if !tc.ok && !strings.Contains(ps[0].Message, "placement ID") {
				t.Errorf("message %q does not explain the placement rule", ps[0].Message)
			}
			if tc.ok {
				converge(t, spec, w, "try", 1)
			}
		})
	}
}

// TestMultiVGPUWorker: a training VM with two 16Q vGPUs takes both GPUs of its host.
// Reconfigure gives it two devices, the power-on places both, and a second such VM
// does not fit.
func TestMultiVGPUWorker(t *testing.T) {
	spec, w := twoGPUHost(t, "")
	spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Workers: []gpupoolv1.Worker{{VM: "gpu-night-1", Profile: "grid_p100-16q", VGPUs: 2}}}
	p := build(t, spec, w, "night")
	if len(p.Problems) > 0 {
		t.Fatalf("problems:\n%s", problemLines(p.Problems))
	}
	var reconf *Step
	for i, s := range p.Hosts[0].Steps {
		if s.Action == Reconfigure {
			reconf = &p.Hosts[0].Steps[i]
		}
	}
	if reconf == nil || reconf.VGPUs != 2 || !strings.Contains(reconf.Reason, "grid_p100-16q -> 2 x grid_p100-16q") {
		t.Fatalf("reconfigure step = %+v, want 2 vGPUs with a reason that says so\n%s", reconf, p)
	}
	converge(t, spec, w, "night", 1)
	vm := w.mustVM("gpu-night-1")
	if vm.VGPUs != 2 || len(vm.GPUs) != 2 {
		t.Errorf("VM has %d vGPUs on %v, want 2 on both GPUs", vm.VGPUs, vm.GPUs)
	}
	if p := build(t, spec, w, "night"); !p.Done() {
		t.Errorf("plan not done after converging:\n%s", p)
	}

	// Two such VMs need four GPUs.
	spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-night-2", Profile: "grid_p100-16q", VGPUs: 2})
	ps := Check(spec, "night", w.inv)
	if len(ps) != 1 || !strings.Contains(ps[0].Message, "2 GPUs for grid_p100-16q, 0 of 2 GPUs free") {
		t.Errorf("Check:\n%s", problemLines(ps))
	}

	// From two vGPUs back to one: the reconfigure removes one device.
	spec.Layouts[1].Workers = spec.Layouts[1].Workers[:1]
	spec.Layouts[1].Workers[0].VGPUs = 1
	converge(t, spec, w, "night", 1)
	if vm.VGPUs != 1 || len(vm.GPUs) != 1 {
		t.Errorf("VM has %d vGPUs on %v, want 1", vm.VGPUs, vm.GPUs)
	}
}

// unavailableWorld is two hosts of one cluster, esx-01 and esx-02, each with one 16 GiB
// GPU; gpu-night-1 (16Q) is powered off on esx-01, gpu-day-1 (4Q) runs on esx-02.
func unavailableWorld(t *testing.T, cr2 string) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	spec, _ := sample(t, "day")
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	for _, name := range []string{"esx-01", "esx-02"} {
		w.host(name, inventory.PolicyPerformance, inventory.GPU{PCIID: "0000:3b:00.0", MemoryMiB: gib16})
	}
	w.inv.Hosts[0].ComputeResource, w.inv.Hosts[1].ComputeResource = "domain-c7", cr2
	w.vm(t, "gpu-night-1", "esx-01", "grid_p100-16q", inventory.PoweredOff, "")
	w.vm(t, "gpu-day-1", "esx-02", "grid_p100-4q", inventory.PoweredOn, "day")
	spec.Layouts = []gpupoolv1.Layout{layout("day", "grid_p100-4q", "gpu-day-1"), layout("night", "grid_p100-16q", "gpu-night-1")}
	return spec, w
}

// TestUnavailableHosts: no new work goes to a host in maintenance mode, entering it,
// disconnected or not responding; a powered-off VM starts on another host of its
// cluster when that host has room, else the pool stalls naming the host.
func TestUnavailableHosts(t *testing.T) {
	maintenance := func(h *inventory.Host) { h.InMaintenance = true }
	for _, tc := range []struct {
		name   string
		host1  func(h *inventory.Host)
		cr2    string
		layout string
		// moved: gpu-night-1 is powered on on esx-02; else want names a Problem.
		moved bool
		want  string
		// datastores, when set: esx-02 mounts these; gpu-night-1 is on datastore-11
		// and datastore-12.
		datastores []string
	}{
		{name: "maintenance: powered on on the other host", host1: maintenance, cr2: "domain-c7", layout: "night", moved: true},
		{name: "entering maintenance: powered on on the other host", host1: func(h *inventory.Host) { h.EnteringMaintenance = true }, cr2: "domain-c7", layout: "night", moved: true},
		{name: "maintenance, other host in another cluster", host1: maintenance, cr2: "domain-c9", layout: "night",
			want: "VM gpu-night-1 is registered on host esx-01, which is in maintenance mode, and no other host of its compute resource offers grid_p100-16q"},
		{name: "disconnected", host1: func(h *inventory.Host) { h.ConnectionState = inventory.Disconnected }, cr2: "domain-c7", layout: "night",
			want: "VM gpu-night-1 is registered on host esx-01, which is disconnected: vCenter can neither reconfigure nor power it on"},
		{name: "not responding", host1: func(h *inventory.Host) { h.ConnectionState = inventory.NotResponding }, cr2: "domain-c7", layout: "night",
			want: "which is not responding"},
		{name: "maintenance, other host mounts the VM's datastore", host1: maintenance, cr2: "domain-c7", layout: "night", moved: true,
			datastores: []string{"datastore-11", "datastore-12"}},
		{name: "maintenance, other host lacks one of the VM's datastores", host1: maintenance, cr2: "domain-c7", layout: "night",
			datastores: []string{"datastore-11"},
			want:       "in maintenance mode, and host esx-02 of its compute resource offers grid_p100-16q but does not mount all of its datastores (datastore-11, datastore-12)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := unavailableWorld(t, tc.cr2)
			tc.host1(&w.inv.Hosts[0])
			if tc.datastores != nil {
				w.inv.Hosts[1].Datastores = tc.datastores
				w.mustVM("gpu-night-1").Datastores = []string{"datastore-11", "datastore-12"}
			}
			ps := Check(spec, tc.layout, w.inv)
			if !tc.moved {
				if len(ps) != 1 || ps[0].Reason != ReasonHostUnavailable || !strings.Contains(ps[0].Message, tc.want) {
					t.Fatalf("Check:\n%s\nwant HostUnavailable: %s", problemLines(ps), tc.want)
				}
				return
			}
			if len(ps) > 0 {
				t.Fatalf("Check:\n%s", problemLines(ps))
			}
			p := build(t, spec, w, tc.layout)
			var on *Step
			for _, hp := range p.Hosts {
				for i, s := range append(hp.Steps, hp.Later...) {
					if s.Action == PowerOn {
						on = &append(hp.Steps, hp.Later...)[i]
					}
				}
			}
			if on == nil || on.Host != "esx-02" || !strings.Contains(on.Reason, "its host esx-01 "+w.inv.Hosts[0].Unavailable()) {
				t.Fatalf("power-on step %+v, want one on esx-02 that says why\n%s", on, p)
			}
			converge(t, spec, w, tc.layout, 1)
			if vm := w.mustVM("gpu-night-1"); vm.Host != "esx-02" || vm.PowerState != inventory.PoweredOn {
				t.Errorf("gpu-night-1 is %s on %s", vm.PowerState, vm.Host)
			}
		})
	}
}

// TestUnavailableHostHoldsItsVMs: a running VM that must be parked on a host entering
// maintenance mode is held with a message naming the host; the other host's steps go on,
// and the plan is not done until the host is back.
func TestUnavailableHostHoldsItsVMs(t *testing.T) {
	spec, w := unavailableWorld(t, "domain-c7")
	w.vm(t, "gpu-day-2", "esx-01", "grid_p100-4q", inventory.PoweredOn, "day")
	spec.Layouts[0] = layout("day", "grid_p100-4q", "gpu-day-1", "gpu-day-2")
	spec.Layouts[1] = layout("night", "grid_p100-4q", "gpu-night-2")
	w.vm(t, "gpu-night-2", "esx-02", "grid_p100-4q", inventory.PoweredOff, "")
	w.inv.Hosts[0].EnteringMaintenance = true

	p := build(t, spec, w, "night")
	if len(p.Problems) > 0 {
		t.Fatalf("problems:\n%s", problemLines(p.Problems))
	}
	if len(p.Held) != 1 || p.Held[0].Reason != ReasonHostUnavailable || p.Held[0].VM != "gpu-day-2" ||
		!strings.Contains(p.Held[0].Message, "host esx-01 is entering maintenance mode: gpupool issues no operation on it") {
		t.Fatalf("held = %+v", p.Held)
	}
	for _, hp := range p.Hosts {
		for _, s := range append(hp.Steps, hp.Later...) {
			if s.VM == "gpu-day-2" {
				t.Errorf("step for the held VM: %+v", s)
			}
		}
	}
	// Run the other host's steps to the end; the plan stays not done while the VM is held.
	for range 20 {
		due := build(t, spec, w, "night").Due(2)
		if len(due) == 0 {
			break
		}
		for _, s := range due {
			if err := w.apply(s, "night"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if vm := w.mustVM("gpu-night-2"); vm.PowerState != inventory.PoweredOn {
		t.Errorf("gpu-night-2 is %s, want running: the held VM must not block esx-02", vm.PowerState)
	}
	if p := build(t, spec, w, "night"); p.Done() {
		t.Error("plan done while a VM is held")
	}
	// The host is back: the VM is parked.
	w.inv.Hosts[0].EnteringMaintenance = false
	converge(t, spec, w, "night", 2)
	if vm := w.mustVM("gpu-day-2"); vm.PowerState == inventory.PoweredOn {
		t.Error("gpu-day-2 still runs")
	}
}

// TestSuspendedVMOnUnavailableHost: a suspended VM of an unavailable host is held alone
// (HostUnavailable, or SuspendedStateAtRisk when that holds it already), whatever its
// fate and spec.discardSuspendedState: never a Problem, which would stop every host.
// gpu-day-1 on esx-02 leaves the layout, and its steps go on.
func TestSuspendedVMOnUnavailableHost(t *testing.T) {
	maintenance := func(h *inventory.Host) { h.InMaintenance = true }
	for _, tc := range []struct {
		name    string
		host1   func(h *inventory.Host)
		profile string // the night layout's profile for gpu-night-1 (16Q: resume)
		discard bool
		reason  string
		want    string
	}{
		{name: "resume, maintenance", host1: maintenance, profile: "grid_p100-16q",
			reason: ReasonHostUnavailable, want: "is suspended on host esx-01, which is in maintenance mode, and can resume only there"},
		{name: "resume, entering maintenance", host1: func(h *inventory.Host) { h.EnteringMaintenance = true }, profile: "grid_p100-16q",
			reason: ReasonHostUnavailable, want: "which is entering maintenance mode, and can resume only there"},
		{name: "reprofile, state kept", host1: maintenance, profile: "grid_p100-8q",
			reason: ReasonSuspendedStateAtRisk, want: "discards its suspended memory state"},
		{name: "reprofile, state discarded", host1: maintenance, profile: "grid_p100-8q", discard: true,
			reason: ReasonHostUnavailable, want: "must be reconfigured to grid_p100-8q: gpupool does not power it off there"},
		{name: "disconnected", host1: func(h *inventory.Host) { h.ConnectionState = inventory.Disconnected }, profile: "grid_p100-8q", discard: true,
			reason: ReasonHostUnavailable, want: "vCenter can neither resume, power off nor reconfigure it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := unavailableWorld(t, "domain-c7")
			spec.DiscardSuspendedState = tc.discard
			spec.Layouts[1] = layout("night", tc.profile, "gpu-night-1")
			w.mustVM("gpu-night-1").PowerState = inventory.Suspended
			tc.host1(&w.inv.Hosts[0])
			if ps := Check(spec, "night", w.inv); len(ps) > 0 {
				t.Fatalf("Check:\n%s", problemLines(ps))
			}
			p := build(t, spec, w, "night")
			if len(p.Problems) > 0 {
				t.Fatalf("problems:\n%s", problemLines(p.Problems))
			}
			if len(p.Held) != 1 || p.Held[0].VM != "gpu-night-1" || p.Held[0].Reason != tc.reason || !strings.Contains(p.Held[0].Message, tc.want) {
				t.Fatalf("held = %+v, want gpu-night-1 %s: %s", p.Held, tc.reason, tc.want)
			}
			other := false
			for _, hp := range p.Hosts {
				for _, s := range append(hp.Steps, hp.Later...) {
					if s.VM == "gpu-night-1" {
						t.Errorf("step for the held VM: %+v", s)
					}
					other = other || s.VM == "gpu-day-1"
				}
			}
			if !other {
				t.Errorf("no step parks gpu-day-1 on esx-02: the held VM stops the other host\n%s", p)
			}
		})
	}
}

// TestMultiVGPUPowerOnWaitsForAllItsGPUs: a VM with two vGPUs is powered on only once
// both fit; while a leaving VM still holds one GPU, its power-on is Later.
func TestMultiVGPUPowerOnWaitsForAllItsGPUs(t *testing.T) {
	spec, w := twoGPUHost(t, "")
	if err := powerOnAs(w, "gpu-day-1", "grid_p100-4q"); err != nil {
		t.Fatal(err)
	}
	spec.Layouts[0] = layout("day", "grid_p100-4q", "gpu-day-1")
	spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Workers: []gpupoolv1.Worker{{VM: "gpu-night-1", Profile: "grid_p100-16q", VGPUs: 2}}}
	p := build(t, spec, w, "night")
	if len(p.Problems) > 0 {
		t.Fatalf("problems:\n%s", problemLines(p.Problems))
	}
	for _, s := range p.Hosts[0].Steps {
		if s.Action == PowerOn {
			t.Fatalf("power-on of gpu-night-1 is a step now, while gpu-day-1 holds one of the two GPUs it needs:\n%s", p)
		}
	}
	if !slices.ContainsFunc(p.Hosts[0].Later, func(s Step) bool { return s.Action == PowerOn && s.VM == "gpu-night-1" }) {
		t.Fatalf("no later power-on of gpu-night-1:\n%s", p)
	}
	converge(t, spec, w, "night", 1)
}

// powerOnAs gives a VM a profile and powers it on.
func powerOnAs(w *world, name, profile string) error {
	w.mustVM(name).Profile = profile
	if err := powerOn(w.inv, name); err != nil {
		return err
	}
	w.nodes[name] = &node{exists: true, ready: true, labels: "day"}
	return nil
}

// TestMixedDeviceVM: a VM whose vGPU devices differ is what no worker asks for: for
// every device list and worker, the plan reconfigures the VM exactly when its devices
// are not all the worker's profile and count, and the reconfigure leaves it uniform.
func TestMixedDeviceVM(t *testing.T) {
	profiles := []string{"grid_p100-4q", "grid_p100-8q", "grid_p100-16q"}
	var lists [][]string
	for _, a := range profiles {
		lists = append(lists, []string{a})
		for _, b := range profiles {
			lists = append(lists, []string{a, b})
		}
	}
	for _, devs := range lists {
		for _, want := range profiles {
			for count := 1; count <= 2; count++ {
				spec, w := twoGPUHost(t, "")
				vm := w.mustVM("gpu-night-1")
				vm.Profile, vm.VGPUs = devs[0], len(devs)
				if devs[0] != devs[len(devs)-1] {
					vm.Profiles = devs
				}
				spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Workers: []gpupoolv1.Worker{{VM: "gpu-night-1", Profile: want, VGPUs: int32(count)}}}
				p := build(t, spec, w, "night")
				uniform := len(devs) == count && !slices.ContainsFunc(devs, func(d string) bool { return d != want })
				var reconf *Step
				for i, s := range p.Hosts[0].Steps {
					if s.Action == Reconfigure {
						reconf = &p.Hosts[0].Steps[i]
					}
				}
				if (reconf != nil) == uniform {
					t.Fatalf("VM %v, worker %d x %s: reconfigure %+v, want one: %v\n%s", devs, count, want, reconf, !uniform, p)
				}
				if reconf != nil && !strings.Contains(reconf.Reason, vm.Describe()+" -> "+vgpus(count, want)) {
					t.Errorf("reconfigure reason %q does not say %s -> %s", reconf.Reason, vm.Describe(), vgpus(count, want))
				}
				converge(t, spec, w, "night", 1)
				if !vm.Is(want, count) || vm.PowerState != inventory.PoweredOn {
					t.Errorf("VM %v, worker %d x %s: after converging it is %s, %s", devs, count, want, vm.Describe(), vm.PowerState)
				}
			}
		}
	}
}

// TestMixedDeviceVMOccupancy: a running VM with a 4Q and an 8Q vGPU is counted per
// device (4Q on the first GPU, 8Q on the second, in device order), so an 8Q vGPU fits
// next to its 8Q; counting both as 4Q would leave no same-size GPU for it.
func TestMixedDeviceVMOccupancy(t *testing.T) {
	spec, w := twoGPUHost(t, "")
	w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: "other-vm", Host: "esx-01", Profile: "grid_p100-4q", VGPUs: 2,
		Profiles: []string{"grid_p100-4q", "grid_p100-8q"}, PowerState: inventory.PoweredOn,
		GPU: "0000:3b:00.0", GPUs: []string{"0000:3b:00.0", "0000:af:00.0"}})
	h := &w.inv.Hosts[0]
	h.GPUs[0].VMs, h.GPUs[1].VMs = []string{"other-vm"}, []string{"other-vm"}
	spec.Layouts[1] = layout("night", "grid_p100-8q", "gpu-night-1")
	if ps := Check(spec, "night", w.inv); len(ps) > 0 {
		t.Fatalf("Check:\n%s", problemLines(ps))
	}
	spec.Layouts[1] = layout("night", "grid_p100-8q", "gpu-night-1", "gpu-night-2")
	ps := Check(spec, "night", w.inv)
	if len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
		t.Fatalf("two 8Q next to a 4Q and an 8Q on two 16 GiB GPUs: Check:\n%s", problemLines(ps))
	}
}

// TestHeldVMIsNotCountedTwice: a running VM held on an unavailable host keeps its vGPUs
// there and starts nothing until the host is back; its future vGPUs are no demand on
// that host now (counting both made a pool-wide InsufficientGPU of one held VM).
func TestHeldVMIsNotCountedTwice(t *testing.T) {
	for _, down := range []func(h *inventory.Host){
		func(h *inventory.Host) { h.ConnectionState = inventory.Disconnected },
		func(h *inventory.Host) { h.ConnectionState = inventory.NotResponding },
		func(h *inventory.Host) { h.EnteringMaintenance = true },
	} {
		spec, w := twoGPUHost(t, "")
		if err := powerOnAs(w, "gpu-night-1", "grid_p100-16q"); err != nil {
			t.Fatal(err)
		}
		spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Workers: []gpupoolv1.Worker{{VM: "gpu-night-1", Profile: "grid_p100-16q", VGPUs: 2}}}
		down(&w.inv.Hosts[0])
		p := build(t, spec, w, "night")
		if len(p.Problems) > 0 || len(p.Held) != 1 || p.Held[0].Reason != ReasonHostUnavailable {
			t.Errorf("host %s: problems:\n%s\nheld %+v, want gpu-night-1 held alone", w.inv.Hosts[0].Unavailable(), problemLines(p.Problems), p.Held)
		}
	}
}

// TestMixedDeviceVMGuess: vSphere lists the GPUs of a VM whose devices differ, not which
// device runs where; the planner's guess must be one in which every GPU's vGPUs fit its
// mode. other-vm (8Q, 4Q) shares the second GPU with 8Q vm-y, so its 8Q runs there and
// its 4Q on the first GPU, which then has room for three more 4Q and no 8Q.
func TestMixedDeviceVMGuess(t *testing.T) {
	spec, w := twoGPUHost(t, "")
	w.inv.VMs = append(w.inv.VMs,
		inventory.VM{Name: "other-vm", Host: "esx-01", Profile: "grid_p100-8q", Profiles: []string{"grid_p100-8q", "grid_p100-4q"}, VGPUs: 2,
			PowerState: inventory.PoweredOn, GPU: "0000:3b:00.0", GPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		inventory.VM{Name: "vm-y", Host: "esx-01", Profile: "grid_p100-8q", PowerState: inventory.PoweredOn, GPU: "0000:af:00.0", GPUs: []string{"0000:af:00.0"}})
	h := &w.inv.Hosts[0]
	h.GPUs[0].VMs, h.GPUs[1].VMs = []string{"other-vm"}, []string{"other-vm", "vm-y"}
	spec.Layouts[1] = layout("night", "grid_p100-4q", "gpu-night-1", "gpu-day-1", "gpu-day-2")
	if ps := Check(spec, "night", w.inv); len(ps) > 0 {
		t.Fatalf("three 4Q next to a 4Q: Check:\n%s", problemLines(ps))
	}
	spec.Layouts[1] = layout("night", "grid_p100-8q", "gpu-night-1")
	if ps := Check(spec, "night", w.inv); len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
		t.Fatalf("an 8Q where no GPU has 8 GiB of 8Q room: Check:\n%s", problemLines(ps))
	}
}
