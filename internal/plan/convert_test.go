package plan

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// countWorld is vgpusim's 4 hosts x 4 GPUs: esx-01..esx-04, each with four 16 GB P100s,
// by day sixteen grid_p100-4q VMs per host running (four per GPU, as the performance
// policy spreads them), and four grid_p100-16q night VMs per host powered off. Layouts:
// day (every day VM) and night (every night VM).
func countWorld(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	t.Helper()
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	day, night := gpupoolv1.Layout{Name: "day"}, gpupoolv1.Layout{Name: "night"}
	for h := 1; h <= 4; h++ {
		host := fmt.Sprintf("esx-%02d", h)
		var gpus []inventory.GPU
		for g := range 4 {
			gpus = append(gpus, inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), Device: "Tesla P100", MemoryMiB: gib16})
		}
		w.host(host, inventory.PolicyPerformance, gpus...)
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("night-%d-%d", h, i)
			w.vm(t, name, host, "grid_p100-16q", inventory.PoweredOff, "night")
			night.Workers = append(night.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-16q"})
		}
		for i := 1; i <= 16; i++ {
			name := fmt.Sprintf("day-%d-%02d", h, i)
			w.vm(t, name, host, "grid_p100-4q", inventory.PoweredOn, "day")
			day.Workers = append(day.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-4q"})
		}
	}
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{day, night}, DefaultLayout: "day", Parking: gpupoolv1.ParkingSuspend}
	return spec, w
}

// nightByCount is night as a layout by count: day with count GPUs converted to
// grid_p100-16q, from the night VMs.
func nightByCount(spec *gpupoolv1.GPUPoolProfileSpec, count int) Conversion {
	conv := Conversion{Layout: "night", Base: "day", Count: count, Profile: "grid_p100-16q"}
	for _, w := range spec.Layouts[1].Workers {
		conv.Candidates = append(conv.Candidates, Candidate{VM: w.VM})
	}
	return conv
}

// gpuTotals are the GPU pods per GPU of countWorld's day VMs (host, GPU index); a star
// in dnd marks the GPUs one of whose VMs runs a do-not-disrupt pod.
var gpuTotals = [4][4]int{
	{9, 5, 2, 8},
	{7, 1, 6, 4},
	{0, 8, 8, 3},
	{5, 6, 1, 10},
}

var dndGPUs = [][2]int{{0, 2}, {3, 2}}

// dayCosts spreads gpuTotals over the VMs of each GPU (one more pod on the first ones),
// and gives the first VM of each GPU in dndGPUs a do-not-disrupt pod.
func dayCosts(w *world) Costs {
	costs := Costs{}
	for h := range 4 {
		host, _ := w.inv.FindHost(fmt.Sprintf("esx-%02d", h+1))
		for g, gpu := range host.GPUs {
			total := gpuTotals[h][g]
			for j, vm := range gpu.VMs {
				n := total / len(gpu.VMs)
				if j < total%len(gpu.VMs) {
					n++
				}
				c := VMCost{GPUPods: n}
				if j == 0 && slices.Contains(dndGPUs, [2]int{h, g}) {
					c.DoNotDisrupt = 1
					c.GPUPods = max(c.GPUPods, 1)
				}
				costs[vm] = c
			}
		}
	}
	return costs
}

func gpuName(h, g int) string {
	return fmt.Sprintf("esx-%02d %s", h+1, fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20))
}

func choiceNames(gs []GPUChoice) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Host + " " + g.GPU
	}
	slices.Sort(out)
	return out
}

