package controllers

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/world"
)

// TestMatchNodesAmbiguity: a VM whose identity two nodes carry, or whose node another VM
// finds too, gets no node but an ambiguity that names the nodes, the identity and what
// to do; list order never decides.
func TestMatchNodesAmbiguity(t *testing.T) {
	const uuid = "4215aaaa-0000-0000-0000-000000000001"
	node := func(name, provider string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: provider}}
	}
	type held struct {
		nodes, vms []string
		says       []string // what the message must name
	}
	tests := []struct {
		name    string
		nodes   []corev1.Node
		vms     []*inventory.VM
		workers []gpupoolv1.Worker // default: one plain worker per VM
		matched map[string]string
		held    map[string]held
	}{{
		name:    "one node carries the providerID",
		nodes:   []corev1.Node{node("gpu-5", "vsphere://"+strings.ToUpper(uuid)), node("gpu-6", "")},
		vms:     []*inventory.VM{{Name: "gpu-5", UUID: uuid}},
		matched: map[string]string{"gpu-5": "gpu-5"},
	}, {
		name:  "two nodes carry the providerID, in different case",
		nodes: []corev1.Node{node("node-x", "vsphere://"+strings.ToUpper(uuid)), node("node-y", "vsphere://"+uuid)},
		vms:   []*inventory.VM{{Name: "vm-a", UUID: uuid}},
		held: map[string]held{"vm-a": {nodes: []string{"node-x", "node-y"}, vms: []string{"vm-a"},
			says: []string{"node-x", "node-y", "vsphere://" + uuid, "delete the stale Node object", "workers[].node"}}},
	}, {
		// The node named as the VM is no better a guess: the providerID comes first.
		name:  "two nodes carry the providerID, one also by the VM's name",
		nodes: []corev1.Node{node("gpu-4", "vsphere://"+uuid), node("gpu-4-old", "vsphere://"+strings.ToUpper(uuid))},
		vms:   []*inventory.VM{{Name: "gpu-4", UUID: uuid}},
		held: map[string]held{"gpu-4": {nodes: []string{"gpu-4", "gpu-4-old"}, vms: []string{"gpu-4"},
			says: []string{"gpu-4 and gpu-4-old", "vsphere://" + uuid}}},
	}, {
		name:  "two FQDN nodes share the short name",
		nodes: []corev1.Node{node("twin.b.example", ""), node("twin.a.example", "")},
		vms:   []*inventory.VM{{Name: "twin"}},
		held: map[string]held{"twin": {nodes: []string{"twin.a.example", "twin.b.example"}, vms: []string{"twin"},
			says: []string{"twin.a.example and twin.b.example", "short name twin"}}},
	}, {
		name:    "two VMs find one node",
		nodes:   []corev1.Node{node("shared", "vsphere://"+uuid), node("b", "")},
		vms:     []*inventory.VM{{Name: "a"}, {Name: "b", UUID: uuid}},
		workers: []gpupoolv1.Worker{{VM: "a", Node: "shared"}, {VM: "b"}},
		held: map[string]held{
			"a": {nodes: []string{"shared"}, vms: []string{"a", "b"}, says: []string{"node shared", "vsphere://" + uuid, "VM a by workers[].node shared", "VM b by spec.providerID"}},
			"b": {nodes: []string{"shared"}, vms: []string{"a", "b"}},
		},
	}, {
		// c's node by name is among the nodes that carry d's providerID: it is nobody's
		// for sure, and the VM it is unique for is held too.
		name:    "a VM's node is among another VM's ambiguous nodes",
		nodes:   []corev1.Node{node("c", "vsphere://"+uuid), node("d", "vsphere://"+uuid), node("e", "")},
		vms:     []*inventory.VM{{Name: "c", UUID: "4215cccc"}, {Name: "d", UUID: uuid}, {Name: "e"}},
		matched: map[string]string{"e": "e"},
		held: map[string]held{
			"c": {nodes: []string{"c"}, vms: []string{"c", "d"}, says: []string{"node c", "VM c by the name c"}},
			"d": {nodes: []string{"c", "d"}, vms: []string{"d"}, says: []string{"c and d", "vsphere://" + uuid}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vms := map[string]*inventory.VM{}
			workers := tc.workers
			for _, vm := range tc.vms {
				vms[vm.Name] = vm
				if tc.workers == nil {
					workers = append(workers, gpupoolv1.Worker{VM: vm.Name})
				}
			}
			// Either order of the node list gives the same answer.
			for _, nodes := range [][]corev1.Node{tc.nodes, reversed(tc.nodes)} {
				matched, ambiguous := world.MatchNodes(workers, vms, nodes)
				got := map[string]string{}
				for vm, n := range matched {
					got[vm] = n.Name
				}
				if !maps.Equal(got, tc.matched) {
					t.Errorf("matched %v, want %v", got, tc.matched)
				}
				if len(ambiguous) != len(tc.held) {
					t.Errorf("held %v, want %v", slices.Sorted(maps.Keys(ambiguous)), slices.Sorted(maps.Keys(tc.held)))
				}
				for vm, want := range tc.held {
					a, ok := ambiguous[vm]
					if !ok {
						t.Errorf("VM %s not held", vm)
						continue
					}
					if !slices.Equal(a.Nodes, want.nodes) || !slices.Equal(a.VMs, want.vms) {
						t.Errorf("VM %s held for nodes %v of VMs %v, want nodes %v of VMs %v", vm, a.Nodes, a.VMs, want.nodes, want.vms)
					}
					for _, s := range append(want.says, "VM", vm, "held") {
						if !strings.Contains(a.Message, s) {
							t.Errorf("VM %s: message %q lacks %q", vm, a.Message, s)
						}
					}
				}
			}
		})
	}
}

func reversed[T any](xs []T) []T {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}
