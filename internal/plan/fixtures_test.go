package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

const gib16 = 16 * 1024

// p100 are the profiles the sample hosts offer, all suspendable.
func p100() []inventory.Profile {
	return []inventory.Profile{
		{Name: "grid_p100-4q", FrameBufferMiB: 4 * 1024, SuspendSupported: true},
		{Name: "grid_p100-8q", FrameBufferMiB: 8 * 1024, SuspendSupported: true},
		{Name: "grid_p100-16q", FrameBufferMiB: 16 * 1024, SuspendSupported: true},
	}
}

// world is an inventory and the nodes of its VMs, which tests change the way vSphere
// and Kubernetes would.
type world struct {
	inv   *inventory.Inventory
	nodes map[string]*node
	// noNode are the VMs that are no Kubernetes workers: no node registers for them.
	noNode map[string]bool
}

// node is a VM's node. labels is the layout whose labels it carries.
type node struct {
	exists, ready, cordoned, drained bool
	labels                           string
}

func (w *world) host(name string, policy string, gpus ...inventory.GPU) {
	w.inv.Hosts = append(w.inv.Hosts, inventory.Host{Name: name, Policy: policy, GPUs: gpus, Profiles: p100()})
}

// vm adds a VM. A running VM is placed the way vSphere would place it; a VM whose node
// state is not given gets a Ready node labelled for labels when running, a cordoned and
// drained one otherwise.
func (w *world) vm(t testing.TB, name, host, profile string, state inventory.PowerState, labels string) {
	t.Helper()
	w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: name, Path: "/dc1/vm/gpu/" + name, Host: host, Profile: profile, PowerState: inventory.PoweredOff})
	if state == inventory.PoweredOn {
		if err := powerOn(w.inv, name); err != nil {
			t.Fatal(err)
		}
		w.nodes[name] = &node{exists: true, ready: true, labels: labels}
	} else {
		w.mustVM(name).PowerState = state
		w.nodes[name] = &node{exists: true, cordoned: true, drained: true, labels: labels}
	}
}

func (w *world) mustVM(name string) *inventory.VM {
	vm, ok := w.inv.FindVM(name)
	if !ok {
		panic("no VM " + name)
	}
	return vm
}

// nodeStates is what the controller would observe, for the wanted layout.
func (w *world) nodeStates(layout string) map[string]NodeState {
	out := make(map[string]NodeState, len(w.nodes))
	for name, n := range w.nodes {
		out[name] = NodeState{Name: name, Exists: n.exists, Ready: n.ready, Cordoned: n.cordoned, Drained: n.drained, Labelled: n.exists && n.labels == layout}
	}
	return out
}

// powerOn starts a VM the way vSphere does: inventory.Place picks the GPU, or the
// power-on fails.
func powerOn(inv *inventory.Inventory, name string) error {
	vm, _ := inv.FindVM(name)
	h, ok := inv.FindHost(vm.Host)
	if !ok {
		return fmt.Errorf("power on %s: no host %s", name, vm.Host)
	}
	p, ok := offerOf(h, vm.Profile)
	if !ok {
		return fmt.Errorf("power on %s: host %s does not offer %q", name, h.Name, vm.Profile)
	}
	occ := occupancyOf(inv, h)
	vm.GPUs = nil
	for range vm.VGPUCount() {
		gpu := inventory.Place(h, occ, p)
		if gpu < 0 {
			release(inv, name)
			return fmt.Errorf("power on %s (%s) on host %s: no GPU can take it (%v)", name, vgpus(vm.VGPUCount(), vm.Profile), h.Name, occ)
		}
		occ[gpu] = occ[gpu].Add(p, h.GPUs[gpu])
		if !slices.Contains(h.GPUs[gpu].VMs, name) {
			h.GPUs[gpu].VMs = append(h.GPUs[gpu].VMs, name)
			vm.GPUs = append(vm.GPUs, h.GPUs[gpu].PCIID)
		}
	}
	slices.Sort(vm.GPUs)
	vm.PowerState, vm.GPU = inventory.PoweredOn, vm.GPUs[0]
	return nil
}