// drained is the VMs a plan drains, sorted.
func drained(p *Plan) []string {
	var out []string
	for _, hp := range p.Hosts {
		for _, s := range append(slices.Clone(hp.Steps), hp.Later...) {
			if s.Action == Drain {
				out = append(out, s.VM)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestConvertChoosesLeastCost: on the 4 x 4 world a count of 4 converts the four GPUs
// with fewest GPU pods, never one holding a do-not-disrupt pod (two of those are
// cheaper), and the plan evicts exactly the pods on the chosen GPUs.
func TestConvertChoosesLeastCost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights Weights
		want    [][2]int
		evicted int
		cost    int64
	}{
		// The non-do-not-disrupt GPUs by pods: 0, 1, 3, 4 (esx-03 0, esx-02 1, esx-03 3,
		// esx-02 3); esx-01's 2 and esx-04's 1 hold do-not-disrupt pods.
		{name: "never do-not-disrupt", want: [][2]int{{2, 0}, {1, 1}, {2, 3}, {1, 3}}, evicted: 8, cost: 8},
		// At a weight of 1 pod, esx-04's GPU 2 costs 2 and esx-01's GPU 2 costs 3: it
		// ties with esx-03's GPU 3, which keeps the GPUs on three hosts, not four.
		{name: "do-not-disrupt at 1 pod", weights: Weights{DoNotDisrupt: 1}, want: [][2]int{{2, 0}, {1, 1}, {3, 2}, {2, 3}}, evicted: 5, cost: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := countWorld(t)
			costs := dayCosts(w)
			conv := nightByCount(spec, 4)
			conv.Disruption = tc.weights
			r, err := Resolve(spec, conv, w.inv, costs)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, hg := range tc.want {
				want = append(want, gpuName(hg[0], hg[1]))
			}
			slices.Sort(want)
			if got := choiceNames(r.Chosen); !slices.Equal(got, want) {
				t.Errorf("chosen %v, want %v\n%s", got, want, r)
			}
			if r.Evicted != tc.evicted || r.Cost != tc.cost {
				t.Errorf("evicted %d at cost %d, want %d at %d", r.Evicted, r.Cost, tc.evicted, tc.cost)
			}
			if len(r.Problems) > 0 {
				t.Fatalf("Check refuses the resolution: %v", r.Problems)
			}
			if len(r.Chosen)+len(r.NotChosen) != 16 || len(r.Ineligible) != 0 {
				t.Errorf("%d chosen, %d not chosen, %d ineligible; want the 16 GPUs considered", len(r.Chosen), len(r.NotChosen), len(r.Ineligible))
			}
			// The plan drains exactly the VMs on the chosen GPUs, and they hold the
			// evicted pods.
			p, err := Build(Input{Spec: r.Spec, Layout: "night", Inventory: w.inv, Nodes: w.nodeStates("night")})
			if err != nil {
				t.Fatal(err)
			}
			var onChosen []string
			pods := 0
			for _, g := range r.Chosen {
				h, _ := w.inv.FindHost(g.Host)
				for _, gpu := range h.GPUs {
					if gpu.PCIID == g.GPU {
						onChosen = append(onChosen, gpu.VMs...)
						for _, vm := range gpu.VMs {
							pods += costs[vm].GPUPods
						}
					}
				}
			}
			slices.Sort(onChosen)
			if got := drained(p); !slices.Equal(got, onChosen) {
				t.Errorf("plan drains %v, want the VMs on the chosen GPUs %v", got, onChosen)
			}
			if pods != tc.evicted {
				t.Errorf("the chosen GPUs hold %d GPU pods, want %d", pods, tc.evicted)
			}
			for _, g := range r.Chosen {
				if g.Host == "esx-04" && g.GPU == "0000:7b:00.0" && !strings.Contains(g.Why, "evicts 1 GPU pod (cost 2: 1 do-not-disrupt pod at weight 1)") {
					t.Errorf("esx-04's GPU 2 chosen because %q, want its do-not-disrupt pod and weight named", g.Why)
				}
			}
			if tc.weights.DoNotDisrupt == 0 {
				for _, vm := range drained(p) {
					if costs[vm].DoNotDisrupt > 0 {
						t.Errorf("plan drains %s, which runs a do-not-disrupt pod", vm)
					}
				}
				for _, g := range r.NotChosen {
					if g.Host == "esx-01" && g.GPU == "0000:7b:00.0" && !strings.Contains(g.Why, "do-not-disrupt") {
						t.Errorf("esx-01's GPU 2 not chosen because %q, want the do-not-disrupt pod named", g.Why)
					}
				}
			}
			t.Logf("\n%s", r)
		})
	}
}

// TestConvertKeepsGPUsTogether: when every GPU costs the same, the converted GPUs share
// a host (the first by name) rather than spread.
func TestConvertKeepsGPUsTogether(t *testing.T) {
	spec, w := countWorld(t)
	r, err := Resolve(spec, nightByCount(spec, 3), w.inv, Costs{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{gpuName(0, 0), gpuName(0, 1), gpuName(0, 2)}
	if got := choiceNames(r.Chosen); !slices.Equal(got, want) {
		t.Errorf("chosen %v, want %v", got, want)
	}
	// Five GPUs: four on one host, one on the next.
	r, err = Resolve(spec, nightByCount(spec, 5), w.inv, Costs{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]int{}
	for _, g := range r.Chosen {
		hosts[g.Host]++
	}
	if len(hosts) != 2 {
		t.Errorf("5 GPUs on hosts %v, want two hosts", hosts)
	}
}

// TestConvertAllGPUsIsTheEnumeratedLayout: a count covering every GPU plans exactly what
// the enumerated night layout plans (differential against Build).
func TestConvertAllGPUsIsTheEnumeratedLayout(t *testing.T) {
	spec, w := countWorld(t)
	costs := dayCosts(w)
	conv := nightByCount(spec, 16)
	conv.Disruption = Weights{DoNotDisrupt: 1}
	r, err := Resolve(spec, conv, w.inv, costs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Layout.Workers, spec.Layouts[1].Workers) {
		t.Errorf("resolved workers differ from night's:\n%v\n%v", r.Layout.Workers, spec.Layouts[1].Workers)
	}
	nodes := w.nodeStates("night")
	got, err := Build(Input{Spec: r.Spec, Layout: "night", Inventory: w.inv, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	want, err := Build(Input{Spec: spec, Layout: "night", Inventory: w.inv, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("count 16 plans\n%s\nthe enumerated night plans\n%s", got, want)
	}
	if len(drained(got)) != 64 {
		t.Errorf("%d drains, want the 64 day VMs", len(drained(got)))
	}
}

// TestConvertStableOnceStarted: the choice is made again on every pass; as the plan
// drains and parks the chosen GPUs' VMs (their pods gone) the same GPUs stay chosen, and
// the pool converges. A lower count then keeps GPUs already converted and brings the
// day VMs of the others back.
func TestConvertStableOnceStarted(t *testing.T) {
	spec, w := countWorld(t)
	costs := dayCosts(w)
	var first []string
	converge := func(count int) *Resolution {
		t.Helper()
		for pass := range 60 {
			r, err := Resolve(spec, nightByCount(spec, count), w.inv, costs)
			if err != nil {
				t.Fatalf("pass %d: %v", pass, err)
			}
			if first == nil {
				first = choiceNames(r.Chosen)
			}
			if got := choiceNames(r.Chosen); count == 4 && !slices.Equal(got, first) {
				t.Fatalf("pass %d chose %v, the first chose %v", pass, got, first)
			}
			p := build(t, r.Spec, w, "night")
			if len(p.Problems) > 0 {
				t.Fatalf("pass %d: %v", pass, p.Problems)
			}
			if p.Done() {
				return r
			}
			for _, s := range p.Due(4) {
				if s.Action == Drain {
					costs[s.VM] = VMCost{} // evicted
				}
				if err := w.apply(s, "night"); err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
			}
		}
		t.Fatal("no convergence in 60 passes")
		return nil
	}
	converge(4)
	running := 0
	for _, vm := range w.inv.VMs {
		if strings.HasPrefix(vm.Name, "night-") && vm.PowerState == inventory.PoweredOn {
			running++
		}
	}
	if running != 4 {
		t.Errorf("%d night VMs run, want 4", running)
	}

	// Count 2: two of the four converted GPUs stay (cost 0), the other two get their
	// day VMs back.
	r := converge(2)
	if r.Evicted != 0 {
		t.Errorf("count 4 -> 2 evicts %d GPU pods, want 0", r.Evicted)
	}
	for _, g := range choiceNames(r.Chosen) {
		if !slices.Contains(first, g) {
			t.Errorf("count 2 chose %s, which was not converted", g)
		}
	}
	day := 0
	for _, vm := range w.inv.VMs {
		if strings.HasPrefix(vm.Name, "day-") && vm.PowerState == inventory.PoweredOn {
			day++
		}
	}
	if day != 64-8 {
		t.Errorf("%d day VMs run, want 56", day)
	}
}

// TestConvertRefusesImpossibleCounts: input that cannot be resolved says what is wrong
// and what to write instead.
func TestConvertRefusesImpossibleCounts(t *testing.T) {
	spec, w := countWorld(t)
	for _, tc := range []struct {
		name  string
		edit  func(*Conversion)
		costs Costs
		want  []string
	}{
		{name: "more than the GPUs", edit: func(c *Conversion) { c.Count = 17 },
			want: []string{"count 17 is more than the 16 GPUs", "lower count to at most 16"}},
		{name: "more than the candidates fill", edit: func(c *Conversion) { c.Count = 3; c.Candidates = c.Candidates[:2] },
			want: []string{"count 3 needs candidates to fill 3 GPUs", "fill at most 2", "each GPU takes 1 candidate", "add candidates"}},
		{name: "more than the candidates' hosts have", edit: func(c *Conversion) { c.Count = 5; c.Candidates = c.Candidates[:4] },
			want: []string{"count 5 is more than the 4 GPUs the candidates' hosts can convert", "esx-01: 4 of 4 GPUs, 4 candidates", "list candidates on more hosts"}},
		{name: "profile not offered", edit: func(c *Conversion) { c.Profile = "grid_p100-12q" },
			want: []string{"profile grid_p100-12q is not offered by the hosts of the candidates", "esx-01 offers grid_p100-4q, grid_p100-8q, grid_p100-16q", "write a profile they offer"}},
		{name: "not a profile", edit: func(c *Conversion) { c.Profile = "p100-16q" },
			want: []string{`"p100-16q" is not an NVIDIA vGPU type name`}},
		{name: "unknown base", edit: func(c *Conversion) { c.Base = "days" },
			want: []string{`base layout "days" is not one of spec.layouts (day, night)`}},
		{name: "count 0", edit: func(c *Conversion) { c.Count = 0 },
			want: []string{"count must be at least 1 GPU, not 0", "use layout day itself"}},
		{name: "vgpus out of range", edit: func(c *Conversion) { c.VGPUs = 17 },
			want: []string{"vgpus must be between 1 and 16 vGPUs of grid_p100-16q per candidate, not 17"}},
		{name: "a worker larger than a GPU", edit: func(c *Conversion) { c.VGPUs = 2 },
			want: []string{"count 4 is more than the 0 GPUs", "takes 1 of grid_p100-16q, fewer than a worker's 2"}},
		{name: "unknown candidate", edit: func(c *Conversion) { c.Candidates[1].VM = "nigth-1-2" },
			want: []string{"candidates[1]: VM nigth-1-2 is not in the inventory", "did you mean night-1-2?"}},
		{name: "every choice disrupts do-not-disrupt pods", edit: func(c *Conversion) { c.Count = 16 }, costs: Costs{"day-1-01": {GPUPods: 1, DoNotDisrupt: 1}},
			want: []string{"no 16 GPUs can be converted to grid_p100-16q without disrupting", "VM day-1-01 on GPU 0000:3b:00.0 of esx-01 (1 do-not-disrupt pod, 1 GPU pod)", "set disruption weights"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := nightByCount(spec, 4)
			tc.edit(&conv)
			_, err := Resolve(spec, conv, w.inv, tc.costs)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q\nlacks %q", err, s)
				}
			}
		})
	}
}
