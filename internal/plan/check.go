package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// Problem is a reason the wanted layout cannot be reached from the observed state. The
// controller reports it unchanged as the Stalled condition's reason and message.
type Problem struct {
	Reason  string
	Message string
	// VM is the VM the problem holds back, when it concerns only that VM (Plan.Held).
	VM string
}

// Problem reasons.
const (
	// ReasonUnknownLayout: the layout is not one of spec.layouts.
	ReasonUnknownLayout = "UnknownLayout"
	// ReasonDuplicateVM: the layout names one VM twice (by name and by path, say).
	ReasonDuplicateVM = "DuplicateVM"
	// ReasonVMNotFound: a VM of the layout is not in the inventory.
	ReasonVMNotFound = "VMNotFound"
	// ReasonHostNotFound: a VM that must be acted on sits on a host the inventory lacks.
	ReasonHostNotFound = "HostNotFound"
	// ReasonProfileNotOffered: a VM's host does not offer the profile the layout gives it.
	ReasonProfileNotOffered = "ProfileNotOffered"
	// ReasonInsufficientGPU: a host's GPUs cannot run the layout's vGPUs next to what
	// stays on them, or vSphere's placement policy would not let them.
	ReasonInsufficientGPU = "InsufficientGPU"
	// ReasonSuspendNotSupported: parking is Suspend but a VM to be parked runs a profile
	// its host cannot suspend.
	ReasonSuspendNotSupported = "SuspendNotSupported"
	// ReasonAmbiguousVM: a layout names a VM by a name that several VMs of the datacenter
	// carry (in different folders); gpupool never acts on the first match.
	ReasonAmbiguousVM = "AmbiguousVM"
	// ReasonNodeNotFound: a running VM must be parked or reconfigured but its node was
	// not found, so it cannot be drained; it is never parked under its pods.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonAmbiguousNode: the controller cannot tell which node is a VM's (two nodes
	// carry the identity it matches nodes by, or two VMs match one node); it holds the
	// VM (Input.Held) rather than drain one of them at a guess.
	ReasonAmbiguousNode = "AmbiguousNode"
	// ReasonSuspendedStateAtRisk: a suspended VM's profile must change, which powers it
	// off and discards its memory state; spec.discardSuspendedState allows that.
	ReasonSuspendedStateAtRisk = "SuspendedStateAtRisk"
	// ReasonHostUnavailable: a VM to act on is on a host in maintenance mode, entering
	// it, disconnected or not responding. As a Problem (the pool stalls) the layout
	// cannot be made without the host; as a held VM (Plan.Held) the VM is left alone
	// until the host is back, while the other hosts go on. See unavailable.go.
	ReasonHostUnavailable = "HostUnavailable"
)

// Check tells why layout cannot be reached from the observed inventory; nil means it
// can.
//
//   - Every VM of the layout exists (by name or inventory path, as inventory.FindVM finds
//     it), once, on a known host that offers the VM's profile.
//   - Per host, the vGPUs to start fit the GPUs next to the vGPUs that keep running: the
//     pool's VMs that stay, and every VM outside the pool (the pool is every VM named in
//     any layout; only its VMs are parked or reconfigured, and they free their GPU).
//   - And vSphere's placement accepts them in the order Build powers them on.
//   - With parking Suspend, every VM that will be suspended runs a profile its host can
//     suspend.
//
// spec and inv must not be nil.
func Check(spec *gpupoolv1.GPUPoolProfileSpec, layout string, inv *inventory.Inventory) []Problem {
	return analyse(spec, layout, inv, nil, nil).problems
}

// fate is what the wanted layout means for one VM of the pool.
type fate int

const (
	// stays: in the layout and running with its profile. Never parked or powered on.
	stays fate = iota
	// arrives: in the layout with its profile, but powered off or suspended.
	arrives
	// reprofiles: in the layout with another profile (or no vGPU yet).
	reprofiles
	// leaves: not in the layout and running; it is parked.
	leaves
	// parked: not in the layout and not running; left as it is.
	parked
)

