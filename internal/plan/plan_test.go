package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// converge runs plans to the end the way the controller would: build, run what is due,
// observe, build again. It returns one line per batch of due steps.
func converge(t *testing.T, spec *gpupoolv1.GPUPoolProfileSpec, w *world, layout string, maxParallel int) []string {
	t.Helper()
	var log []string
	for range 100 {
		p := build(t, spec, w, layout)
		if len(p.Problems) > 0 {
			t.Fatalf("problems:\n%s", problemLines(p.Problems))
		}
		if p.Done() {
			return log
		}
		due := p.Due(maxParallel)
		if len(due) == 0 {
			t.Fatalf("nothing due, but the plan is not done:\n%s", p)
		}
		log = append(log, strings.Join(stepLines(due), ", "))
		for _, s := range due {
			if err := w.apply(s, layout); err != nil {
				t.Fatalf("%v\nplan:\n%s", err, p)
			}
		}
	}
	t.Fatal("no convergence after 100 plans")
	return nil
}

func TestBuildSample(t *testing.T) {
	tests := []struct {
		name    string
		current string
		modify  func(*gpupoolv1.GPUPoolProfileSpec, *world)
		layout  string
		steps   []string
		later   []string
		// held are the VMs held back, as "Reason VM".
		held []string
	}{
		{
			name: "day to night", current: "day", layout: "night",
			steps: []string{
				"DrainRequired gpu-day-1 grid_p100-4q", "DrainRequired gpu-day-2 grid_p100-4q", "DrainRequired gpu-day-3 grid_p100-4q", "DrainRequired gpu-day-4 grid_p100-4q",
				"ParkRequired gpu-day-1 grid_p100-4q", "ParkRequired gpu-day-2 grid_p100-4q", "ParkRequired gpu-day-3 grid_p100-4q", "ParkRequired gpu-day-4 grid_p100-4q",
			},
			// The 16q does not fit while the 4q run.
			later: []string{"PowerOnRequired gpu-night-1 grid_p100-16q", "WaitNodeReady gpu-night-1 grid_p100-16q", "UncordonRequired gpu-night-1 grid_p100-16q"},
		},
		{
			name: "day to night, parking PowerOff", current: "day", layout: "night",
			modify: func(s *gpupoolv1.GPUPoolProfileSpec, _ *world) { s.Parking = gpupoolv1.ParkingPowerOff },
			steps: []string{
				"DrainRequired gpu-day-1 grid_p100-4q", "DrainRequired gpu-day-2 grid_p100-4q", "DrainRequired gpu-day-3 grid_p100-4q", "DrainRequired gpu-day-4 grid_p100-4q",
				"PowerOffRequired gpu-day-1 grid_p100-4q", "PowerOffRequired gpu-day-2 grid_p100-4q", "PowerOffRequired gpu-day-3 grid_p100-4q", "PowerOffRequired gpu-day-4 grid_p100-4q",
			},
			later: []string{"PowerOnRequired gpu-night-1 grid_p100-16q", "WaitNodeReady gpu-night-1 grid_p100-16q", "UncordonRequired gpu-night-1 grid_p100-16q"},
		},
		{
			name: "day to night, the day VMs parked and drained already", current: "day", layout: "night",
			modify: func(_ *gpupoolv1.GPUPoolProfileSpec, w *world) {
				for i := 1; i <= 4; i++ {
					name := fmt.Sprintf("gpu-day-%d", i)
					release(w.inv, name)
					w.mustVM(name).PowerState = inventory.Suspended
					w.nodes[name].cordoned, w.nodes[name].drained = true, true
				}
			},
			steps: []string{"PowerOnRequired gpu-night-1 grid_p100-16q", "WaitNodeReady gpu-night-1 grid_p100-16q", "UncordonRequired gpu-night-1 grid_p100-16q"},
		},
		{
			name: "night to day", current: "night", layout: "day",
			steps: []string{"DrainRequired gpu-night-1 grid_p100-16q", "ParkRequired gpu-night-1 grid_p100-16q"},
			later: []string{
				"PowerOnRequired gpu-day-1 grid_p100-4q", "PowerOnRequired gpu-day-2 grid_p100-4q", "PowerOnRequired gpu-day-3 grid_p100-4q", "PowerOnRequired gpu-day-4 grid_p100-4q",
				"WaitNodeReady gpu-day-1 grid_p100-4q", "WaitNodeReady gpu-day-2 grid_p100-4q", "WaitNodeReady gpu-day-3 grid_p100-4q", "WaitNodeReady gpu-day-4 grid_p100-4q",
				"UncordonRequired gpu-day-1 grid_p100-4q", "UncordonRequired gpu-day-2 grid_p100-4q", "UncordonRequired gpu-day-3 grid_p100-4q", "UncordonRequired gpu-day-4 grid_p100-4q",
			},
		},
		{
			name: "night to day, the night node is gone", current: "night", layout: "day",
			// The running night VM is never parked under pods it cannot drain.
			modify: func(_ *gpupoolv1.GPUPoolProfileSpec, w *world) { delete(w.nodes, "gpu-night-1") },
			held:   []string{"NodeNotFound gpu-night-1"},
			later: []string{
				"PowerOnRequired gpu-day-1 grid_p100-4q", "PowerOnRequired gpu-day-2 grid_p100-4q", "PowerOnRequired gpu-day-3 grid_p100-4q", "PowerOnRequired gpu-day-4 grid_p100-4q",
				"WaitNodeReady gpu-day-1 grid_p100-4q", "WaitNodeReady gpu-day-2 grid_p100-4q", "WaitNodeReady gpu-day-3 grid_p100-4q", "WaitNodeReady gpu-day-4 grid_p100-4q",
				"UncordonRequired gpu-day-1 grid_p100-4q", "UncordonRequired gpu-day-2 grid_p100-4q", "UncordonRequired gpu-day-3 grid_p100-4q", "UncordonRequired gpu-day-4 grid_p100-4q",
			},
		},
		{
			name: "steady: nothing to do", current: "day", layout: "day",
		},
		{
			name: "steady, parking PowerOff: suspended VMs stay suspended", current: "night", layout: "night",
			modify: func(s *gpupoolv1.GPUPoolProfileSpec, _ *world) { s.Parking = gpupoolv1.ParkingPowerOff },
		},
		{
			name: "steady, but nodes need care", current: "day", layout: "day",
			modify: func(_ *gpupoolv1.GPUPoolProfileSpec, w *world) {
				w.nodes["gpu-day-1"].cordoned = true
				w.nodes["gpu-day-2"].labels = "night"
				w.nodes["gpu-day-3"].ready = false
				delete(w.nodes, "gpu-day-4")
			},
			steps: []string{
				"WaitNodeReady gpu-day-3 grid_p100-4q", "WaitNodeReady gpu-day-4 grid_p100-4q",
				"RelabelRequired gpu-day-2 grid_p100-4q",
				"UncordonRequired gpu-day-1 grid_p100-4q",
			},
		},
		{
			name: "profiles change", current: "day", layout: "half",
			modify: func(s *gpupoolv1.GPUPoolProfileSpec, _ *world) {
				s.Layouts = append(s.Layouts, layout("half", "grid_p100-8q", "gpu-day-1", "gpu-day-2"))
			},
			steps: []string{
				"DrainRequired gpu-day-1 grid_p100-4q", "DrainRequired gpu-day-2 grid_p100-4q", "DrainRequired gpu-day-3 grid_p100-4q", "DrainRequired gpu-day-4 grid_p100-4q",
				"PowerOffRequired gpu-day-1 grid_p100-4q", "PowerOffRequired gpu-day-2 grid_p100-4q", "ParkRequired gpu-day-3 grid_p100-4q", "ParkRequired gpu-day-4 grid_p100-4q",
				"ReconfigureRequired gpu-day-1 grid_p100-8q", "ReconfigureRequired gpu-day-2 grid_p100-8q",
			},
			later: []string{
				"PowerOnRequired gpu-day-1 grid_p100-8q", "PowerOnRequired gpu-day-2 grid_p100-8q",
				"WaitNodeReady gpu-day-1 grid_p100-8q", "WaitNodeReady gpu-day-2 grid_p100-8q",
				"RelabelRequired gpu-day-1 grid_p100-8q", "RelabelRequired gpu-day-2 grid_p100-8q",
				"UncordonRequired gpu-day-1 grid_p100-8q", "UncordonRequired gpu-day-2 grid_p100-8q",
			},
		},
		{
			name: "a suspended VM changing profile is held without discardSuspendedState", current: "day", layout: "big",
			modify: func(s *gpupoolv1.GPUPoolProfileSpec, _ *world) {
				s.Layouts = append(s.Layouts, layout("big", "grid_p100-8q", "gpu-night-1"))
			},
			steps: []string{
				"DrainRequired gpu-day-1 grid_p100-4q", "DrainRequired gpu-day-2 grid_p100-4q", "DrainRequired gpu-day-3 grid_p100-4q", "DrainRequired gpu-day-4 grid_p100-4q",
				"ParkRequired gpu-day-1 grid_p100-4q", "ParkRequired gpu-day-2 grid_p100-4q", "ParkRequired gpu-day-3 grid_p100-4q", "ParkRequired gpu-day-4 grid_p100-4q",
			},
			held: []string{"SuspendedStateAtRisk gpu-night-1"},
		},
		{
			name: "a suspended VM changing profile loses its suspended state when allowed", current: "day", layout: "big",
			modify: func(s *gpupoolv1.GPUPoolProfileSpec, _ *world) {
				s.Layouts = append(s.Layouts, layout("big", "grid_p100-8q", "gpu-night-1"))
				s.DiscardSuspendedState = true
			},
			steps: []string{
				"DrainRequired gpu-day-1 grid_p100-4q", "DrainRequired gpu-day-2 grid_p100-4q", "DrainRequired gpu-day-3 grid_p100-4q", "DrainRequired gpu-day-4 grid_p100-4q",
				"ParkRequired gpu-day-1 grid_p100-4q", "ParkRequired gpu-day-2 grid_p100-4q", "ParkRequired gpu-day-3 grid_p100-4q", "ParkRequired gpu-day-4 grid_p100-4q",
				"PowerOffRequired gpu-night-1 grid_p100-16q",
				"ReconfigureRequired gpu-night-1 grid_p100-8q",
			},
			later: []string{"PowerOnRequired gpu-night-1 grid_p100-8q", "WaitNodeReady gpu-night-1 grid_p100-8q", "RelabelRequired gpu-night-1 grid_p100-8q", "UncordonRequired gpu-night-1 grid_p100-8q"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := sample(t, tc.current)
			if tc.modify != nil {
				tc.modify(spec, w)
			}
			p := build(t, spec, w, tc.layout)
			if len(p.Problems) > 0 {
				t.Fatalf("problems:\n%s", problemLines(p.Problems))
			}
			var steps, later []string
			for _, hp := range p.Hosts {
				if hp.Host != "esx-01" {
					t.Errorf("steps on host %s", hp.Host)
				}
				steps, later = append(steps, stepLines(hp.Steps)...), append(later, stepLines(hp.Later)...)
			}
			if !slices.Equal(steps, tc.steps) {
				t.Errorf("steps:\n  %s\nwant\n  %s", strings.Join(steps, "\n  "), strings.Join(tc.steps, "\n  "))
			}
			if !slices.Equal(later, tc.later) {
				t.Errorf("later:\n  %s\nwant\n  %s", strings.Join(later, "\n  "), strings.Join(tc.later, "\n  "))
			}
			var held []string
			for _, h := range p.Held {
				held = append(held, h.Reason+" "+h.VM)
			}
			if !slices.Equal(held, tc.held) {
				t.Errorf("held: %v, want %v", held, tc.held)
			}
			if done := len(tc.steps)+len(tc.later)+len(tc.held) == 0; p.Done() != done {
				t.Errorf("Done = %v, want %v", p.Done(), done)
			}
			if len(tc.held) > 0 {
				return // a held VM waits for a person
			}
			// And the plan gets there.
			converge(t, spec, w, tc.layout, 1)
		})
	}
}

