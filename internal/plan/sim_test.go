package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// TestRandomTransitions plans and executes transitions on random inventories, step by
// step, the way the controller does: build a plan from the observed state, run what is
// due (sometimes only part of it, as when tasks are still in flight), observe, build again.
// At every step it checks that no GPU holds mixed profiles or more frame buffer than it
// has and that every power-on vSphere is asked for succeeds; at the end, that the pool
// has the layout whenever Check found it feasible, and that VMs with nothing to change
// were never touched.
func TestRandomTransitions(t *testing.T) {
	seeds := uint64(300)
	stats := map[string]int{}
	for seed := uint64(1); seed <= seeds; seed++ {
		r := rand.New(rand.NewPCG(seed, 42))
		spec, w := randomWorld(r)
		// Transitions in a row: each starts where the last ended (or where it was found
		// infeasible, which changes nothing).
		for range 4 {
			target := spec.Layouts[r.IntN(len(spec.Layouts))].Name
			sim := &simulation{t: t, seed: seed, spec: spec, w: w, target: target, r: r}
			sim.run(stats)
		}
	}
	t.Logf("%d seeds: %v", seeds, stats)
	if stats["converged"] < int(seeds) {
		t.Errorf("only %d transitions converged; the random worlds are too often infeasible to test much", stats["converged"])
	}
	if stats["steps"] < 10*int(seeds) {
		t.Errorf("only %d steps executed", stats["steps"])
	}
	// The random worlds must reach the model's corners, or the test shows nothing there.
	for _, corner := range []string{"power-on on another host", "reconfigure to several vGPUs", "mixed-size GPU with several profiles", "held", ReasonHostUnavailable} {
		if stats[corner] == 0 {
			t.Errorf("no transition had %s", corner)
		}
	}
}

// randomWorld makes 1-4 hosts with 1-4 GPUs of 8, 16 or 24 GiB (with boards, of one or
// two boards: randomBoardGPUs), a pool with 2-3 layouts over 1-6 VMs per host, 0-2 VMs
// outside the pool per host, and a current state that vSphere could have produced:
// every running vGPU was placed by inventory.Place.
func randomWorld(r *rand.Rand) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	return randomWorldOf(r, false)
}

