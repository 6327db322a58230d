package plan

import (
	"maps"
	"slices"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Ahead are the power-ons of one host that the parks of other VMs there hold back
// (issue 37: a freed GPU waited for the next pass, its read of vCenter and its status
// write before its power-on was asked). A pass that starts those parks, or follows them
// in flight, plans the power-ons they make due and stores their intents with the parks'
// in its one status write; the controller asks vCenter for them once every park in
// After has ended well, without a pass in between. A park that fails or is not asked
// leaves them not asked, and the next pass plans from what it observes.
type Ahead struct {
	Host string
	// PowerOns are the steps Due would return on the host once the parks have ended:
	// power-ons of one profile, in the placement order.
	PowerOns []Step
	// After are the parks they wait for, by the key they were given under (a VM's name
	// or inventory path), sorted.
	After []string
}

// AfterParks plans the power-ons that parks make due (Ahead): in is the input the
// pass's plan was built from, parks the parks started in the pass or in flight (Suspend
// or PowerOff, by VM name or inventory path), which in.InFlight may name too. It builds
// the plan as if those VMs were parked (the parks ended, vCenter's capacity of their
// hosts left out: the pass's plan checked it with those VMs leaving) and returns, for each
// host with one of the parks, the power-ons due there when nothing but power-ons is due
// before them, by host name. A host where anything else (a drain, a park not in parks,
// a reconfigure, a power-on in flight) still comes first gets none; neither does any
// host when that plan has problems.
func AfterParks(in Input, parks map[string]Action) []Ahead {
	if len(parks) == 0 || in.Inventory == nil {
		return nil
	}
	states := map[int]inventory.PowerState{}
	after := map[string][]string{} // host -> park keys
	inFlight := maps.Clone(in.InFlight)
	for i := range in.Inventory.VMs {
		vm := &in.Inventory.VMs[i]
		key := vm.Name
		act, ok := parks[key]
		if !ok && vm.Path != "" {
			key = vm.Path
			act, ok = parks[key]
		}
		if !ok || (act != Suspend && act != PowerOff) {
			continue
		}
		states[i] = parkedState(act)
		after[vm.Host] = append(after[vm.Host], key)
		delete(inFlight, vm.Name)
		delete(inFlight, vm.Path)
	}
	if len(after) == 0 {
		return nil
	}
	next := in
	next.Inventory = withStates(in.Inventory, states, mapSet(after))
	next.InFlight = inFlight
	p, err := Build(next)
	if err != nil || len(p.Problems) > 0 {
		return nil
	}
	var out []Ahead
	for _, hp := range p.Hosts {
		if len(after[hp.Host]) == 0 {
			continue
		}
		var ons []Step
		for _, s := range hp.due() { // the GPU steps of the host's earliest phase only
			if s.Action == PowerOn {
				ons = append(ons, s)
			}
		}
		if len(ons) > 0 {
			out = append(out, Ahead{Host: hp.Host, PowerOns: ons, After: slices.Sorted(slices.Values(after[hp.Host]))})
		}
	}
	return out
}

func mapSet[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
