package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// observe reads the vSphere inventory, the nodes and the pods on the cordoned ones, and
// resolves once which VM and which node each worker of the spec is. It is the pass's
// read of the world before it acts (decidePhase reads it once more to confirm a
// shortfall); s.wanted must be set. A pass checks its tasks first (tasksPhase); a caller
// that only looks (the preview) may leave s.vc nil, and observe then logs in itself. It
// reports false, with when to look again, when the pool cannot go on now; the facts say
// why.
func (r *GPUPoolProfileReconciler) observe(ctx context.Context, s *scope) (time.Duration, bool) {
	pool := s.pool
	if s.vc == nil {
		vcc, retry, ok := r.connectVCenter(ctx, s)
		if !ok {
			return retry, false
		}
		s.vc = vcc
	}
	inv, retry, ok := r.readInventory(ctx, s)
	if !ok {
		return retry, false
	}
	s.inv, s.index = inv, inv.Index()
	if retry, ok := r.checkClaims(ctx, s); !ok {
		return retry, false
	}

	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		s.facts.vcenter = "listing nodes: " + err.Error()
		return requeueDrain, false
	}
	s.vms, s.specID = map[string]*inventory.VM{}, map[string]string{}
	for _, w := range poolWorkers(&pool.Spec) {
		if vm, ok := s.index.FindVM(w.VM); ok {
			s.vms[w.VM] = vm
			s.specID[vm.Name] = w.VM
		}
	}
	s.layouts = nil // indexed by s.vms
	s.allNodes = nodes.Items
	var ambiguous map[string]nodeAmbiguity
	s.nodes, ambiguous = matchNodes(poolWorkers(&pool.Spec), s.vms, s.allNodes)
	s.nodeHolds, s.unsureNodes = nodeHolds(ambiguous)
	r.observeNodes(ctx, s)
	s.facts.observed = true
	return 0, true
}

