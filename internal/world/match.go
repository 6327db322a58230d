package world

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
)

// PoolWorkers lists every VM that any layout names, once, in spec order, with the node
// the spec gives it (the first layout that names one wins) and whether it has none.
func PoolWorkers(spec *gpupoolv1.GPUPoolProfileSpec) []gpupoolv1.Worker {
	index := map[string]int{}
	var out []gpupoolv1.Worker
	for _, l := range spec.Layouts {
		ws := l.Workers
		if c := l.Convert; c != nil {
			// A layout by count's candidates are the pool's whatever form the spec is in
			// (as written, expanded or resolved: plan.Expand).
			ws = slices.Clone(ws)
			for _, cd := range c.Candidates {
				ws = append(ws, gpupoolv1.Worker{VM: cd.VM, Node: cd.Node, NoNode: cd.NoNode})
			}
		}
		for _, w := range ws {
			i, seen := index[w.VM]
			if !seen {
				index[w.VM] = len(out)
				out = append(out, gpupoolv1.Worker{VM: w.VM, Node: w.Node, NoNode: w.NoNode})
				continue
			}
			if out[i].Node == "" {
				out[i].Node = w.Node
			}
			out[i].NoNode = out[i].NoNode || w.NoNode
		}
	}
	return out
}

// PoolVMs lists the spec ids of every VM that any layout names.
func PoolVMs(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	ws := PoolWorkers(spec)
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.VM
	}
	return out
}

// MatchNodes finds each VM's node, keyed by the VM's inventory name: the node the spec
// names; else by spec.providerID (vsphere://<BIOS UUID>); else the node named as the
// VM, exactly, then case-insensitively, then a node named by FQDN whose first label is
// the VM's name. A worker with noNode has none. The first of these ways that finds a node
// decides, and it must find one: a VM whose identity two nodes carry (a stale Node
// object with the VM's providerID, say), and every VM of a node two VMs would share, get
// no node but an ambiguity, by VM name, which the controller holds them with. No drain
// or park ever acts on somebody else's node, and none guesses which node is the VM's.
func MatchNodes(workers []gpupoolv1.Worker, vms map[string]*inventory.VM, nodes []corev1.Node) (map[string]*corev1.Node, map[string]Ambiguity) {
	ix := indexNodes(nodes)
	out := map[string]*corev1.Node{}
	ambiguous := map[string]Ambiguity{}
	how := map[string]string{}      // VM name -> the identity its nodes were found by
	claims := map[string][]string{} // node name -> the VMs that found it, alone or not
	for _, w := range workers {
		vm, ok := vms[w.VM]
		if !ok || w.NoNode || how[vm.Name] != "" {
			continue // Note: a VM named twice (by name and by path) is matched once.
		}
		found, by := ix.candidates(w, vm)
		if len(found) > 0 {
			how[vm.Name] = by
		}
		for _, n := range found {
			claims[n.Name] = append(claims[n.Name], vm.Name)
		}
		switch {
		case len(found) == 1:
			out[vm.Name] = found[0]
		case len(found) > 1:
			ambiguous[vm.Name] = identityAmbiguity(vm.Name, by, found)
		}
	}
	// A node that another VM finds too, alone or among others, is nobody's for sure.
	for node, owners := range claims {
		if len(owners) < 2 {
			continue
		}
		a := sharedAmbiguity(ix.byName[node], owners, how)
		for _, vm := range owners {
			if _, amb := ambiguous[vm]; !amb {
				delete(out, vm)
				ambiguous[vm] = a
			}
		}
	}
	return out, ambiguous
}

// nodeHolds are the problems the VMs of ambiguous are held with (plan.Input.Held), by
// VM name, and the nodes they name, which no pass may take for anybody's.
func NodeHolds(ambiguous map[string]Ambiguity) ([]plan.Problem, map[string]bool) {
	var out []plan.Problem
	unsure := map[string]bool{}
	for _, vm := range slices.Sorted(maps.Keys(ambiguous)) {
		a := ambiguous[vm]
		out = append(out, plan.Problem{Reason: plan.ReasonAmbiguousNode, Message: a.Message, VM: vm})
		for _, n := range a.Nodes {
			unsure[n] = true
		}
	}
	return out, unsure
}