// randomWorldOf is randomWorld, with GPUs of NVIDIA boards when boards is set.
func randomWorldOf(r *rand.Rand, boards bool) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	profile := func(gib int64) string { return fmt.Sprintf("grid_t4-%dq", gib) }
	sizes := []int64{2, 4, 8, 12, 16, 24}

	var pool, foreign []*inventory.VM
	for h := range 1 + r.IntN(4) {
		host := inventory.Host{Name: fmt.Sprintf("esx-%02d", h), Policy: inventory.PolicyPerformance, ComputeResource: "domain-c1"}
		if r.IntN(2) == 0 {
			host.Policy = inventory.PolicyConsolidation
		}
		if boards {
			randomBoardGPUs(r, &host)
		}
		for g := range (1 + r.IntN(4)) * map[bool]int{true: 0, false: 1}[boards] {
			host.GPUs = append(host.GPUs, inventory.GPU{PCIID: fmt.Sprintf("0000:%02x:00.0", 0x3b+g*0x20), MemoryMiB: []int64{8, 16, 24}[r.IntN(3)] * 1024,
				Mode: []string{"", inventory.ModeSameSize, inventory.ModeMixedSize}[r.IntN(3)]})
		}
		var largest int64
		for _, g := range host.GPUs {
			largest = max(largest, g.MemoryMiB)
		}
		for _, gib := range sizes {
			if !boards && r.IntN(10) < 6 && (gib*1024 <= largest || r.IntN(10) == 0) {
				p := inventory.Profile{Name: profile(gib), FrameBufferMiB: gib * 1024, SuspendSupported: r.IntN(10) < 9}
				if r.IntN(5) == 0 {
					p.FrameBufferMiB = 0 // not reported: read off the name
				}
				host.Profiles = append(host.Profiles, p)
			}
		}
		if len(host.Profiles) == 0 {
			host.Profiles = append(host.Profiles, inventory.Profile{Name: profile(4), FrameBufferMiB: 4 * 1024, SuspendSupported: true})
		}
		w.inv.Hosts = append(w.inv.Hosts, host)
		for i := range 1 + r.IntN(6) {
			name := fmt.Sprintf("vm-%d-%d", h, i)
			w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: name, Path: "/dc1/vm/pool/" + name, Host: host.Name, PowerState: inventory.PoweredOff})
		}
		for i := range r.IntN(3) {
			name := fmt.Sprintf("other-%d-%d", h, i)
			w.inv.VMs = append(w.inv.VMs, inventory.VM{Name: name, Host: host.Name, PowerState: inventory.PoweredOff})
		}
	}
	for i := range w.inv.VMs {
		if strings.HasPrefix(w.inv.VMs[i].Name, "vm-") {
			pool = append(pool, &w.inv.VMs[i])
		} else {
			foreign = append(foreign, &w.inv.VMs[i])
		}
	}
	offered := func(vm *inventory.VM) string {
		h, _ := w.inv.FindHost(vm.Host)
		return h.Profiles[r.IntN(len(h.Profiles))].Name
	}

	// Note: the random pools may change the profile of suspended VMs, which needs
	// DiscardSuspendedState; TestHeld covers the hold without it.
	spec := &gpupoolv1.GPUPoolProfileSpec{Parking: gpupoolv1.ParkingSuspend, DiscardSuspendedState: true}
	if r.IntN(3) == 0 {
		spec.Parking = gpupoolv1.ParkingPowerOff
	}
	for l := range 2 + r.IntN(2) {
		lay := gpupoolv1.Layout{Name: fmt.Sprintf("l%d", l)}
		// Mostly layouts that fit the hosts' GPUs when nothing else runs; VMs outside the
		// pool and the odd unchecked layout make some infeasible.
		checked := r.IntN(10) > 0
		demand := map[string][]*member{}
		for _, vm := range pool {
			if r.IntN(2) == 0 {
				continue
			}
			wk := gpupoolv1.Worker{VM: vm.Name, Profile: offered(vm)}
			if r.IntN(10) == 0 {
				wk.VGPUs = 2
			}
			if checked {
				h, _ := w.inv.FindHost(vm.Host)
				offer, _ := offerOf(h, wk.Profile)
				ms := append(slices.Clone(demand[h.Name]), &member{vm: vm, offer: offer, count: max(int(wk.VGPUs), 1)})
				if !packable(h, make([]inventory.Occupancy, len(h.GPUs)), demands(ms)) {
					continue
				}
				demand[h.Name] = ms
			}
			if r.IntN(3) == 0 {
				wk.VM = vm.Path
			}
			if r.IntN(40) == 0 {
				wk.Profile = profile(sizes[r.IntN(len(sizes))]) // perhaps not offered
			}
			lay.Workers = append(lay.Workers, wk)
		}
		if len(lay.Workers) == 0 {
			lay.Workers = append(lay.Workers, gpupoolv1.Worker{VM: pool[0].Name, Profile: offered(pool[0])})
		}
		spec.Layouts = append(spec.Layouts, lay)
	}
	spec.DefaultLayout = spec.Layouts[0].Name

	// The current state: mostly some layout, with strays; power-ons in random order,
	// VMs outside the pool among them, each placed or left off as vSphere decides.
	current := spec.Layouts[r.IntN(len(spec.Layouts))]
	inCurrent := map[string]string{}
	for _, wk := range current.Workers {
		vm, _ := w.inv.FindVM(wk.VM)
		inCurrent[vm.Name] = wk.Profile
	}
	all := slices.Clone(pool)
	all = append(all, foreign...)
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, vm := range all {
		want, inLayout := inCurrent[vm.Name]
		vm.Profile = offered(vm)
		if inLayout && r.IntN(10) < 8 {
			vm.Profile = want
		}
		if !slices.Contains(foreign, vm) && r.IntN(10) == 0 {
			vm.Profile = ""
		}
		if vm.Profile != "" && r.IntN(10) == 0 {
			vm.VGPUs = 2
		}
		on := r.IntN(10) < 7
		if inLayout {
			on = r.IntN(10) < 9
		}
		if on && vm.Profile != "" {
			// A VM whose vGPU does not fit, or whose profile its host does not offer,
			// stays off, as vSphere would refuse to power it on.
			_ = powerOn(w.inv, vm.Name)
		}
		if vm.PowerState != inventory.PoweredOn && r.IntN(2) == 0 {
			vm.PowerState = inventory.Suspended
		}
	}
	// Some hosts are not available: in maintenance mode (no VM runs there), entering
	// it, or, rarely, disconnected.
	for i := range w.inv.Hosts {
		h := &w.inv.Hosts[i]
		running := slices.ContainsFunc(h.GPUs, func(g inventory.GPU) bool { return len(g.VMs) > 0 })
		switch k := r.IntN(40); {
		case k < 1 && !running:
			h.InMaintenance = true
		case k < 2:
			h.EnteringMaintenance = true
		case k == 2:
			h.ConnectionState = inventory.Disconnected
		}
	}
	for _, vm := range pool {
		n := &node{labels: spec.Layouts[r.IntN(len(spec.Layouts))].Name}
		if vm.PowerState == inventory.PoweredOn {
			n.exists, n.ready, n.cordoned = r.IntN(10) > 0, r.IntN(10) > 0, r.IntN(10) == 0
			if r.IntN(10) < 8 {
				n.labels = current.Name
			}
		} else {
			n.exists, n.cordoned = r.IntN(10) < 8, r.IntN(10) < 7
		}
		n.drained = n.cordoned && r.IntN(2) == 0
		if n.exists {
			w.nodes[vm.Name] = n
		} else if vm.PowerState == inventory.PoweredOn && r.IntN(3) > 0 {
			// Most running VMs without a node say they are no workers; the others
			// must be held rather than parked undrained.
			if w.noNode == nil {
				w.noNode = map[string]bool{}
			}
			w.noNode[vm.Name] = true
			for i := range spec.Layouts {
				for j := range spec.Layouts[i].Workers {
					if spec.Layouts[i].Workers[j].VM == vm.Name {
						spec.Layouts[i].Workers[j].NoNode = true
					}
				}
			}
		}
	}
	return spec, w
}