// member is one VM of the pool and what the wanted layout means for it.
type member struct {
	vm   *inventory.VM
	fate fate
	// want is the profile the layout gives the VM, "" if it is not in the layout.
	want string
	// count is how many vGPUs of want the layout gives the VM (workers[].vgpus).
	count int
	// target is the host the VM is to be powered on on when its own host is not
	// available (see unavailable.go); nil for its own host.
	target *inventory.Host
	// offer is the host's offer of want, with the frame buffer filled in.
	offer inventory.Profile
	// blocked: a problem was found for this VM, so it gets no steps and no capacity.
	blocked bool
	// held: the VM must not be acted on now (Plan.Held); it keeps running as it is.
	held bool
	// away: the VM's host is unavailable and the VM stays there as it is: its vGPUs
	// keep their GPUs and it gets no vSphere step.
	away bool
}

// hostAnalysis is one host that the transition touches.
type hostAnalysis struct {
	host    *inventory.Host
	members []*member
	// current is what runs on each GPU now; freed is what keeps running once the pool's
	// leaving and reprofiled VMs are down. Both are indexed like host.GPUs.
	current, freed []inventory.Occupancy
	// keepers are the VMs running on each GPU that keep running.
	keepers [][]string
	// order is the power-on order found on freed.
	order []*member
	// splits are the states under every split consistent with vSphere's report
	// (splits.go); current, freed and keepers are the first's.
	splits []hostState
}

// analysis is what Check finds and Build plans from.
type analysis struct {
	spec   *gpupoolv1.GPUPoolProfileSpec
	layout *gpupoolv1.Layout
	inv    *inventory.Inventory
	vms    vmIndex
	// hostIndex finds hosts by name like inventory.FindHost, in constant time.
	hostIndex map[string]*inventory.Host
	// starting are the hosts with a power-on in flight (Input.InFlight): no other
	// power-on is due on them.
	starting map[string]bool
	// pool is every VM that any layout names.
	pool map[*inventory.VM]bool
	// members are the pool's VMs, by name.
	members []*member
	// byHost and hosts are the hosts of members that are not parked; hosts is sorted
	// by name.
	byHost   map[string]*hostAnalysis
	hosts    []*hostAnalysis
	problems []Problem
	// noNode are the VMs that workers[].noNode says are no Kubernetes workers.
	noNode map[*inventory.VM]bool
	// held are the VMs planHost holds back (see Plan.Held).
	held []Problem
	// given are the VMs the controller holds (Input.Held), by VM name.
	given map[string]Problem
}

// analyse finds what the layout means for every VM of the pool. With nodes (Build), it
// also holds back the VMs that must not be acted on (see Plan.Held), given among them.
func analyse(spec *gpupoolv1.GPUPoolProfileSpec, layoutName string, inv *inventory.Inventory, nodes map[string]NodeState, given []Problem) *analysis {
	a := &analysis{spec: spec, inv: inv, vms: newVMIndex(inv), hostIndex: map[string]*inventory.Host{},
		pool: map[*inventory.VM]bool{}, byHost: map[string]*hostAnalysis{}, noNode: map[*inventory.VM]bool{},
		given: make(map[string]Problem, len(given))}
	for _, g := range given {
		if _, seen := a.given[g.VM]; !seen {
			a.given[g.VM] = g
		}
	}
	for i := range inv.Hosts {
		if _, taken := a.hostIndex[inv.Hosts[i].Name]; !taken {
			a.hostIndex[inv.Hosts[i].Name] = &inv.Hosts[i]
		}
	}
	for i := range spec.Layouts {
		if spec.Layouts[i].Name == layoutName {
			a.layout = &spec.Layouts[i]
		}
	}
	if a.layout == nil {
		names := make([]string, len(spec.Layouts))
		for i, l := range spec.Layouts {
			names[i] = l.Name
		}
		a.problem(ReasonUnknownLayout, "layout %q is not one of spec.layouts (%s)", layoutName, strings.Join(names, ", "))
		return a
	}

	// The pool is every VM any layout names; VMs of other layouts that do not exist
	// cannot be running, so they do not matter here. A name several VMs carry stops
	// the plan: acting on one of them could park somebody else's VM.
	ambiguous := map[string]bool{}
	named := make(map[string]int, len(inv.VMs))
	for i := range inv.VMs {
		named[inv.VMs[i].Name]++
	}
	for i := range spec.Layouts {
		for _, w := range poolWorkersOf(&spec.Layouts[i]) {
			// Note: inventory.Ambiguous scans every VM; only a name that several VMs
			// carry needs it.
			if paths := ambiguousPaths(inv, named, w.VM); len(paths) > 1 && !ambiguous[w.VM] {
				ambiguous[w.VM] = true
				a.problem(ReasonAmbiguousVM, "VM name %s matches %d VMs of the datacenter (%s); name the VM by its inventory path in spec.layouts[].workers[].vm",
					w.VM, len(paths), strings.Join(paths, ", "))
			}
			if vm, ok := a.vms[w.VM]; ok {
				a.pool[vm] = true
				if w.NoNode {
					a.noNode[vm] = true
				}
			}
		}
	}
	if len(a.problems) > 0 {
		return a
	}
	a.classify(a.resolveLayout())
	if nodes != nil {
		for _, m := range a.members {
			m.held = a.hold(m, a.nodeOf(nodes, m.vm))
		}
	}
	a.checkSuspend()
	a.avoidUnavailable()
	for _, ha := range a.byHost {
		if len(ha.members) > 0 {
			a.hosts = append(a.hosts, ha)
		}
	}
	slices.SortFunc(a.hosts, func(x, y *hostAnalysis) int { return cmp.Compare(x.host.Name, y.host.Name) })
	for _, ha := range a.hosts {
		a.checkCapacityWithVCenter(ha)
	}
	return a
}

