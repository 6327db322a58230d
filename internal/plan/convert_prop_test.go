package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// randomCountWorld is a random pool of up to 6 GPUs (16 GB P100s, same-size mode) on 1
// to 3 hosts: each GPU runs 0 to 4 grid_p100-4q or 0 to 2 grid_p100-8q day VMs, some day
// VMs are suspended where there is room for them, and each host has 0 to 3 powered off
// grid_p100-16q night VMs. Day VMs have 0 to 5 GPU pods, a few a do-not-disrupt one.
// On some hosts grid_p100-8q cannot be suspended, so that the cheapest set is not
// always one Check accepts.
func randomCountWorld(rng *rand.Rand) (*gpupoolv1.GPUPoolProfileSpec, *inventory.Inventory, Costs, Conversion) {
	inv := &inventory.Inventory{}
	costs := Costs{}
	day := gpupoolv1.Layout{Name: "day"}
	conv := Conversion{Layout: "night", Base: "day", Profile: "grid_p100-16q"}
	left := 6
	nHosts := 1 + rng.IntN(3)
	for h := range nHosts {
		if left == 0 {
			break
		}
		host := inventory.Host{Name: fmt.Sprintf("esx-%d", h+1), Policy: inventory.PolicyPerformance, Profiles: p100()}
		if rng.IntN(3) == 0 {
			// Parking is Suspend: Check refuses to convert a GPU of 8Q VMs here.
			host.Profiles[1].SuspendSupported = false
		}
		nGPUs := 1 + rng.IntN(min(3, left))
		left -= nGPUs
		room := 0
		for g := range nGPUs {
			gpu := inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), Device: "Tesla P100", MemoryMiB: gib16}
			profile, n := "grid_p100-4q", rng.IntN(5)
			if rng.IntN(4) == 0 {
				profile, n = "grid_p100-8q", rng.IntN(3)
			}
			if profile == "grid_p100-4q" || n == 0 {
				room += 4 - n
			}
			for i := range n {
				name := fmt.Sprintf("day-%d-%d-%d", h+1, g, i)
				gpu.VMs = append(gpu.VMs, name)
				inv.VMs = append(inv.VMs, inventory.VM{Name: name, Host: host.Name, Profile: profile, PowerState: inventory.PoweredOn, GPU: gpu.PCIID, GPUs: []string{gpu.PCIID}})
				day.Workers = append(day.Workers, gpupoolv1.Worker{VM: name, Profile: profile})
				c := VMCost{GPUPods: rng.IntN(6)}
				if rng.IntN(7) == 0 {
					c.DoNotDisrupt = 1
					c.GPUPods = max(c.GPUPods, 1)
				}
				costs[name] = c
			}
			host.GPUs = append(host.GPUs, gpu)
		}
		for i := range rng.IntN(min(2, room) + 1) {
			name := fmt.Sprintf("day-%d-s-%d", h+1, i)
			inv.VMs = append(inv.VMs, inventory.VM{Name: name, Host: host.Name, Profile: "grid_p100-4q", PowerState: inventory.Suspended})
			day.Workers = append(day.Workers, gpupoolv1.Worker{VM: name, Profile: "grid_p100-4q"})
		}
		for i := range rng.IntN(4) {
			name := fmt.Sprintf("night-%d-%d", h+1, i)
			inv.VMs = append(inv.VMs, inventory.VM{Name: name, Host: host.Name, Profile: "grid_p100-16q", PowerState: inventory.PoweredOff})
			conv.Candidates = append(conv.Candidates, Candidate{VM: name})
		}
		inv.Hosts = append(inv.Hosts, host)
	}
	gpus := 0
	for _, h := range inv.Hosts {
		gpus += len(h.GPUs)
	}
	conv.Count = 1 + rng.IntN(gpus)
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{day}, DefaultLayout: "day", Parking: gpupoolv1.ParkingSuspend}
	return spec, inv, costs, conv
}