// simulation is one transition of a random world.
type simulation struct {
	t      *testing.T
	seed   uint64
	spec   *gpupoolv1.GPUPoolProfileSpec
	w      *world
	target string
	r      *rand.Rand
	log    []string
}

func (s *simulation) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d, transition to %s: %s\nbatches so far:\n  %s", s.seed, s.target, fmt.Sprintf(format, args...), strings.Join(s.log, "\n  "))
}

// run executes the transition; it reports whether Check found it feasible.
func (s *simulation) run(stats map[string]int) bool {
	s.t.Helper()
	inv := s.w.inv
	want := s.wanted()
	pool := s.poolVMs()
	// untouched VMs have nothing to change: never a step. stays VMs run with their profile:
	// their node may be fixed, the VM itself is never stopped or started.
	untouched, stays := map[string]bool{}, map[string]bool{}
	nodes := s.w.nodeStates(s.target)
	for name, profile := range want {
		vm, _ := inv.FindVM(name)
		if vm.Profile == profile && vm.VGPUCount() == s.wantedCount(name) && vm.PowerState == inventory.PoweredOn {
			stays[name] = true
			if n := nodes[name]; n.Exists && n.Ready && n.Labelled && !n.Cordoned {
				untouched[name] = true
			}
		}
	}
	problems := Check(s.spec, s.target, inv)
	maxParallel := 1 + s.r.IntN(3)
	partial := s.r.IntN(3) == 0
	limit := 10*len(inv.VMs) + 20

	for batch := 0; ; batch++ {
		if batch > limit {
			s.fatalf("no convergence after %d batches", limit)
		}
		in := Input{Spec: s.spec, Layout: s.target, Inventory: inv, Nodes: s.w.nodeStates(s.target)}
		p, err := Build(in)
		if err != nil {
			s.fatalf("Build: %v", err)
		}
		if again, _ := Build(in); !reflect.DeepEqual(p, again) {
			s.fatalf("Build is not deterministic")
		}
		// Note: Check knows no nodes, so it holds nothing; a held VM keeps its GPU,
		// which Build counts.
		if batch == 0 && len(p.Held) == 0 && !slices.Equal(p.Problems, problems) {
			s.fatalf("Build's problems %v differ from Check's %v", p.Problems, problems)
		}
		if len(p.Problems) > 0 {
			if batch > 0 {
				s.fatalf("feasible at first, now:\n%s", problemLines(p.Problems))
			}
			stats["infeasible"]++
			for _, pr := range p.Problems {
				if stats[pr.Reason] < 3 {
					s.t.Logf("seed %d: %s: %s", s.seed, pr.Reason, pr.Message)
				}
				stats[pr.Reason]++
				if strings.Contains(pr.Message, "no power-on order") {
					stats["no power-on order"]++
				}
			}
			return false
		}
		s.checkPlan(p, pool, untouched, stays)
		if p.Done() {
			s.checkConverged(want, pool)
			stats["converged"]++
			for _, h := range inv.Hosts {
				for _, g := range h.GPUs {
					profiles := map[string]bool{}
					for _, name := range g.VMs {
						vm, _ := inv.FindVM(name)
						profiles[vm.Profile] = true
					}
					if len(profiles) > 1 {
						stats["mixed-size GPU with several profiles"]++
					}
				}
			}
			return true
		}

		due := p.Due(maxParallel)
		if len(due) == 0 && len(p.Held) > 0 {
			// What could be done is done; the held VMs wait for a person.
			stats["held"]++
			return false
		}
		s.checkDue(p, due, maxParallel)
		if partial && len(due) > 1 {
			// Some tasks are still running: only part of what was due has happened.
			n := 1 + s.r.IntN(len(due))
			s.r.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
			due = due[:n]
		}
		s.log = append(s.log, strings.Join(stepLines(due), ", "))
		for _, st := range due {
			if vm, _ := s.w.inv.FindVM(st.VM); st.Action == PowerOn && vm.Host != st.Host {
				stats["power-on on another host"]++
			}
			if st.Action == Reconfigure && st.VGPUs > 1 {
				stats["reconfigure to several vGPUs"]++
			}
			if err := s.w.apply(st, s.target); err != nil {
				s.fatalf("%v\nplan:\n%s", err, p)
			}
			stats["steps"]++
			s.checkGPUs()
		}
	}
}