// resolveLayout finds the layout's VMs and what the layout means for each, in the order
// the spec lists them, so that problems read in that order.
func (a *analysis) resolveLayout() map[*inventory.VM]*member {
	want := map[*inventory.VM]*member{}
	namedAs := map[*inventory.VM]string{}
	for j, w := range a.layout.Workers {
		vm, ok := a.vms[w.VM]
		if !ok {
			a.problem(ReasonVMNotFound, "VM %s of layout %s (%s) is not in the inventory%s: %s", w.VM, a.layout.Name, a.workerField(j), a.datacenter(), a.vmHint(w.VM))
			continue
		}
		if first, dup := namedAs[vm]; dup {
			a.problem(ReasonDuplicateVM, "layout %s names VM %s twice (as %s and %s)", a.layout.Name, vm.Name, first, w.VM)
			want[vm].blocked = true
			continue
		}
		namedAs[vm] = w.VM
		m := &member{vm: vm, want: w.Profile, count: max(int(w.VGPUs), 1)}
		want[vm] = m
		switch {
		case !vm.Is(w.Profile, m.count): // a VM whose devices differ is reconfigured too
			m.fate = reprofiles
		case vm.PowerState == inventory.PoweredOn:
			m.fate = stays
			continue
		default:
			m.fate = arrives
		}
		h, ok := a.findHost(vm.Host)
		if !ok {
			a.problem(ReasonHostNotFound, "VM %s is on host %s, which is not in the inventory", vm.Name, vm.Host)
			m.blocked = true
			continue
		}
		if m.offer, ok = offerOf(h, w.Profile); !ok {
			a.problem(ReasonProfileNotOffered, "VM %s: host %s does not offer vGPU profile %s (it offers %s)", vm.Name, vm.Host, w.Profile, offers(h))
			m.blocked = true
		}
	}
	return want
}

// classify makes a member of every VM of the pool, and files the ones with something to
// do, or something to keep running, under their host.
func (a *analysis) classify(want map[*inventory.VM]*member) {
	for vm := range a.pool {
		m, ok := want[vm]
		if !ok {
			m = &member{vm: vm, fate: parked}
			if vm.PowerState == inventory.PoweredOn {
				m.fate = leaves
			}
		}
		a.members = append(a.members, m)
	}
	slices.SortFunc(a.members, func(x, y *member) int { return cmp.Compare(x.vm.Name, y.vm.Name) })
	for _, m := range a.members {
		if m.fate == parked {
			continue
		}
		ha, ok := a.byHost[m.vm.Host]
		if !ok {
			h, found := a.findHost(m.vm.Host)
			if !found {
				// Note: a VM that stays needs no host, and one that arrives or is
				// reprofiled was reported by resolveLayout; checkSuspend reports one that
				// leaves.
				continue
			}
			ha = &hostAnalysis{host: h}
			a.byHost[h.Name] = ha
		}
		ha.members = append(ha.members, m)
	}
}

