package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// apiNight is countWorld's spec with night as the API writes a layout by count.
func apiNight(spec *gpupoolv1.GPUPoolProfileSpec, count int32) *gpupoolv1.GPUPoolProfileSpec {
	out := *spec
	out.Layouts = slices.Clone(spec.Layouts)
	c := &gpupoolv1.Conversion{Base: "day", Count: count, Profile: "grid_p100-16q"}
	for _, w := range spec.Layouts[1].Workers {
		c.Candidates = append(c.Candidates, gpupoolv1.Candidate{VM: w.VM})
	}
	out.Layouts[1] = gpupoolv1.Layout{Name: "night", Convert: c, NodeLabels: map[string]string{"lab.example/workload": "training"}}
	return &out
}

func TestExpand(t *testing.T) {
	spec, _ := countWorld(t)
	if Expand(spec, nil) != spec {
		t.Error("a spec without layouts by count is not returned as it is")
	}
	api := apiNight(spec, 2)
	e := Expand(api, nil)
	night := e.Layouts[1]
	if len(night.Workers) != 16 || night.Workers[0].Profile != "grid_p100-16q" || night.Convert == nil || night.NodeLabels["lab.example/workload"] != "training" {
		t.Fatalf("expanded night: %d workers (%+v), convert %v, labels %v; want its 16 candidates with grid_p100-16q, convert and labels kept",
			len(night.Workers), night.Workers[:min(1, len(night.Workers))], night.Convert, night.NodeLabels)
	}
	if len(api.Layouts[1].Workers) != 0 {
		t.Error("Expand changed the spec it was given")
	}
	last := map[string]gpupoolv1.Layout{"night": {Name: "night", Convert: api.Layouts[1].Convert, Workers: []gpupoolv1.Worker{{VM: "day-1-01", Profile: "grid_p100-4q"}}}}
	if got := Expand(api, last).Layouts[1].Workers; len(got) != 1 || got[0].VM != "day-1-01" {
		t.Errorf("with a last resolution of the same convert: workers %v, want that resolution's", got)
	}
	if got := Expand(apiNight(spec, 3), last).Layouts[1].Workers; len(got) != 16 {
		t.Errorf("with a last resolution of another count: %d workers, want the 16 candidates", len(got))
	}
}

// TestResolveSpecPassByPass runs the controller's order pass by pass on countWorld
// (Expand from the last resolution, ResolveSpec, Build, the due steps applied): count 4
// runs four night VMs; count 2 parks two of them, evicting nothing, and their GPUs' day
// VMs come back. The resolved spec has the user's layouts only, night keeping Convert.
func TestResolveSpecPassByPass(t *testing.T) {
	spec, w := countWorld(t)
	costs := dayCosts(w)
	var last map[string]gpupoolv1.Layout
	converge := func(count int32) SpecResolution {
		t.Helper()
		api := apiNight(spec, count)
		for pass := range 60 {
			sr := ResolveSpec(Expand(api, last), w.inv, costs)
			if err := sr.Errors["night"]; err != nil {
				t.Fatalf("pass %d: %v", pass, err)
			}
			last = sr.Layouts
			names := make([]string, len(sr.Spec.Layouts))
			for i, l := range sr.Spec.Layouts {
				names[i] = l.Name
			}
			if strings.Join(names, ",") != "day,night" || sr.Spec.Layouts[1].Convert == nil {
				t.Fatalf("resolved layouts %v (night convert %v), want day,night with night's convert", names, sr.Spec.Layouts[1].Convert)
			}
			p := build(t, sr.Spec, w, "night")
			if len(p.Problems) > 0 {
				t.Fatalf("pass %d: %v", pass, p.Problems)
			}
			if p.Done() {
				return sr
			}
			for _, s := range p.Due(4) {
				if s.Action == Drain {
					costs[s.VM] = VMCost{}
				}
				if err := w.apply(s, "night"); err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
			}
		}
		t.Fatal("no convergence in 60 passes")
		return SpecResolution{}
	}
	running := func(prefix string) int {
		n := 0
		for _, vm := range w.inv.VMs {
			if strings.HasPrefix(vm.Name, prefix) && vm.PowerState == inventory.PoweredOn {
				n++
			}
		}
		return n
	}
	converge(4)
	if n := running("night-"); n != 4 {
		t.Fatalf("%d night VMs run at count 4, want 4", n)
	}
	sr := converge(2)
	if n := running("night-"); n != 2 {
		t.Errorf("%d night VMs run at count 2, want 2: the candidates not chosen are parked", n)
	}
	if n := running("day-"); n != 64-8 {
		t.Errorf("%d day VMs run at count 2, want %d", n, 64-8)
	}
	if ev := sr.Resolutions["night"].Evicted; ev != 0 {
		t.Errorf("count 4 -> 2 evicts %d GPU pods, want 0", ev)
	}
}

// TestResolveSpecReportsUnresolvable: a count no choice can meet is an error for that
// layout, which keeps its expanded form; the other layouts resolve.
func TestResolveSpecReportsUnresolvable(t *testing.T) {
	spec, w := countWorld(t)
	api := apiNight(spec, 17)
	sr := ResolveSpec(Expand(api, nil), w.inv, dayCosts(w))
	if err := sr.Errors["night"]; err == nil || !strings.Contains(err.Error(), "lower count to at most 16") {
		t.Fatalf("count 17: error %v, want the limit and the fix", err)
	}
	if _, ok := sr.Resolutions["night"]; ok {
		t.Error("an unresolvable layout has a resolution")
	}
}