// wantedCount is how many vGPUs the target layout gives the VM.
func (s *simulation) wantedCount(name string) int {
	for _, l := range s.spec.Layouts {
		for _, wk := range l.Workers {
			if vm, ok := s.w.inv.FindVM(wk.VM); ok && l.Name == s.target && vm.Name == name {
				return max(int(wk.VGPUs), 1)
			}
		}
	}
	return 1
}

// wanted returns the target layout's VMs by name, with their profiles.
func (s *simulation) wanted() map[string]string {
	want := map[string]string{}
	for _, l := range s.spec.Layouts {
		if l.Name != s.target {
			continue
		}
		for _, wk := range l.Workers {
			if vm, ok := s.w.inv.FindVM(wk.VM); ok {
				want[vm.Name] = wk.Profile
			}
		}
	}
	return want
}

func (s *simulation) poolVMs() map[string]bool {
	pool := map[string]bool{}
	for _, l := range s.spec.Layouts {
		for _, wk := range l.Workers {
			if vm, ok := s.w.inv.FindVM(wk.VM); ok {
				pool[vm.Name] = true
			}
		}
	}
	return pool
}

// checkPlan checks what any plan must hold: steps only for the pool, none for untouched
// VMs, phases in order, and power-ons that fit the GPUs as they are now.
func (s *simulation) checkPlan(p *Plan, pool, untouched, stays map[string]bool) {
	s.t.Helper()
	for _, hp := range p.Hosts {
		h, ok := s.w.inv.FindHost(hp.Host)
		if !ok {
			s.fatalf("plan for unknown host %s", hp.Host)
		}
		occ := occupancyOf(s.w.inv, h)
		for _, steps := range [][]Step{hp.Steps, hp.Later} {
			for i, st := range steps {
				switch {
				case !pool[st.VM]:
					s.fatalf("step for %s, which is not in the pool: %+v", st.VM, st)
				case untouched[st.VM]:
					s.fatalf("step for %s, which has nothing to change: %+v", st.VM, st)
				case stays[st.VM] && phaseOf(st.Action) <= phaseOf(PowerOn):
					s.fatalf("%s of %s, which runs with its profile", st.Action, st.VM)
				case st.Host != hp.Host:
					s.fatalf("step on host %s listed under %s", st.Host, hp.Host)
				case i > 0 && phaseOf(st.Action) < phaseOf(steps[i-1].Action):
					s.fatalf("steps out of phase order on %s:\n%s", hp.Host, p)
				}
			}
		}
		for _, st := range hp.Steps {
			if st.Action != PowerOn {
				continue
			}
			offer, _ := offerOf(h, st.Profile)
			for range s.wantedCount(st.VM) {
				gpu := inventory.Place(h, occ, offer)
				if gpu < 0 {
					s.fatalf("plan powers on %s, which does not fit the GPUs as they are:\n%s", st.VM, p)
				}
				occ[gpu] = occ[gpu].Add(offer, h.GPUs[gpu])
			}
		}
	}
}