// checkSuspend finds the VMs that parking would suspend although their host cannot
// suspend their profile.
func (a *analysis) checkSuspend() {
	if !suspending(a.spec) {
		return
	}
	type hostProfile struct{ host, profile string }
	unsuspendable := map[hostProfile][]string{}
	for _, m := range a.members {
		if m.fate != leaves || m.vm.Profile == "" {
			continue
		}
		h, ok := a.findHost(m.vm.Host)
		if !ok {
			a.problem(ReasonHostNotFound, "VM %s is on host %s, which is not in the inventory, so it cannot be told whether it can be suspended", m.vm.Name, m.vm.Host)
			continue
		}
		if p, ok := h.Profile(m.vm.Profile); !ok || !p.SuspendSupported {
			k := hostProfile{h.Name, m.vm.Profile}
			unsuspendable[k] = append(unsuspendable[k], m.vm.Name)
		}
	}
	keys := make([]hostProfile, 0, len(unsuspendable))
	for k := range unsuspendable {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y hostProfile) int {
		return cmp.Or(cmp.Compare(x.host, y.host), cmp.Compare(x.profile, y.profile))
	})
	for _, k := range keys {
		a.problem(ReasonSuspendNotSupported, "parking is Suspend, but host %s cannot suspend VMs with vGPU profile %s: %s would be parked; set spec.parking to PowerOff",
			k.host, k.profile, vmList(unsuspendable[k]))
	}
}

// ambiguousPaths is inventory.Ambiguous for names that named counts more than once.
func ambiguousPaths(inv *inventory.Inventory, named map[string]int, id string) []string {
	if named[id] < 2 {
		return nil
	}
	return inventory.Ambiguous(inv, id)
}

func (a *analysis) findHost(name string) (*inventory.Host, bool) {
	h, ok := a.hostIndex[name]
	return h, ok
}

// nodeOf is the VM's node as the plan sees it: none for a VM that workers[].noNode says
// is no Kubernetes worker.
func (a *analysis) nodeOf(nodes map[string]NodeState, vm *inventory.VM) NodeState {
	if a.noNode[vm] {
		return NodeState{}
	}
	return nodeOf(nodes, vm)
}

// hold tells whether a member must not be acted on now, and records why. A VM the
// controller holds is held whatever the layout wants of it, but a VM that stays parked:
// nothing is done to that one anyway.
func (a *analysis) hold(m *member, node NodeState) bool {
	vm := m.vm
	switch {
	case a.given[vm.Name].Reason != "" && m.fate != parked:
		a.held = append(a.held, a.given[vm.Name])
		return true
	case (m.fate == leaves || m.fate == reprofiles) && vm.PowerState == inventory.PoweredOn && !node.Exists && !a.noNode[vm]:
		a.held = append(a.held, Problem{Reason: ReasonNodeNotFound, VM: vm.Name, Message: fmt.Sprintf(
			"VM %s runs and must be %s, but no node was found for it (tried spec.providerID vsphere://%s, the node name %s case-insensitively, and the short name of nodes named by FQDN), so it cannot be drained; set its workers[].node, or workers[].noNode: true if it is no Kubernetes worker",
			vm.Name, map[fate]string{leaves: "parked", reprofiles: "reconfigured"}[m.fate], strings.ToLower(vm.UUID), vm.Name)})
		return true
	case m.fate == reprofiles && vm.PowerState == inventory.Suspended && !a.spec.DiscardSuspendedState:
		a.held = append(a.held, Problem{Reason: ReasonSuspendedStateAtRisk, VM: vm.Name, Message: fmt.Sprintf(
			"VM %s is suspended with profile %s and must change to %s: that powers it off and discards its suspended memory state; resume it and let gpupool drain it, or set spec.discardSuspendedState: true",
			vm.Name, vm.Describe(), vgpus(m.count, m.want))})
		return true
	}
	return false
}