// release takes a VM's vGPU off its GPU.
func release(inv *inventory.Inventory, name string) {
	vm, _ := inv.FindVM(name)
	h, _ := inv.FindHost(vm.Host)
	for i := range h.GPUs {
		h.GPUs[i].VMs = slices.DeleteFunc(h.GPUs[i].VMs, func(n string) bool { return n == name })
	}
	vm.GPU, vm.GPUs = "", nil
}

// occupancyOf is what runs on h's GPUs, computed independently of the planner: a VM
// with n vGPUs listed on k GPUs has n/k on each (tests use n <= 2, where that is
// exact), placed largest first as vSphere does not report placement IDs (see
// analysis.largestFirst).
func occupancyOf(inv *inventory.Inventory, h *inventory.Host) []inventory.Occupancy {
	occ := make([]inventory.Occupancy, len(h.GPUs))
	for i, g := range h.GPUs {
		type vgpu struct {
			name string
			p    inventory.Profile
		}
		var on []vgpu
		for _, name := range g.VMs {
			vm, _ := inv.FindVM(name)
			fb, _ := inventory.ProfileFrameBufferMiB(vm.Profile)
			if p, ok := h.Profile(vm.Profile); ok && p.FrameBufferMiB > 0 {
				fb = p.FrameBufferMiB
			}
			listed := 0
			for _, g := range h.GPUs {
				if slices.Contains(g.VMs, name) {
					listed++
				}
			}
			for range max(vm.VGPUCount()/max(listed, 1), 1) {
				on = append(on, vgpu{name, inventory.Profile{Name: vm.Profile, FrameBufferMiB: fb}})
			}
		}
		slices.SortStableFunc(on, func(x, y vgpu) int {
			if x.p.FrameBufferMiB != y.p.FrameBufferMiB {
				return int(y.p.FrameBufferMiB - x.p.FrameBufferMiB)
			}
			return strings.Compare(x.name, y.name)
		})
		for _, v := range on {
			occ[i] = occ[i].Add(v.p, g)
		}
	}
	return occ
}

func layout(name, profile string, vms ...string) gpupoolv1.Layout {
	l := gpupoolv1.Layout{Name: name}
	for _, vm := range vms {
		l.Workers = append(l.Workers, gpupoolv1.Worker{VM: vm, Profile: profile})
	}
	return l
}

// sample is the pool of the README: one host esx-01 with one 16 GiB P100; by day four VMs
// with grid_p100-4q, at night one VM with grid_p100-16q.
func sample(t testing.TB, current string) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	spec := &gpupoolv1.GPUPoolProfileSpec{
		VCenter: gpupoolv1.VCenterSpec{Datacenter: "dc1"},
		Layouts: []gpupoolv1.Layout{
			layout("day", "grid_p100-4q", "gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"),
			layout("night", "grid_p100-16q", "gpu-night-1"),
		},
		DefaultLayout: "day",
		Parking:       gpupoolv1.ParkingSuspend,
	}
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	w.host("esx-01", inventory.PolicyPerformance, inventory.GPU{PCIID: "0000:3b:00.0", Device: "Tesla P100", MemoryMiB: gib16})
	dayState, nightState := inventory.PoweredOn, inventory.Suspended
	if current == "night" {
		dayState, nightState = inventory.Suspended, inventory.PoweredOn
	}
	// The night VM first, so that its vGPU is not placed while the day VMs run.
	w.vm(t, "gpu-night-1", "esx-01", "grid_p100-16q", nightState, "night")
	for i := 1; i <= 4; i++ {
		w.vm(t, fmt.Sprintf("gpu-day-%d", i), "esx-01", "grid_p100-4q", dayState, "day")
	}
	return spec, w
}

// stepLines writes steps as "Action VM Profile", for comparing.
func stepLines(steps []Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = strings.TrimSpace(fmt.Sprintf("%s %s %s", s.Action, s.VM, s.Profile))
	}
	return out
}

