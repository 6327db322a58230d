// Package world holds what one pass of the pool controller observed (World), and the
// pure matching of the pool's VMs to their nodes. A World is built once by the pass's
// observe phase and read by decide and the executor; nothing changes it afterwards but
// the API server's answers to the pass's own node patches, which refresh the Node
// objects it points to (so that the node states derived after those writes see them).
package world

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// World is one consistent read of a pool's world: the vSphere inventory read after the
// pass knew which of its tasks were in flight, the pool's VMs and their nodes.
type World struct {
	// Inventory is vSphere as read; Index finds its VMs by name or path.
	Inventory *inventory.Inventory
	Index     *inventory.VMIndex
	// VMs are the pool's VMs by the name or path the spec gives them (spec id); SpecID
	// maps a VM's inventory name back to that spec id (the workers' status key).
	VMs    map[string]*inventory.VM
	SpecID map[string]string
	// AllNodes are the cluster's nodes as listed; Nodes the pool VMs' nodes among them,
	// by the VM's inventory name, as plan steps name VMs.
	AllNodes []corev1.Node
	Nodes    map[string]*corev1.Node
	// Holds hold the VMs whose node cannot be told (MatchNodes), for every plan
	// (plan.Input.Held); Unsure are the nodes they name, which are nobody's for now.
	Holds  []plan.Problem
	Unsure map[string]bool
	// Gaps are what each node (by VM name) lacks to be ready for work for the wanted
	// layout (nodes.ReadinessGaps); Drained whether a cordoned one has nothing left to
	// evict.
	Gaps    map[string][]string
	Drained map[string]bool
	// TasksInFlight: a task of the pool was still running when the pass looked, before
	// this read; TasksEnded: how many ended at that look. Either way a shortfall in this
	// read is not believed.
	TasksInFlight bool
	TasksEnded    int

	// layouts indexes each layout's workers (New fills it for every layout of the spec).
	layouts map[*gpupoolv1.Layout]layoutIndex
}

// layoutIndex is where each worker of a layout is in its list: the first worker by spec
// id, and the first by the inventory name of the VM it resolved to.
type layoutIndex struct {
	byID, byName map[string]int
}

// Resolve resolves once which VM of inv each worker of the spec is, and indexes every
// layout's workers by it, so that looking a worker up for every node of a large pool
// does not scan the layout each time. The nodes are matched by MatchNodes (Match).
func Resolve(spec *gpupoolv1.GPUPoolProfileSpec, inv *inventory.Inventory) *World {
	w := &World{Inventory: inv, Index: inv.Index(), VMs: map[string]*inventory.VM{}, SpecID: map[string]string{}}
	for _, wk := range PoolWorkers(spec) {
		if vm, ok := w.Index.FindVM(wk.VM); ok {
			w.VMs[wk.VM] = vm
			w.SpecID[vm.Name] = wk.VM
		}
	}
	w.layouts = make(map[*gpupoolv1.Layout]layoutIndex, len(spec.Layouts))
	for i := range spec.Layouts {
		w.layouts[&spec.Layouts[i]] = w.index(&spec.Layouts[i])
	}
	return w
}

// index indexes a layout's workers by spec id and by the inventory name of their VM.
func (w *World) index(l *gpupoolv1.Layout) layoutIndex {
	x := layoutIndex{byID: make(map[string]int, len(l.Workers)), byName: make(map[string]int, len(l.Workers))}
	for j, wk := range l.Workers {
		if _, seen := x.byID[wk.VM]; !seen {
			x.byID[wk.VM] = j
		}
		if v, ok := w.VMs[wk.VM]; ok {
			if _, seen := x.byName[v.Name]; !seen {
				x.byName[v.Name] = j
			}
		}
	}
	return x
}