func (a *analysis) problem(reason, format string, args ...any) {
	a.problems = append(a.problems, Problem{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// workerField is the spec field that names the layout's j-th worker's VM.
func (a *analysis) workerField(j int) string {
	for i := range a.spec.Layouts {
		if a.spec.Layouts[i].Name == a.layout.Name {
			return fmt.Sprintf("spec.layouts[%d].workers[%d].vm", i, j)
		}
	}
	return fmt.Sprintf("layout %s, workers[%d].vm", a.layout.Name, j)
}

// vmHint says how to fix a VM name the inventory lacks: the closest name it has, if one
// is a typo away, and how to list the VMs.
func (a *analysis) vmHint(name string) string {
	best, bestD := "", 3
	for i := range a.inv.VMs {
		if d := editDistance(name, a.inv.VMs[i].Name, bestD); d < bestD {
			best, bestD = a.inv.VMs[i].Name, d
		}
	}
	list := "govc find / -type m lists the VMs"
	if best != "" {
		return fmt.Sprintf("did you mean %s? (%s)", best, list)
	}
	return "check the name (" + list + ")"
}

// editDistance is the Levenshtein distance of a and b, or limit when it is at least
// limit (names differ in length by more, or the rows pass it).
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

func (a *analysis) datacenter() string {
	if dc := a.spec.VCenter.Datacenter; dc != "" {
		return " of datacenter " + dc
	}
	return ""
}

// suspending tells whether parked VMs are suspended; Suspend is the API's default.
func suspending(spec *gpupoolv1.GPUPoolProfileSpec) bool {
	return spec.Parking == "" || spec.Parking == gpupoolv1.ParkingSuspend
}

// offerOf returns h's offer of the named profile, with the frame buffer read off the
// name when the host did not report it.
func offerOf(h *inventory.Host, name string) (inventory.Profile, bool) {
	p, ok := h.Profile(name)
	if !ok {
		return p, false
	}
	if p.FrameBufferMiB <= 0 {
		fb, err := inventory.ProfileFrameBufferMiB(name)
		if err != nil {
			return p, false
		}
		p.FrameBufferMiB = fb
	}
	return p, true
}

func offers(h *inventory.Host) string {
	if len(h.Profiles) == 0 {
		return "none"
	}
	names := make([]string, len(h.Profiles))
	for i, p := range h.Profiles {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func policy(h *inventory.Host) string {
	if h.Policy == "" {
		return inventory.PolicyPerformance
	}
	return h.Policy
}

// vmIndex finds VMs by name or inventory path with the answers of inventory.FindVM, in
// constant time: a plan looks up every worker of every layout and every vGPU on every
// GPU, which FindVM's linear scan would make quadratic for large pools.
type vmIndex map[string]*inventory.VM

func newVMIndex(inv *inventory.Inventory) vmIndex {
	idx := make(vmIndex, 2*len(inv.VMs))
	names := make(map[string]int, len(inv.VMs))
	for i := range inv.VMs {
		names[inv.VMs[i].Name]++
	}
	// As FindVM: a VM whose path is the key, else the only VM with that name; a name
	// several VMs carry is ambiguous and finds none (analyse reports it).
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if names[vm.Name] == 1 {
			if _, taken := idx[vm.Name]; !taken {
				idx[vm.Name] = vm
			}
		}
	}
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if vm.Path == "" {
			continue
		}
		if prev, taken := idx[vm.Path]; !taken || prev.Path != vm.Path {
			idx[vm.Path] = vm
		}
	}
	return idx
}

func vmList(names []string) string {
	if len(names) == 1 {
		return "VM " + names[0]
	}
	return "VMs " + strings.Join(names, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// gib writes a frame buffer size in GiB, as profile names and GPU data sheets do.
func gib(mib int64) string {
	if mib%1024 == 0 {
		return fmt.Sprintf("%d GiB", mib/1024)
	}
	return fmt.Sprintf("%.1f GiB", float64(mib)/1024)
}