func (s *simulation) checkDue(p *Plan, due []Step, maxParallel int) {
	s.t.Helper()
	if len(due) == 0 {
		s.fatalf("nothing due, but the plan is not done:\n%s", p)
	}
	hosts := map[string][]Step{}
	for _, st := range due {
		hosts[st.Host] = append(hosts[st.Host], st)
	}
	if len(hosts) > maxParallel {
		s.fatalf("due on %d hosts, maxParallel %d", len(hosts), maxParallel)
	}
	for host, steps := range hosts {
		powerOns := map[string]int{}
		gpuPhase := -1
		workers := map[string]bool{}
		for _, st := range steps {
			// GPU steps come from one phase per host; node steps are per worker, one each,
			// and never for a worker that has a GPU step due.
			if ph := phaseOf(st.Action); ph <= lastGPUPhase {
				if gpuPhase >= 0 && ph != gpuPhase {
					s.fatalf("due on %s: GPU steps of two phases: %v", host, stepLines(steps))
				}
				gpuPhase = ph
			}
			if workers[st.VM] {
				s.fatalf("due on %s: two steps of worker %s: %v", host, st.VM, stepLines(steps))
			}
			workers[st.VM] = true
			if st.Action == PowerOn {
				powerOns[st.Profile]++
			}
		}
		if len(powerOns) > 1 {
			s.fatalf("due on %s: power-ons of %d profiles at once: %v", host, len(powerOns), powerOns)
		}
	}
}