// Match matches the spec's workers to the cluster's nodes (MatchNodes) and records the
// holds of the ambiguous ones.
func (w *World) Match(spec *gpupoolv1.GPUPoolProfileSpec, all []corev1.Node) {
	w.AllNodes = all
	var ambiguous map[string]Ambiguity
	w.Nodes, ambiguous = MatchNodes(PoolWorkers(spec), w.VMs, all)
	w.Holds, w.Unsure = NodeHolds(ambiguous)
}

// VM returns the inventory VM a plan step names (by inventory name).
func (w *World) VM(name string) (*inventory.VM, bool) {
	if w == nil {
		return nil, false
	}
	if id, ok := w.SpecID[name]; ok {
		vm, found := w.VMs[id]
		return vm, found
	}
	return nil, false
}

// ID is the spec id of the VM a plan step names (the workers' status key), or name
// when the spec does not name it.
func (w *World) ID(name string) string {
	if w != nil {
		if id, ok := w.SpecID[name]; ok {
			return id
		}
	}
	return name
}

// Worker is the worker of layout l whose VM a plan step names (by inventory name).
func (w *World) Worker(l *gpupoolv1.Layout, name string) (gpupoolv1.Worker, bool) {
	if l == nil || w == nil {
		return gpupoolv1.Worker{}, false
	}
	x, ok := w.layouts[l]
	if !ok {
		x = w.index(l) // a layout of another copy of the spec: indexed for this call only
	}
	i, ok := x.byName[name]
	if !ok {
		return gpupoolv1.Worker{}, false
	}
	return l.Workers[i], true
}

// WorkerByID is the worker of layout l with spec id id.
func (w *World) WorkerByID(l *gpupoolv1.Layout, id string) (gpupoolv1.Worker, bool) {
	if l == nil || w == nil {
		return gpupoolv1.Worker{}, false
	}
	x, ok := w.layouts[l]
	if !ok {
		x = w.index(l)
	}
	i, ok := x.byID[id]
	if !ok {
		return gpupoolv1.Worker{}, false
	}
	return l.Workers[i], true
}

// MetaFor is what the node of a VM (by inventory name) should carry as a worker of
// layout l of pool; false when l is nil or has no such worker. In a layout by count the
// base layout's workers that keep running carry the base layout's labels and taints:
// they go on serving its work (only the candidates carry l's).
func (w *World) MetaFor(pool string, l *gpupoolv1.Layout, name string) (nodes.Meta, bool) {
	wk, ok := w.Worker(l, name)
	if !ok {
		return nodes.Meta{}, false
	}
	if c := l.Convert; c != nil && !slices.ContainsFunc(c.Candidates, func(cd gpupoolv1.Candidate) bool { return cd.VM == wk.VM }) {
		for b := range w.layouts {
			if b.Name == c.Base {
				l = b
				break
			}
		}
	}
	v := w.VMs[wk.VM]
	mib, _ := inventory.ProfileFrameBufferMiB(wk.Profile)
	if h, ok := w.Inventory.FindHost(v.Host); ok {
		if p, ok := h.Profile(wk.Profile); ok && p.FrameBufferMiB > 0 {
			mib = p.FrameBufferMiB
		}
	}
	return nodes.ActiveMeta(pool, l, wk.Profile, mib), true
}

// Runs tells whether the VM a plan step names (by inventory name) is powered on: only
// such a VM's node holds pods gpupool reads (a parked VM's node runs none).
func (w *World) Runs(name string) bool {
	vm, ok := w.VM(name)
	return ok && vm.PowerState == inventory.PoweredOn
}

// Running are the names of the nodes matched to the pool's VMs that run (Runs): the
// nodes whose pods gpupool needs to see. The plan asks whether a cordoned node is
// drained only while its VM runs, and demand reads no parked node: watching the pods of
// the nodes of a night's parked day VMs (1,024 of 1,280 nodes at 64 hosts) only cost the
// API server's bookmarks and the watches' memory.
func (w *World) Running() []string {
	out := make([]string, 0, len(w.Nodes))
	for vm, n := range w.Nodes {
		if n != nil && w.Runs(vm) {
			out = append(out, n.Name)
		}
	}
	return out
}