func build(t testing.TB, spec *gpupoolv1.GPUPoolProfileSpec, w *world, layout string) *Plan {
	t.Helper()
	p, err := Build(Input{Spec: spec, Layout: layout, Inventory: w.inv, Nodes: w.nodeStates(layout)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// apply runs a step the way the controller, vSphere and the kubelet would, and says why
// not when the step would fail for real or break a rule the planner must keep.
func (w *world) apply(s Step, layout string) error {
	vm, ok := w.inv.FindVM(s.VM)
	if !ok {
		return fmt.Errorf("%s: no VM %s", s.Action, s.VM)
	}
	n := w.nodes[s.VM]
	if n == nil {
		n = &node{}
		w.nodes[s.VM] = n
	}
	running := vm.PowerState == inventory.PoweredOn
	switch s.Action {
	case Drain:
		if !n.exists || !running {
			return fmt.Errorf("drain %s: node exists %v, VM %s", s.VM, n.exists, vm.PowerState)
		}
		n.cordoned, n.drained = true, true
	case Suspend, PowerOff:
		if vm.PowerState == inventory.PoweredOff || (s.Action == Suspend && !running) {
			return fmt.Errorf("%s %s: VM is %s", s.Action, s.VM, vm.PowerState)
		}
		if h, _ := w.inv.FindHost(vm.Host); h.Unavailable() != "" {
			return fmt.Errorf("%s %s on host %s, which %s", s.Action, s.VM, vm.Host, h.Unavailable())
		}
		if running && n.exists && !n.drained {
			return fmt.Errorf("%s %s: its node is not drained", s.Action, s.VM)
		}
		if s.Action == Suspend {
			h, _ := w.inv.FindHost(vm.Host)
			if p, ok := h.Profile(vm.Profile); vm.Profile != "" && (!ok || !p.SuspendSupported) {
				return fmt.Errorf("suspend %s: host %s cannot suspend %s", s.VM, vm.Host, vm.Profile)
			}
		}
		release(w.inv, s.VM)
		vm.PowerState, n.ready = inventory.Suspended, false
		if s.Action == PowerOff {
			vm.PowerState = inventory.PoweredOff
		}
	case Reconfigure:
		if vm.PowerState != inventory.PoweredOff {
			return fmt.Errorf("reconfigure %s: VM is %s", s.VM, vm.PowerState)
		}
		if h, _ := w.inv.FindHost(vm.Host); !h.Reachable() {
			return fmt.Errorf("reconfigure %s: its host %s %s", s.VM, vm.Host, h.Unavailable())
		}
		vm.Profile, vm.VGPUs, vm.Profiles = s.Profile, max(s.VGPUs, 1), nil
	case PowerOn:
		if running || vm.Profile != s.Profile {
			return fmt.Errorf("power on %s with %s: VM is %s with %q", s.VM, s.Profile, vm.PowerState, vm.Profile)
		}
		if s.Host != "" && s.Host != vm.Host {
			from, _ := w.inv.FindHost(vm.Host)
			to, ok := w.inv.FindHost(s.Host)
			if !ok || to.ComputeResource == "" || to.ComputeResource != from.ComputeResource {
				return fmt.Errorf("power on %s on host %s: not in the compute resource of its host %s", s.VM, s.Host, vm.Host)
			}
			vm.Host = s.Host // vCenter registers the VM on the host it powers it on
		}
		if h, _ := w.inv.FindHost(vm.Host); h.Unavailable() != "" {
			return fmt.Errorf("power on %s on host %s, which %s", s.VM, vm.Host, h.Unavailable())
		}
		if err := powerOn(w.inv, s.VM); err != nil {
			return err
		}
		n.exists, n.ready = !w.noNode[s.VM], false
	case WaitNodeReady:
		if !running {
			return fmt.Errorf("wait for the node of %s: VM is %s", s.VM, vm.PowerState)
		}
		n.exists, n.ready = true, true
	case Relabel:
		if !n.exists {
			return fmt.Errorf("relabel %s: no node", s.VM)
		}
		n.labels = layout
	case Uncordon:
		if !n.exists || !running {
			return fmt.Errorf("uncordon %s: node exists %v, VM %s", s.VM, n.exists, vm.PowerState)
		}
		n.cordoned, n.drained = false, false
	default:
		return fmt.Errorf("unknown action %s", s.Action)
	}
	return nil
}