// checkGPUs checks the rules vSphere enforces, and that the inventory is consistent:
// each GPU's vGPUs fit it under its mode (one profile in same-size mode, placement IDs
// in mixed-size mode), and each running VM is listed on the GPUs it says.
func (s *simulation) checkGPUs() {
	s.t.Helper()
	inv := s.w.inv
	seen := map[string]int{}
	for _, h := range inv.Hosts {
		occ := occupancyOf(inv, &h)
		for i, g := range h.GPUs {
			var used int64
			sizes := map[int64]int{}
			for _, name := range g.VMs {
				vm, _ := inv.FindVM(name)
				first, _ := inv.FindVM(g.VMs[0])
				if !g.Mixed() && vm.Profile != first.Profile {
					s.fatalf("GPU %s of %s runs %s and %s in same-size mode", g.PCIID, h.Name, first.Profile, vm.Profile)
				}
				if vm.PowerState != inventory.PoweredOn || !slices.Contains(vm.GPUs, g.PCIID) || vm.Host != h.Name {
					s.fatalf("GPU %s of %s lists %s, which is %s on GPUs %q of %s", g.PCIID, h.Name, name, vm.PowerState, vm.GPUs, vm.Host)
				}
				fb, _ := inventory.ProfileFrameBufferMiB(vm.Profile)
				used += fb * int64(max(vm.VGPUCount()/len(vm.GPUs), 1))
				sizes[fb] += max(vm.VGPUCount()/len(vm.GPUs), 1)
				seen[name]++
				gb, gok, _ := inventory.BoardOf(g)
				if pb, pok := inventory.ProfileBoard(vm.Profile); gok && pok && gb.Token != pb.Token {
					s.fatalf("GPU %s of %s, an %s, runs %s of %s", g.PCIID, h.Name, gb.Name, vm.Profile, pb.Name)
				}
			}
			for fb, n := range sizes {
				if most, ok := inventory.MixedSizeMax(g, fb); g.Mixed() && ok && n > most {
					s.fatalf("GPU %s of %s runs %d vGPUs of %d MiB in mixed-size mode, NVIDIA allows %d", g.PCIID, h.Name, n, fb, most)
				}
			}
			if used > g.MemoryMiB || occ[i].UsedMiB > g.MemoryMiB {
				s.fatalf("GPU %s of %s holds %d MiB of vGPUs, has %d MiB", g.PCIID, h.Name, used, g.MemoryMiB)
			}
			if g.Mixed() && occ[i].Count > 0 && occ[i].Family == "unknown" {
				s.fatalf("GPU %s of %s runs vGPUs off the placement grid: %v", g.PCIID, h.Name, g.VMs)
			}
		}
	}
	for _, vm := range inv.VMs {
		if on := vm.PowerState == inventory.PoweredOn && vm.Profile != ""; (on && seen[vm.Name] != len(vm.GPUs)) || (on && len(vm.GPUs) == 0) || (!on && seen[vm.Name] != 0) {
			s.fatalf("VM %s is %s with %q and on %d GPUs", vm.Name, vm.PowerState, vm.Profile, seen[vm.Name])
		}
	}
}

// noNode tells whether the spec says the VM is no Kubernetes worker.
func (s *simulation) noNode(name string) bool {
	for _, l := range s.spec.Layouts {
		for _, w := range l.Workers {
			if w.VM == name && w.NoNode {
				return true
			}
		}
	}
	return false
}

func (s *simulation) checkConverged(want map[string]string, pool map[string]bool) {
	s.t.Helper()
	for name := range pool {
		vm, _ := s.w.inv.FindVM(name)
		profile, in := want[name]
		if !in {
			if vm.PowerState == inventory.PoweredOn {
				s.fatalf("done, but %s is not in the layout and runs", name)
			}
			continue
		}
		n := s.w.nodes[name]
		if s.noNode(name) {
			n = &node{exists: true, ready: true, labels: s.target} // no node to check
		}
		if vm.PowerState != inventory.PoweredOn || vm.Profile != profile || vm.VGPUCount() != s.wantedCount(name) || n == nil || !n.exists || !n.ready || n.cordoned || n.labels != s.target {
			s.fatalf("done, but %s is %s with %s (want %s), node %+v", name, vm.PowerState, vm.Profile, profile, n)
		}
	}
}