// TestSampleRoundTrip is the golden log of a day -> night -> day cycle of the sample.
func TestSampleRoundTrip(t *testing.T) {
	spec, w := sample(t, "day")
	got := append(converge(t, spec, w, "night", 1), "---")
	got = append(got, converge(t, spec, w, "day", 1)...)
	want := []string{
		"DrainRequired gpu-day-1 grid_p100-4q, DrainRequired gpu-day-2 grid_p100-4q, DrainRequired gpu-day-3 grid_p100-4q, DrainRequired gpu-day-4 grid_p100-4q",
		"ParkRequired gpu-day-1 grid_p100-4q, ParkRequired gpu-day-2 grid_p100-4q, ParkRequired gpu-day-3 grid_p100-4q, ParkRequired gpu-day-4 grid_p100-4q",
		"PowerOnRequired gpu-night-1 grid_p100-16q",
		"WaitNodeReady gpu-night-1 grid_p100-16q",
		"UncordonRequired gpu-night-1 grid_p100-16q",
		"---",
		"DrainRequired gpu-night-1 grid_p100-16q",
		"ParkRequired gpu-night-1 grid_p100-16q",
		"PowerOnRequired gpu-day-1 grid_p100-4q, PowerOnRequired gpu-day-2 grid_p100-4q, PowerOnRequired gpu-day-3 grid_p100-4q, PowerOnRequired gpu-day-4 grid_p100-4q",
		"WaitNodeReady gpu-day-1 grid_p100-4q, WaitNodeReady gpu-day-2 grid_p100-4q, WaitNodeReady gpu-day-3 grid_p100-4q, WaitNodeReady gpu-day-4 grid_p100-4q",
		"UncordonRequired gpu-day-1 grid_p100-4q, UncordonRequired gpu-day-2 grid_p100-4q, UncordonRequired gpu-day-3 grid_p100-4q, UncordonRequired gpu-day-4 grid_p100-4q",
	}
	if !slices.Equal(got, want) {
		t.Errorf("log:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// twoHosts is two hosts with two 16 GiB GPUs each, performance placement. By day four
// 4q VMs run on each; at night esx-01 runs two 16q, esx-02 two 8q and two 4q, which fit
// only when started in the right order.
func twoHosts(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	for _, h := range []string{"esx-01", "esx-02"} {
		w.host(h, inventory.PolicyPerformance,
			inventory.GPU{PCIID: "0000:3b:00.0", MemoryMiB: gib16},
			inventory.GPU{PCIID: "0000:af:00.0", MemoryMiB: gib16})
	}
	night := gpupoolv1.Layout{Name: "night"}
	add := func(vm, profile string) {
		night.Workers = append(night.Workers, gpupoolv1.Worker{VM: vm, Profile: profile})
	}
	for _, vm := range []struct{ name, host, profile string }{
		{"a-night-1", "esx-01", "grid_p100-16q"}, {"a-night-2", "esx-01", "grid_p100-16q"},
		{"b-night-1", "esx-02", "grid_p100-8q"}, {"b-night-2", "esx-02", "grid_p100-8q"},
		{"b-night-3", "esx-02", "grid_p100-4q"}, {"b-night-4", "esx-02", "grid_p100-4q"},
	} {
		w.vm(t, vm.name, vm.host, vm.profile, inventory.PoweredOff, "night")
		add(vm.name, vm.profile)
	}
	var dayVMs []string
	for _, h := range []string{"a", "b"} {
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("%s-day-%d", h, i)
			w.vm(t, name, map[string]string{"a": "esx-01", "b": "esx-02"}[h], "grid_p100-4q", inventory.PoweredOn, "day")
			dayVMs = append(dayVMs, name)
		}
	}
	spec := &gpupoolv1.GPUPoolProfileSpec{
		Layouts:       []gpupoolv1.Layout{layout("day", "grid_p100-4q", dayVMs...), night},
		DefaultLayout: "day",
		Parking:       gpupoolv1.ParkingPowerOff,
	}
	return spec, w
}

func TestBuildTwoHosts(t *testing.T) {
	spec, w := twoHosts(t)
	// performance placement spread the day VMs over both GPUs.
	if got := w.inv.Hosts[0].GPUs[1].VMs; !slices.Equal(got, []string{"a-day-2", "a-day-4"}) {
		t.Fatalf("day VMs on esx-01's second GPU: %v", got)
	}
	log := converge(t, spec, w, "night", 2)
	// On esx-01 the two 16q start together (one profile: any order places them the
	// same); on esx-02 an 8q, a 4q, an 8q, a 4q, one at a time: two 8q first would take
	// a GPU each and leave none for the 4q. A node that came up is waited for, then
	// uncordoned, while its host powers on the next VM.
	want := []string{
		"DrainRequired a-day-1 grid_p100-4q, DrainRequired a-day-2 grid_p100-4q, DrainRequired a-day-3 grid_p100-4q, DrainRequired a-day-4 grid_p100-4q, DrainRequired b-day-1 grid_p100-4q, DrainRequired b-day-2 grid_p100-4q, DrainRequired b-day-3 grid_p100-4q, DrainRequired b-day-4 grid_p100-4q",
		"PowerOffRequired a-day-1 grid_p100-4q, PowerOffRequired a-day-2 grid_p100-4q, PowerOffRequired a-day-3 grid_p100-4q, PowerOffRequired a-day-4 grid_p100-4q, PowerOffRequired b-day-1 grid_p100-4q, PowerOffRequired b-day-2 grid_p100-4q, PowerOffRequired b-day-3 grid_p100-4q, PowerOffRequired b-day-4 grid_p100-4q",
		"PowerOnRequired a-night-1 grid_p100-16q, PowerOnRequired a-night-2 grid_p100-16q, PowerOnRequired b-night-1 grid_p100-8q",
		"WaitNodeReady a-night-1 grid_p100-16q, WaitNodeReady a-night-2 grid_p100-16q, PowerOnRequired b-night-3 grid_p100-4q, WaitNodeReady b-night-1 grid_p100-8q",
		"UncordonRequired a-night-1 grid_p100-16q, UncordonRequired a-night-2 grid_p100-16q, PowerOnRequired b-night-2 grid_p100-8q, WaitNodeReady b-night-3 grid_p100-4q, UncordonRequired b-night-1 grid_p100-8q",
		"PowerOnRequired b-night-4 grid_p100-4q, WaitNodeReady b-night-2 grid_p100-8q, UncordonRequired b-night-3 grid_p100-4q",
		"WaitNodeReady b-night-4 grid_p100-4q, UncordonRequired b-night-2 grid_p100-8q",
		"UncordonRequired b-night-4 grid_p100-4q",
	}
	if !slices.Equal(log, want) {
		t.Errorf("log:\n  %s\nwant\n  %s", strings.Join(log, "\n  "), strings.Join(want, "\n  "))
	}
	// And back, one host at a time.
	log = converge(t, spec, w, "day", 1)
	if len(log) == 0 || !strings.HasPrefix(log[0], "DrainRequired a-night-1") || strings.Contains(log[0], "b-night") {
		t.Errorf("night to day starts with %q, want esx-01's drains only", log[0])
	}
}

// TestBuildNodesByPath: a controller may key nodes by the VM as the layout names it,
// which can be the inventory path. The drain before parking must not be skipped then.
func TestBuildNodesByPath(t *testing.T) {
	spec, w := sample(t, "day")
	nodes := map[string]NodeState{}
	for name, n := range w.nodeStates("night") {
		nodes["/dc1/vm/gpu/"+name] = n
	}
	p, err := Build(Input{Spec: spec, Layout: "night", Inventory: w.inv, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	if got := stepLines(p.Due(1)); len(got) != 4 || got[0] != "DrainRequired gpu-day-1 grid_p100-4q" {
		t.Errorf("due = %v, want the four drains", got)
	}
}

func TestBuildLeavesForeignVMsAlone(t *testing.T) {
	spec, w := twoGPUHost(t, "grid_p100-4q")
	spec.Layouts[1] = layout("night", "grid_p100-4q", "gpu-day-1", "gpu-day-2", "gpu-day-3")
	spec.Layouts[1].Workers = append(spec.Layouts[1].Workers, gpupoolv1.Worker{VM: "gpu-night-1", Profile: "grid_p100-16q"})
	log := converge(t, spec, w, "night", 1)
	if strings.Contains(strings.Join(log, "\n"), "other-vm") {
		t.Errorf("steps for the VM outside the pool:\n%s", strings.Join(log, "\n"))
	}
	h := w.inv.Hosts[0]
	if !slices.Equal(h.GPUs[0].VMs, []string{"gpu-night-1"}) || !slices.Equal(h.GPUs[1].VMs, []string{"other-vm", "gpu-day-1", "gpu-day-2", "gpu-day-3"}) {
		t.Errorf("GPUs: %v, %v", h.GPUs[0].VMs, h.GPUs[1].VMs)
	}
}

// TestDuePowerOnsOfOneProfile: the run of power-ons of one profile at the head of the
// placement order starts together; the first of another profile ends the run.
func TestDuePowerOnsOfOneProfile(t *testing.T) {
	on := func(vm, profile string) Step { return Step{Action: PowerOn, VM: vm, Profile: profile} }
	p := &Plan{Hosts: []HostPlan{{Host: "esx-01", Steps: []Step{
		on("a", "grid_p100-4q"), on("b", "grid_p100-4q"), on("c", "grid_p100-8q"), on("d", "grid_p100-4q"),
	}}}}
	if got, want := stepLines(p.Due(1)), []string{"PowerOnRequired a grid_p100-4q", "PowerOnRequired b grid_p100-4q"}; !slices.Equal(got, want) {
		t.Errorf("Due = %v, want %v", got, want)
	}
}

// TestDueOverdue: a node that did not become Ready in time holds neither its siblings,
// nor its own later steps, nor the host's maxParallel slot, nor the plan's completion.
func TestDueOverdue(t *testing.T) {
	overdue := Step{Action: WaitNodeReady, VM: "a", Overdue: true}
	p := &Plan{Hosts: []HostPlan{
		{Host: "esx-01", Steps: []Step{overdue, {Action: WaitNodeReady, VM: "b"}, {Action: Relabel, VM: "a"}, {Action: Relabel, VM: "b"}}},
		{Host: "esx-02", Steps: []Step{{Action: Drain, VM: "c"}}},
	}}
	if got, want := stepLines(p.Due(1)), []string{"WaitNodeReady b", "RelabelRequired a"}; !slices.Equal(got, want) {
		t.Errorf("Due(1) = %v, want %v", got, want)
	}
	p.Hosts[0].Steps = []Step{overdue}
	if got, want := stepLines(p.Due(1)), []string{"DrainRequired c"}; !slices.Equal(got, want) {
		t.Errorf("with only an overdue wait on esx-01, Due(1) = %v, want %v (the slot is released)", got, want)
	}
	if p.Done() {
		t.Error("Done while esx-02 has a drain")
	}
	p.Hosts = p.Hosts[:1]
	if !p.Done() {
		t.Error("not Done with only an overdue wait left")
	}
	if (&Plan{Held: []Problem{{Reason: ReasonNodeNotFound, VM: "x"}}}).Done() {
		t.Error("Done with a held VM")
	}
}

func TestDue(t *testing.T) {
	step := func(a Action, vm string) Step { return Step{Action: a, VM: vm} }
	p := &Plan{Hosts: []HostPlan{
		{Host: "esx-01", Steps: []Step{step(Drain, "a"), step(Drain, "b"), step(Suspend, "a"), step(Suspend, "b")}},
		{Host: "esx-02", Later: []Step{step(PowerOn, "x")}},
		{Host: "esx-03", Steps: []Step{{Action: PowerOn, VM: "c", Profile: "grid_p100-8q"}, {Action: PowerOn, VM: "d", Profile: "grid_p100-4q"}, step(WaitNodeReady, "e")}},
		{Host: "esx-04", Steps: []Step{step(Relabel, "f"), step(Relabel, "g"), step(Uncordon, "f")}},
	}}
	// e's node is waited for while c and d are powered on: node steps are per worker.
	tests := []struct {
		maxParallel int
		want        []string
	}{
		{0, []string{"DrainRequired a", "DrainRequired b"}},
		{1, []string{"DrainRequired a", "DrainRequired b"}},
		{2, []string{"DrainRequired a", "DrainRequired b", "PowerOnRequired c grid_p100-8q", "WaitNodeReady e"}},
		{3, []string{"DrainRequired a", "DrainRequired b", "PowerOnRequired c grid_p100-8q", "WaitNodeReady e", "RelabelRequired f", "RelabelRequired g"}},
		{10, []string{"DrainRequired a", "DrainRequired b", "PowerOnRequired c grid_p100-8q", "WaitNodeReady e", "RelabelRequired f", "RelabelRequired g"}},
	}
	for _, tc := range tests {
		if got := stepLines(p.Due(tc.maxParallel)); !slices.Equal(got, tc.want) {
			t.Errorf("Due(%d) = %v, want %v", tc.maxParallel, got, tc.want)
		}
	}
	if p.Done() {
		t.Error("Done with steps left")
	}
	if !(&Plan{}).Done() || (&Plan{Problems: []Problem{{}}}).Done() || (&Plan{Hosts: []HostPlan{{Later: []Step{{}}}}}).Done() {
		t.Error("Done: want true for an empty plan only")
	}
}

func TestPlanString(t *testing.T) {
	spec, w := sample(t, "day")
	want := `layout night: 11 steps on 1 host
  esx-01  DrainRequired     gpu-day-1    grid_p100-4q   leaves layout night
  esx-01  DrainRequired     gpu-day-2    grid_p100-4q   leaves layout night
  esx-01  DrainRequired     gpu-day-3    grid_p100-4q   leaves layout night
  esx-01  DrainRequired     gpu-day-4    grid_p100-4q   leaves layout night
  esx-01  ParkRequired      gpu-day-1    grid_p100-4q   parked: not in layout night
  esx-01  ParkRequired      gpu-day-2    grid_p100-4q   parked: not in layout night
  esx-01  ParkRequired      gpu-day-3    grid_p100-4q   parked: not in layout night
  esx-01  ParkRequired      gpu-day-4    grid_p100-4q   parked: not in layout night
  esx-01  PowerOnRequired   gpu-night-1  grid_p100-16q  resume for layout night (once GPUs are freed)
  esx-01  WaitNodeReady     gpu-night-1  grid_p100-16q  node not Ready yet (once GPUs are freed)
  esx-01  UncordonRequired  gpu-night-1  grid_p100-16q  node cordoned (once GPUs are freed)
`
	if got := build(t, spec, w, "night").String(); got != want {
		t.Errorf("String:\n%s\nwant\n%s", got, want)
	}

	if got, want := build(t, spec, w, "day").String(), "layout day: nothing to do\n"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	w.inv.Hosts[0].Profiles[0].SuspendSupported = false
	want = "layout night cannot be reached:\n  SuspendNotSupported: parking is Suspend, but host esx-01 cannot suspend VMs with vGPU profile grid_p100-4q: " +
		"VMs gpu-day-1, gpu-day-2, gpu-day-3, gpu-day-4 would be parked; set spec.parking to PowerOff\n"
	if got := build(t, spec, w, "night").String(); got != want {
		t.Errorf("String:\n%s\nwant\n%s", got, want)
	}
}

func TestBuildErrors(t *testing.T) {
	spec, w := sample(t, "day")
	if _, err := Build(Input{Inventory: w.inv, Layout: "day"}); err == nil {
		t.Error("Build without a spec: no error")
	}
	if _, err := Build(Input{Spec: spec, Layout: "day"}); err == nil {
		t.Error("Build without an inventory: no error")
	}
}

// TestHeldByTheController: a VM the controller holds (Input.Held) gets no step whatever
// the layout wants of it (leaving, staying), unless it stays parked, and keeps the plan
// from being done; the controller's problem is reported unchanged.
func TestHeldByTheController(t *testing.T) {
	held := func(vms ...string) []Problem {
		var out []Problem
		for _, vm := range vms {
			out = append(out, Problem{Reason: ReasonAmbiguousNode, VM: vm, Message: "which node is " + vm + "'s?"})
		}
		return out
	}
	tests := []struct {
		name, layout string
		held         []Problem
		want         []string // held, as "Reason VM"
	}{
		{"leaving", "night", held("gpu-day-2"), []string{"AmbiguousNode gpu-day-2"}},
		{"staying", "day", held("gpu-day-2"), []string{"AmbiguousNode gpu-day-2"}},
		{"staying parked", "day", held("gpu-night-1"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := sample(t, "day")
			p, err := Build(Input{Spec: spec, Layout: tc.layout, Inventory: w.inv, Nodes: w.nodeStates(tc.layout), Held: tc.held})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range p.Held {
				got = append(got, h.Reason+" "+h.VM)
				if h.Message != "which node is "+h.VM+"'s?" {
					t.Errorf("held %s with message %q, want the controller's", h.VM, h.Message)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("held %v, want %v", got, tc.want)
			}
			for _, hp := range p.Hosts {
				for _, s := range slices.Concat(hp.Steps, hp.Later) {
					if len(tc.want) > 0 && s.VM == tc.held[0].VM {
						t.Errorf("held VM %s has step %s", s.VM, s.Action)
					}
				}
			}
			if p.Done() != (tc.layout == "day" && len(tc.want) == 0) {
				t.Errorf("Done = %v with held %v", p.Done(), got)
			}
		})
	}
}