// bruteForce is the least eviction cost over every set of Count GPUs, computed without
// Resolve: the layout of a set is the day VMs that run on no GPU of it (and the
// suspended ones of hosts with none of it), with as many night VMs of each host as it
// has GPUs in the set. It counts only sets Check accepts and whose plan drains no
// do-not-disrupt pod, and it counts what Build drains. ok is false when no set counts.
func bruteForce(t *testing.T, spec *gpupoolv1.GPUPoolProfileSpec, inv *inventory.Inventory, costs Costs, conv Conversion) (best int, ok bool) {
	t.Helper()
	type gpu struct{ h, g int }
	var all []gpu
	for h, host := range inv.Hosts {
		for g := range host.GPUs {
			all = append(all, gpu{h, g})
		}
	}
	nodes := map[string]NodeState{}
	for _, vm := range inv.VMs {
		if vm.PowerState == inventory.PoweredOn {
			nodes[vm.Name] = NodeState{Name: vm.Name, Exists: true, Ready: true}
		}
	}
	for mask := range 1 << len(all) {
		var set []gpu
		for i, x := range all {
			if mask&(1<<i) != 0 {
				set = append(set, x)
			}
		}
		if len(set) != conv.Count {
			continue
		}
		onSet, perHost := map[string]bool{}, map[string]int{}
		for _, x := range set {
			host := inv.Hosts[x.h]
			perHost[host.Name]++
			for _, vm := range host.GPUs[x.g].VMs {
				onSet[vm] = true
			}
		}
		l := gpupoolv1.Layout{Name: "night"}
		for _, w := range spec.Layouts[0].Workers {
			vm, _ := inv.FindVM(w.VM)
			if (vm.PowerState == inventory.PoweredOn && !onSet[vm.Name]) || (vm.PowerState != inventory.PoweredOn && perHost[vm.Host] == 0) {
				l.Workers = append(l.Workers, w)
			}
		}
		enough := true
		for host, n := range perHost {
			for _, c := range conv.Candidates {
				if vm, _ := inv.FindVM(c.VM); vm.Host == host && n > 0 {
					l.Workers = append(l.Workers, gpupoolv1.Worker{VM: c.VM, Profile: conv.Profile})
					n--
				}
			}
			enough = enough && n == 0
		}
		if !enough {
			continue
		}
		s := *spec
		s.Layouts = append(slices.Clone(spec.Layouts), l, gpupoolv1.Layout{Name: "pool", Workers: candidateWorkers(conv)})
		p, err := Build(Input{Spec: &s, Layout: "night", Inventory: inv, Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Problems) > 0 {
			continue
		}
		evicted, allowed := 0, true
		for _, vm := range drained(p) {
			evicted += costs[vm].GPUPods
			allowed = allowed && costs[vm].DoNotDisrupt == 0
		}
		if allowed && (!ok || evicted < best) {
			best, ok = evicted, true
		}
	}
	return best, ok
}

func candidateWorkers(conv Conversion) []gpupoolv1.Worker {
	var out []gpupoolv1.Worker
	for _, c := range conv.Candidates {
		out = append(out, gpupoolv1.Worker{VM: c.VM, Profile: conv.Profile})
	}
	return out
}

// TestConvertOptimal: on random inventories of up to 6 GPUs the choice evicts as few GPU
// pods as the best of every set of GPUs, Check accepts it, and its plan evicts what the
// resolution says; where no set is allowed, Resolve refuses.
func TestConvertOptimal(t *testing.T) {
	solved, refused := 0, 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 38))
		spec, inv, costs, conv := randomCountWorld(rng)
		want, ok := bruteForce(t, spec, inv, costs, conv)
		r, err := Resolve(spec, conv, inv, costs)
		if !ok {
			if err == nil && len(r.Problems) == 0 {
				t.Errorf("seed %d: no set of %d GPUs is allowed, but Resolve chose %v", seed, conv.Count, choiceNames(r.Chosen))
			}
			refused++
			continue
		}
		if err != nil {
			t.Errorf("seed %d: the best set evicts %d GPU pods, but Resolve: %v", seed, want, err)
			continue
		}
		if len(r.Problems) > 0 {
			t.Errorf("seed %d: Check refuses the choice: %v", seed, r.Problems)
			continue
		}
		if r.Evicted != want {
			t.Errorf("seed %d: choice evicts %d GPU pods, the best set %d\n%s", seed, r.Evicted, want, r)
		}
		nodes := map[string]NodeState{}
		for _, vm := range inv.VMs {
			if vm.PowerState == inventory.PoweredOn {
				nodes[vm.Name] = NodeState{Name: vm.Name, Exists: true, Ready: true}
			}
		}
		p, err := Build(Input{Spec: r.Spec, Layout: "night", Inventory: inv, Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		evicted := 0
		for _, vm := range drained(p) {
			evicted += costs[vm].GPUPods
		}
		if evicted != r.Evicted {
			t.Errorf("seed %d: the plan evicts %d GPU pods, the resolution says %d", seed, evicted, r.Evicted)
		}
		solved++
	}
	t.Logf("%d solved, %d refused", solved, refused)
	if solved < 100 || refused < 20 {
		t.Errorf("%d solved and %d refused: the generator no longer covers both", solved, refused)
	}
}