// TestResolveSpecMaxHoldBoundsVetoes: with a do-not-disrupt pod on a VM of every GPU, no
// choice spares them: without spec.drain.maxHold the layout cannot be resolved (those
// pods may hold a drain until its timeout); with it (the admin bounded such holds) the
// choice is made, weighing each such pod HeldPodWeight GPU pods, so that it takes the
// GPUs with the fewest of them.
func TestResolveSpecMaxHoldBoundsVetoes(t *testing.T) {
	spec, w := countWorld(t)
	costs := dayCosts(w)
	for h := range 4 {
		host, _ := w.inv.FindHost(fmt.Sprintf("esx-%02d", h+1))
		for g, gpu := range host.GPUs {
			c := costs[gpu.VMs[0]]
			c.DoNotDisrupt = max(c.DoNotDisrupt, 1)
			if h == 2 && g == 1 { // two on esx-03's GPU 1: never among the cheapest
				c.DoNotDisrupt = 2
			}
			c.GPUPods = max(c.GPUPods, c.DoNotDisrupt)
			costs[gpu.VMs[0]] = c
		}
	}
	api := apiNight(spec, 4)
	if sr := ResolveSpec(Expand(api, nil), w.inv, costs); sr.Errors["night"] == nil || !strings.Contains(sr.Errors["night"].Error(), "disruption weights") {
		t.Fatalf("without maxHold: error %v, want no choice that the disruption weights allow", sr.Errors["night"])
	}
	api.Drain.MaxHold = &metav1.Duration{Duration: 5 * time.Minute}
	sr := ResolveSpec(Expand(api, nil), w.inv, costs)
	if err := sr.Errors["night"]; err != nil {
		t.Fatalf("with maxHold: %v", err)
	}
	r := sr.Resolutions["night"]
	if len(r.Chosen) != 4 || r.Cost < 4*HeldPodWeight || r.Cost >= 5*HeldPodWeight {
		t.Errorf("with maxHold: %d GPUs chosen at cost %d, want 4 GPUs with one held pod each (cost in [%d, %d))", len(r.Chosen), r.Cost, 4*HeldPodWeight, 5*HeldPodWeight)
	}
	for _, g := range r.Chosen {
		if g.Host == "esx-03" && g.GPU == "0000:5b:00.0" {
			t.Errorf("chose esx-03's GPU 1, which holds two do-not-disrupt pods")
		}
	}
}

// TestChoiceMoved: a choice moved when the same conversion (count, candidates, weights)
// resolved to other workers, in any way they differ but their order; a changed
// conversion, or a layout that is not by count, is not a moved choice (it is a new one).
func TestChoiceMoved(t *testing.T) {
	conv := &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q",
		Candidates: []gpupoolv1.Candidate{{VM: "night-1"}, {VM: "night-2"}}}
	a := gpupoolv1.Layout{Name: "night", Convert: conv, Workers: []gpupoolv1.Worker{
		{VM: "day-2", Profile: "grid_p100-4q"}, {VM: "night-1", Profile: "grid_p100-16q"}}}
	with := func(change func(l *gpupoolv1.Layout)) gpupoolv1.Layout {
		l := *a.DeepCopy()
		change(&l)
		return l
	}
	for _, c := range []struct {
		name string
		now  gpupoolv1.Layout
		want bool
	}{
		{"same", with(func(*gpupoolv1.Layout) {}), false},
		{"another VM", with(func(l *gpupoolv1.Layout) { l.Workers[0].VM = "day-1" }), true},
		{"another profile", with(func(l *gpupoolv1.Layout) { l.Workers[1].Profile = "grid_p100-8q" }), true},
		{"another vGPU count", with(func(l *gpupoolv1.Layout) { l.Workers[1].VGPUs = 2 }), true},
		{"another node", with(func(l *gpupoolv1.Layout) { l.Workers[1].Node = "n" }), true},
		{"a worker more", with(func(l *gpupoolv1.Layout) { l.Workers = append(l.Workers, gpupoolv1.Worker{VM: "day-4"}) }), true},
		{"a worker less", with(func(l *gpupoolv1.Layout) { l.Workers = l.Workers[:1] }), true},
		{"another order", with(func(l *gpupoolv1.Layout) { slices.Reverse(l.Workers) }), false},
		{"another count", with(func(l *gpupoolv1.Layout) { l.Convert.Count = 2; l.Workers[0].VM = "day-1" }), false},
		{"other candidates", with(func(l *gpupoolv1.Layout) { l.Convert.Candidates = l.Convert.Candidates[:1]; l.Workers[0].VM = "day-1" }), false},
		{"not by count", with(func(l *gpupoolv1.Layout) { l.Convert = nil; l.Workers[0].VM = "day-1" }), false},
	} {
		if got := ChoiceMoved(a, c.now); got != c.want {
			t.Errorf("%s: ChoiceMoved = %v, want %v", c.name, got, c.want)
		}
	}
}