// poolWorkers lists every VM that any layout names, once, in spec order, with the node
// the spec gives it (the first layout that names one wins) and whether it has none.
func poolWorkers(spec *gpupoolv1.GPUPoolProfileSpec) []gpupoolv1.Worker {
	index := map[string]int{}
	var out []gpupoolv1.Worker
	for _, l := range spec.Layouts {
		for _, w := range l.Workers {
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

// poolVMs lists the spec ids of every VM that any layout names.
func poolVMs(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	ws := poolWorkers(spec)
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.VM
	}
	return out
}

// matchNodes finds each VM's node, keyed by the VM's inventory name: the node the spec
// names; else by spec.providerID (vsphere://<BIOS UUID>); else the node named as the
// VM, exactly, then case-insensitively, then a node named by FQDN whose first label is
// the VM's name. A worker with noNode has none. The first of these ways that finds a node
// decides, and it must find one: a VM whose identity two nodes carry (a stale Node
// object with the VM's providerID, say), and every VM of a node two VMs would share, get
// no node but an ambiguity, by VM name, which the controller holds them with. No drain
// or park ever acts on somebody else's node, and none guesses which node is the VM's.
func matchNodes(workers []gpupoolv1.Worker, vms map[string]*inventory.VM, nodes []corev1.Node) (map[string]*corev1.Node, map[string]nodeAmbiguity) {
	ix := indexNodes(nodes)
	out := map[string]*corev1.Node{}
	ambiguous := map[string]nodeAmbiguity{}
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
func nodeHolds(ambiguous map[string]nodeAmbiguity) ([]plan.Problem, map[string]bool) {
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

// nodeIndex finds nodes by each identity matchNodes knows, every node that carries it.
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
// in matchNodes' order, and that identity as a message names it.
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

// nodeAmbiguity is why a VM has no node although nodes match it: Nodes all carry the
// identity it is matched by (one VM, several nodes), or Nodes is one node that VMs, all
// of them, match (several VMs, one node). Message says so and what to do.
type nodeAmbiguity struct {
	Nodes, VMs []string
	Message    string
}

func identityAmbiguity(vm, by string, found []*corev1.Node) nodeAmbiguity {
	names := make([]string, len(found))
	for i, n := range found {
		names[i] = n.Name
	}
	slices.Sort(names)
	return nodeAmbiguity{Nodes: names, VMs: []string{vm}, Message: fmt.Sprintf(
		"VM %s is held: nodes %s all match it by %s, so gpupool cannot tell which is its node and drains none of them; delete the stale Node object, or name the VM's node in its workers[].node",
		vm, strings.Join(names, " and "), by)}
}

func sharedAmbiguity(node *corev1.Node, vms []string, how map[string]string) nodeAmbiguity {
	vms = slices.Sorted(slices.Values(vms))
	whys := make([]string, len(vms))
	for i, vm := range vms {
		whys[i] = fmt.Sprintf("VM %s by %s", vm, how[vm])
	}
	id := ""
	if node.Spec.ProviderID != "" {
		id = " (spec.providerID " + node.Spec.ProviderID + ")"
	}
	return nodeAmbiguity{Nodes: []string{node.Name}, VMs: vms, Message: fmt.Sprintf(
		"VMs %s are held: node %s%s matches %s, so gpupool cannot tell whose node it is and drains it for none of them; name each VM's own node in its workers[].node, or delete the stale Node object",
		strings.Join(vms, " and "), node.Name, id, strings.Join(whys, " and "))}
}

// observeNodes records what the planner needs of each pool node that only the cluster
// can tell: what it lacks to be ready for work for the wanted layout (s.gaps), and, for
// a cordoned node, whether anything on it is still to evict (s.drained). It is the one
// place a pass lists pods before it acts.
func (r *GPUPoolProfileReconciler) observeNodes(ctx context.Context, s *scope) {
	s.gaps = make(map[string][]string, len(s.nodes))
	s.drained = map[string]bool{}
	for vm, n := range s.nodes {
		// Note: the plan's Ready is readiness for work (Ready and advertising the GPUs,
		// labels and conditions the spec names), so that the plan keeps the worker in
		// WaitNodeReady, within nodeReadyTimeout, until the node can take GPU pods.
		s.gaps[vm] = nodes.ReadinessGaps(n, s.pool.Spec.Readiness, s.gpusWanted(vm, n))
		if n.Spec.Unschedulable {
			pods, err := r.podsOnNode(ctx, n.Name)
			s.drained[vm] = err == nil && !r.anyToEvict(pods, nodes.Ready(n), s.now)
		}
	}
}

// nodeStates tells the planner what it needs of each node, from what observe found and
// the workers' status (a wait for a node that ran out), with Labelled for layout l. It
// reads nothing: a pass derives it again after its own node writes.
func nodeStates(s *scope, l *gpupoolv1.Layout) map[string]plan.NodeState {
	out := make(map[string]plan.NodeState, len(s.nodes))
	for vm, n := range s.nodes {
		ns := plan.NodeState{Name: n.Name, Exists: true, Ready: s.readyForWork(vm), Cordoned: nodes.CordonedByUs(n)}
		if n.Spec.Unschedulable {
			ns.Drained = s.drained[vm]
		}
		out[vm] = ns
	}
	for name, id := range s.specID {
		if ws := findWorker(s.pool, id); ws != nil && waitExpired(s, ws) {
			ns := out[name]
			ns.WaitExpired = true
			out[name] = ns
		}
	}
	return labelledFor(s, l, out)
}

// labelledFor returns the node states with Labelled set for layout l; the rest of a
// node's state does not depend on the layout.
func labelledFor(s *scope, l *gpupoolv1.Layout, states map[string]plan.NodeState) map[string]plan.NodeState {
	out := make(map[string]plan.NodeState, len(states))
	for vm, ns := range states {
		ns.Labelled = false
		if m, ok := s.metaFor(l, vm); ok && s.nodes[vm] != nil {
			ns.Labelled = nodes.HasMeta(s.nodes[vm], m)
		}
		out[vm] = ns
	}
	return out
}

// metaFor is what the node of a VM (by inventory name) should carry as a worker of
// layout l; false when l is nil or has no such worker.
func (s *scope) metaFor(l *gpupoolv1.Layout, name string) (nodes.Meta, bool) {
	if l == nil {
		return nodes.Meta{}, false
	}
	i, ok := s.layoutWorkers(l).byName[name]
	if !ok {
		return nodes.Meta{}, false
	}
	w, v := l.Workers[i], s.vms[l.Workers[i].VM]
	mib, _ := inventory.ProfileFrameBufferMiB(w.Profile)
	if h, ok := s.inv.FindHost(v.Host); ok {
		if p, ok := h.Profile(w.Profile); ok && p.FrameBufferMiB > 0 {
			mib = p.FrameBufferMiB
		}
	}
	return nodes.ActiveMeta(s.pool.Name, l, w.Profile, mib), true
}
