package controllers

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

// poolUsageItems is what counts for the pool's accounting in one pass's world:
//   - each running VM's node that is Ready and schedulable offers its vGPUs'
//     GPU-equivalents, under the node's layout label (unlabelledLayout when it has
//     none) and the VM's profile;
//   - each bound, unfinished pod on a running VM's node that asks for the pool's GPU
//     resource (or, without it, for claimGPUs[uid] devices of the pool's DRA class) is
//     allocated that many of the node's vGPUs, at most all of them, for its tenant
//     (tenantOf its namespace), from its start;
//   - during a transition, the GPUs of the hosts the pool's VMs are on, but for those
//     another VM runs on, minus what the pool's nodes offer, are switching, under the
//     layout being switched to, from the transition's start.
//
// It reads nothing but its arguments. pods are the pods by node name.
func poolUsageItems(pool *gpupoolv1.GPUPoolProfile, w *world.World, pods map[string][]corev1.Pod, claimGPUs map[types.UID]int64, tenantOf func(string) string) []accounting.Item {
	res := demand.GPUResource(pool)
	var items []accounting.Item
	offered := 0.0
	for vmName, node := range w.Nodes {
		vm, ok := w.VM(vmName)
		if node == nil || !ok || !w.Runs(vmName) {
			continue
		}
		host, _ := w.Inventory.FindHost(vm.Host)
		shares := accounting.VMShares(vm, host)
		total := 0.0
		for _, s := range shares {
			total += s
		}
		if total == 0 {
			continue
		}
		layout := node.Labels[gpupoolv1.LabelLayout]
		if layout == "" {
			layout = unlabelledLayout(pool, vm.Profile, w.ID(vmName))
		}
		if nodes.Ready(node) && !node.Spec.Unschedulable {
			items = append(items, accounting.Item{Key: "node/" + node.Name, Kind: accounting.Offered, Layout: layout, Profile: vm.Profile, GPUs: total})
			offered += total
		}
		per := total / float64(len(shares))
		for i := range pods[node.Name] {
			p := &pods[node.Name][i]
			n := demand.PodGPUs(p, res)
			if n == 0 {
				n = claimGPUs[p.UID] // a pod that asks for the resource is not counted twice
			}
			if p.Spec.NodeName != node.Name || demand.Finished(p) || n <= 0 {
				continue
			}
			it := accounting.Item{Key: "pod/" + string(p.UID), Kind: accounting.Allocated, Layout: layout, Profile: vm.Profile,
				Tenant: tenantOf(p.Namespace), GPUs: min(float64(n)*per, total)}
			if p.Status.StartTime != nil {
				it.Since = p.Status.StartTime.Time
			}
			items = append(items, it)
		}
	}
	if t := pool.Status.Transition; t != nil {
		if sw := poolHostGPUs(w) - offered; sw > 1e-9 {
			items = append(items, accounting.Item{Key: "switch/" + t.ID, Kind: accounting.Switching, Layout: t.To, GPUs: sw, Since: t.StartTime.Time})
		}
	}
	slices.SortFunc(items, func(a, b accounting.Item) int { return strings.Compare(a.Key, b.Key) })
	return items
}

// poolHostGPUs counts the physical GPUs of the hosts the pool's VMs are registered on
// that no VM of another pool (or none) runs on: the GPUs the pool can offer.
func poolHostGPUs(w *world.World) float64 {
	hosts := map[string]bool{}
	mine := map[string]bool{}
	for _, vm := range w.VMs {
		if vm != nil {
			hosts[vm.Host] = true
			mine[vm.Name] = true
		}
	}
	n := 0
	for h := range hosts {
		host, ok := w.Inventory.FindHost(h)
		if !ok {
			continue
		}
		for _, g := range host.GPUs {
			if !slices.ContainsFunc(g.VMs, func(vm string) bool { return !mine[vm] }) {
				n++
			}
		}
	}
	return float64(n)
}

// unlabelledLayout is the layout a running VM's node without the layout label serves:
// during a transition, the layout being switched to when the VM is one of its workers
// with its profile (a node powered on for it, not labelled yet); else the active layout.
func unlabelledLayout(pool *gpupoolv1.GPUPoolProfile, profile, specID string) string {
	if t := pool.Status.Transition; t != nil {
		for _, l := range pool.Spec.Layouts {
			if l.Name != t.To {
				continue
			}
			for _, wk := range l.Workers {
				if wk.VM == specID && wk.Profile == profile {
					return t.To
				}
			}
		}
	}
	return pool.Status.ActiveLayout
}
