package plan

import (
	"maps"
	"slices"
)

// AfterDrain are the suspends of one host that drains under way hold back (issue 37: a
// node whose pods were gone waited for the next pass, its reads and its status write,
// before its VM's suspend was asked). A pass that hands out a drain's first eviction
// round, or settles one with only terminating pods left, plans the suspends the end of
// those drains makes due on their host, stores their intents in its one status write,
// and the controller asks vCenter for each once the pods of every node in After are
// gone, without a pass in between. A drain that does not end in time leaves them not
// asked, and the next pass plans from what it observes.
type AfterDrain struct {
	Host string
	// Suspends are the Suspend steps Due would return on the host once the drains have
	// ended, in the plan's order. A power-off is left to a pass: it asks the guest first.
	Suspends []Step
	// After are the VMs whose drains they wait for, by the key they were given under (a
	// VM's name or inventory path), sorted.
	After []string
}

// AfterDrains plans the suspends that the end of drains makes due (AfterDrain): in is
// the input the pass's plan was built from (with the pass's own task starts in
// InFlight), drains the VMs (by name or inventory path) whose nodes are to be taken as
// drained. It builds the plan as if those nodes were drained and returns, for each host
// with one of them, the Suspend steps due there then. A host where anything else still
// comes first (the drain of another node, a task in flight that keeps the phase) gets
// none; neither does any host when that plan has problems.
func AfterDrains(in Input, drains []string) []AfterDrain {
	if len(drains) == 0 || in.Inventory == nil {
		return nil
	}
	want := make(map[string]bool, len(drains))
	for _, d := range drains {
		want[d] = true
	}
	nodes := maps.Clone(in.Nodes)
	after := map[string][]string{} // host -> drain keys
	for i := range in.Inventory.VMs {
		vm := &in.Inventory.VMs[i]
		key := vm.Name
		if !want[key] {
			if key = vm.Path; key == "" || !want[key] {
				continue
			}
		}
		nodeKey := vm.Name
		ns, ok := nodes[nodeKey]
		if !ok && vm.Path != "" {
			nodeKey = vm.Path
			ns, ok = nodes[nodeKey]
		}
		if !ok || !ns.Exists {
			continue // no node to drain: nothing to wait for
		}
		ns.Drained = true
		nodes[nodeKey] = ns
		after[vm.Host] = append(after[vm.Host], key)
	}
	if len(after) == 0 {
		return nil
	}
	next := in
	next.Nodes = nodes
	p, err := Build(next)
	if err != nil || len(p.Problems) > 0 {
		return nil
	}
	var out []AfterDrain
	for _, hp := range p.Hosts {
		if len(after[hp.Host]) == 0 {
			continue
		}
		var suspends []Step
		for _, s := range hp.due() {
			if s.Action == Suspend {
				suspends = append(suspends, s)
			}
		}
		if len(suspends) > 0 {
			out = append(out, AfterDrain{Host: hp.Host, Suspends: suspends, After: slices.Sorted(slices.Values(after[hp.Host]))})
		}
	}
	return out
}
