package controllers

import (
	"context"
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
	s.nodes = matchNodes(poolWorkers(&pool.Spec), s.vms, s.allNodes)
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
// the VM's name. A worker with noNode has none. A node two VMs would share is given to
// neither, so that no drain or park ever acts on somebody else's node.
func matchNodes(workers []gpupoolv1.Worker, vms map[string]*inventory.VM, nodes []corev1.Node) map[string]*corev1.Node {
	byProvider := map[string]*corev1.Node{}
	byName := map[string]*corev1.Node{}
	byFold := map[string][]*corev1.Node{}
	byShort := map[string][]*corev1.Node{}
	for i := range nodes {
		n := &nodes[i]
		if id := strings.ToLower(n.Spec.ProviderID); strings.HasPrefix(id, "vsphere://") {
			byProvider[strings.TrimPrefix(id, "vsphere://")] = n
		}
		byName[n.Name] = n
		lower := strings.ToLower(n.Name)
		byFold[lower] = append(byFold[lower], n)
		if short, _, fqdn := strings.Cut(lower, "."); fqdn {
			byShort[short] = append(byShort[short], n)
		}
	}
	only := func(ns []*corev1.Node) *corev1.Node {
		if len(ns) == 1 {
			return ns[0]
		}
		return nil
	}
	out := map[string]*corev1.Node{}
	owners := map[string]int{}
	for _, w := range workers {
		vm, ok := vms[w.VM]
		if !ok || w.NoNode {
			continue
		}
		var n *corev1.Node
		switch {
		case w.Node != "":
			n = byName[w.Node]
		case vm.UUID != "" && byProvider[strings.ToLower(vm.UUID)] != nil:
			n = byProvider[strings.ToLower(vm.UUID)]
		case byName[vm.Name] != nil:
			n = byName[vm.Name]
		case only(byFold[strings.ToLower(vm.Name)]) != nil:
			n = only(byFold[strings.ToLower(vm.Name)])
		default:
			n = only(byShort[strings.ToLower(vm.Name)])
		}
		if n != nil && out[vm.Name] != n {
			out[vm.Name] = n
			owners[n.Name]++
		}
	}
	for vm, n := range out {
		if owners[n.Name] > 1 {
			delete(out, vm)
		}
	}
	return out
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