// nodeIndex finds nodes by each identity MatchNodes knows, every node that carries it.
type nodeIndex struct {
	byProvider, byFold, byShort map[string][]*corev1.Node
	byName                      map[string]*corev1.Node
}

func indexNodes(nodes []corev1.Node) nodeIndex {
	ix := nodeIndex{byProvider: map[string][]*corev1.Node{}, byFold: map[string][]*corev1.Node{},
		byShort: map[string][]*corev1.Node{}, byName: make(map[string]*corev1.Node, len(nodes))}
	for i := range nodes {
		n := &nodes[i]
		if id := strings.ToLower(n.Spec.ProviderID); strings.HasPrefix(id, "vsphere://") {
			key := strings.TrimPrefix(id, "vsphere://")
			ix.byProvider[key] = append(ix.byProvider[key], n)
		}
		ix.byName[n.Name] = n
		lower := strings.ToLower(n.Name)
		ix.byFold[lower] = append(ix.byFold[lower], n)
		if short, _, fqdn := strings.Cut(lower, "."); fqdn {
			ix.byShort[short] = append(ix.byShort[short], n)
		}
	}
	return ix
}

// candidates are the nodes found by the first identity of the VM that any node carries,
// in MatchNodes' order, and that identity as a message names it.
func (ix nodeIndex) candidates(w gpupoolv1.Worker, vm *inventory.VM) ([]*corev1.Node, string) {
	if w.Node != "" {
		if n := ix.byName[w.Node]; n != nil {
			return []*corev1.Node{n}, "workers[].node " + w.Node
		}
		return nil, ""
	}
	lower := strings.ToLower(vm.Name)
	if id := strings.ToLower(vm.UUID); id != "" && len(ix.byProvider[id]) > 0 {
		return ix.byProvider[id], "spec.providerID vsphere://" + id
	}
	if n := ix.byName[vm.Name]; n != nil {
		return []*corev1.Node{n}, "the name " + vm.Name
	}
	if ns := ix.byFold[lower]; len(ns) > 0 {
		return ns, "the name " + vm.Name + " case-insensitively"
	}
	return ix.byShort[lower], "the short name " + lower + " of an FQDN"
}

// Ambiguity is why a VM has no node although nodes match it: Nodes all carry the
// identity it is matched by (one VM, several nodes), or Nodes is one node that VMs, all
// of them, match (several VMs, one node). Message says so and what to do.
type Ambiguity struct {
	Nodes, VMs []string
	Message    string
}

func identityAmbiguity(vm, by string, found []*corev1.Node) Ambiguity {
	names := make([]string, len(found))
	for i, n := range found {
		names[i] = n.Name
	}
	slices.Sort(names)
	return Ambiguity{Nodes: names, VMs: []string{vm}, Message: fmt.Sprintf(
		"VM %s is held: nodes %s all match it by %s, so gpupool cannot tell which is its node and drains none of them; delete the stale Node object, or name the VM's node in its workers[].node",
		vm, strings.Join(names, " and "), by)}
}

func sharedAmbiguity(node *corev1.Node, vms []string, how map[string]string) Ambiguity {
	vms = slices.Sorted(slices.Values(vms))
	whys := make([]string, len(vms))
	for i, vm := range vms {
		whys[i] = fmt.Sprintf("VM %s by %s", vm, how[vm])
	}
	id := ""
	if node.Spec.ProviderID != "" {
		id = " (spec.providerID " + node.Spec.ProviderID + ")"
	}
	return Ambiguity{Nodes: []string{node.Name}, VMs: vms, Message: fmt.Sprintf(
		"VMs %s are held: node %s%s matches %s, so gpupool cannot tell whose node it is and drains it for none of them; name each VM's own node in its workers[].node, or delete the stale Node object",
		strings.Join(vms, " and "), node.Name, id, strings.Join(whys, " and "))}
}
