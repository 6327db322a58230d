package plan

import (
	"fmt"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// bigPool is 125 hosts with four 16 GiB GPUs each (500 GPUs) and 2,000 VMs: by day all
// run grid_p100-4q, four to a GPU; at night four VMs per host run grid_p100-16q.
func bigPool() (*gpupoolv1.GPUPoolProfileSpec, *world) { return bigPoolIn("") }

// bigPoolIn is bigPool with every GPU in the given vGPU mode.
func bigPoolIn(mode string) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	day, night := gpupoolv1.Layout{Name: "day"}, gpupoolv1.Layout{Name: "night"}
	for h := range 125 {
		host := inventory.Host{Name: fmt.Sprintf("esx-%03d", h), Policy: inventory.PolicyPerformance, Profiles: p100()}
		for g := range 4 {
			host.GPUs = append(host.GPUs, inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), MemoryMiB: gib16, Mode: mode})
		}
		for i := range 16 {
			name := fmt.Sprintf("gpu-%03d-%02d", h, i)
			gpu := &host.GPUs[i%4]
			gpu.VMs = append(gpu.VMs, name)
			w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: name, Path: "/dc1/vm/gpu/" + name, Host: host.Name,
				Profile: "grid_p100-4q", PowerState: inventory.PoweredOn, GPU: gpu.PCIID})
			w.nodes[name] = &node{exists: true, ready: true, labels: "day"}
			day.Workers = append(day.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-4q"})
			if i < 4 {
				night.Workers = append(night.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-16q"})
			}
		}
		w.inv.Hosts = append(w.inv.Hosts, host)
	}
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{day, night}, DefaultLayout: "day", Parking: gpupoolv1.ParkingSuspend}
	return spec, w
}

func BenchmarkBuild(b *testing.B) {
	spec, w := bigPool()
	for _, tc := range []struct{ name, layout string }{{"day-to-night", "night"}, {"steady", "day"}} {
		b.Run(tc.name, func(b *testing.B) {
			in := Input{Spec: spec, Layout: tc.layout, Inventory: w.inv, Nodes: w.nodeStates(tc.layout)}
			var steps int
			for b.Loop() {
				p, err := Build(in)
				if err != nil || len(p.Problems) > 0 {
					b.Fatal(err, p.Problems)
				}
				steps = 0
				for _, hp := range p.Hosts {
					steps += len(hp.Steps) + len(hp.Later)
				}
			}
			b.ReportMetric(float64(steps), "steps")
		})
	}
}

// BenchmarkBuildMixedSize is BenchmarkBuild with every GPU in mixed-size mode, where
// feasibility is the exact placement search; "refused" asks each host for two 16q and
// three 8q on two 16q-sized GPUs' worth of room, which the search must exhaust.
func BenchmarkBuildMixedSize(b *testing.B) {
	spec, w := bigPoolIn(inventory.ModeMixedSize)
	refused := gpupoolv1.Layout{Name: "refused"}
	for h := range 125 {
		for i := range 5 {
			p := "grid_p100-8q"
			if i < 2 {
				p = "grid_p100-16q"
			}
			refused.Workers = append(refused.Workers, gpupoolv1.Worker{VM: fmt.Sprintf("gpu-%03d-%02d", h, 4+i), Profile: p, VGPUs: int32(1 + i%2)})
		}
	}
	spec.Layouts = append(spec.Layouts, refused)
	for _, tc := range []struct {
		name, layout string
		problems     bool
	}{{"day-to-night", "night", false}, {"steady", "day", false}, {"refused", "refused", true}} {
		b.Run(tc.name, func(b *testing.B) {
			in := Input{Spec: spec, Layout: tc.layout, Inventory: w.inv, Nodes: w.nodeStates(tc.layout)}
			for b.Loop() {
				p, err := Build(in)
				if err != nil || (len(p.Problems) > 0) != tc.problems {
					b.Fatal(err, p.Problems)
				}
			}
		})
	}
}

func BenchmarkDesired(b *testing.B) {
	spec := scheduleSpec("Europe/Berlin", 15*time.Minute,
		win("day", "0 8 * * 1-5", 12*time.Hour, 0),
		win("batch", "0 22 * * 5", 48*time.Hour, 1),
		win("maint", "0 2 1 * *", 4*time.Hour, 2))
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for b.Loop() {
		d, err := Desired(spec, now)
		if err != nil || d.Next == nil {
			b.Fatal(err, d)
		}
		now = now.Add(17 * time.Minute)
	}
}

// BenchmarkResolve resolves night by count on bigPool (500 GPUs, 2,000 VMs): count GPUs
// converted to grid_p100-16q from the day VMs themselves (night's workers).
func BenchmarkResolve(b *testing.B) {
	spec, w := bigPool()
	costs := Costs{}
	for i, vm := range w.inv.VMs {
		costs[vm.Name] = VMCost{GPUPods: i % 5}
	}
	for _, count := range []int{4, 100} {
		b.Run(fmt.Sprintf("count-%d", count), func(b *testing.B) {
			conv := Conversion{Layout: "night-count", Base: "day", Count: count, Profile: "grid_p100-16q"}
			for _, wk := range spec.Layouts[1].Workers {
				conv.Candidates = append(conv.Candidates, Candidate{VM: wk.VM})
			}
			for b.Loop() {
				r, err := Resolve(spec, conv, w.inv, costs)
				if err != nil || len(r.Problems) > 0 {
					b.Fatal(err, r.Problems)
				}
			}
		})
	}
}
