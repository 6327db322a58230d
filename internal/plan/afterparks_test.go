package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestRandomPowerOnsAheadOfParks runs random worlds as TestRandomFlipsWithTasksInFlight
// does (the wanted layout flips at random, tasks stay in flight for a few passes), and
// each pass also plans the power-ons its parks and those in flight make due
// (AfterParks). Such a power-on counts as in flight from the pass that plans it, as
// its stored intent does, and is asked once every park it waits for has ended, even when
// the wanted layout flipped meanwhile (the controller cancels it on an abort, but need
// not). Every task must succeed when it ends: no power-on ahead of parks into GPUs those
// parks did not free, or that something started meanwhile took. Once the flips stop,
// the pool reaches the last wanted layout whenever it is feasible.
func TestRandomPowerOnsAheadOfParks(t *testing.T) {
	stats := map[string]int{}
	for seed := uint64(1); seed <= 2000; seed++ {
		r := rand.New(rand.NewPCG(seed, 3737))
		spec, w := randomWorld(r)
		pick := func() string { return spec.Layouts[r.IntN(len(spec.Layouts))].Name }
		sim := &simulation{t: t, seed: seed, spec: spec, w: w, target: pick(), r: r}
		type task struct {
			step   Step
			layout string
			// after are the parks a power-on ahead waits for; it is asked once all ended.
			after []*task
			ended bool
		}
		inFlight := map[string]*task{}
		held := false
		end := func(vm string) {
			t.Helper()
			tk := inFlight[vm]
			delete(inFlight, vm)
			tk.ended = true
			if err := w.apply(tk.step, tk.layout); err != nil {
				sim.fatalf("a task that was in flight failed when it ended: %v", err)
			}
			sim.log = append(sim.log, "ended "+tk.step.VM+" "+string(tk.step.Action))
			stats["tasks ended"]++
		}
		waiting := func(tk *task) bool {
			return slices.ContainsFunc(tk.after, func(p *task) bool { return !p.ended })
		}
		pass := func(flips bool) (done bool) {
			t.Helper()
			for _, vm := range slices.Sorted(mapKeys(inFlight)) {
				if tk := inFlight[vm]; !waiting(tk) && r.IntN(2) == 0 {
					if tk.after != nil {
						stats["asked ahead and ended"]++
					}
					end(vm)
				}
			}
			if flips && r.IntN(3) == 0 {
				sim.target = pick()
				stats["flips"]++
			}
			actions := map[string]Action{}
			for vm, tk := range inFlight {
				actions[vm] = tk.step.Action
			}
			in := Input{Spec: spec, Layout: sim.target, Inventory: w.inv, Nodes: w.nodeStates(sim.target), InFlight: actions}
			p, err := Build(in)
			if err != nil {
				sim.fatalf("Build: %v", err)
			}
			if len(p.Problems) > 0 {
				stats["infeasible passes"]++
				return len(inFlight) == 0
			}
			if p.Done() && len(inFlight) == 0 {
				return true
			}
			due := p.Due(1 + r.IntN(3))
			if len(due) == 0 && len(inFlight) == 0 {
				held = len(p.Held) > 0
				return true
			}
			parks := map[string]Action{}
			parkTasks := map[string]*task{}
			for vm, tk := range inFlight {
				if tk.step.Action == Suspend || tk.step.Action == PowerOff {
					parks[vm], parkTasks[vm] = tk.step.Action, tk
				}
			}
			var started []string
			for _, st := range due {
				if _, busy := inFlight[st.VM]; busy {
					continue
				}
				started = append(started, st.VM+" "+string(st.Action))
				if vSphereTask(st.Action) {
					tk := &task{step: st, layout: sim.target}
					inFlight[st.VM] = tk
					if st.Action == Suspend || st.Action == PowerOff {
						parks[st.VM], parkTasks[st.VM] = st.Action, tk
					}
					continue
				}
				if err := w.apply(st, sim.target); err != nil {
					sim.fatalf("%v (in flight: %v)\nplan:\n%s", err, actions, p)
				}
			}
			// As the executor does: the pass's own starts are in flight for the plan after
			// the parks.
			aheadIn := in
			aheadIn.InFlight = map[string]Action{}
			for vm, tk := range inFlight {
				aheadIn.InFlight[vm] = tk.step.Action
			}
			for _, a := range AfterParks(aheadIn, parks) {
				var after []*task
				for _, vm := range a.After {
					after = append(after, parkTasks[vm])
				}
				for _, st := range a.PowerOns {
					if _, busy := inFlight[st.VM]; busy {
						break // the rest wait for it: placement order
					}
					if st.Host != a.Host {
						sim.fatalf("power-on ahead of %s on host %s, listed under host %s", st.VM, st.Host, a.Host)
					}
					inFlight[st.VM] = &task{step: st, layout: sim.target, after: after}
					started = append(started, st.VM+" PowerOn after "+strings.Join(a.After, " "))
					stats["power-ons ahead"]++
				}
			}
			sim.log = append(sim.log, "to "+sim.target+": "+strings.Join(started, ", "))
			sim.checkGPUs()
			return false
		}
		sim.flipThenConverge(pass, &held, stats)
	}
	t.Logf("%v", stats)
	for _, k := range []string{"flips", "power-ons ahead", "asked ahead and ended", "converged"} {
		if stats[k] < 100 {
			t.Errorf("%s: only %d; the random runs reach too little", k, stats[k])
		}
	}
}

// TestAfterParks: the day -> night switch of the sample. With the day VMs drained and
// their suspends starting, night's power-on is planned ahead of them, after all four;
// with one day VM not yet parked (its node still drains) nothing is.
func TestAfterParks(t *testing.T) {
	spec, w := sample(t, "day")
	for i := 1; i <= 4; i++ {
		if err := w.apply(Step{VM: fmt.Sprintf("gpu-day-%d", i), Action: Drain}, "night"); err != nil {
			t.Fatal(err)
		}
	}
	in := Input{Spec: spec, Layout: "night", Inventory: w.inv, Nodes: w.nodeStates("night")}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(p.Due(1), func(s Step) bool { return s.Action == PowerOn }) {
		t.Fatalf("a power-on due before the parks:\n%s", p)
	}
	parks := map[string]Action{}
	for i := 1; i <= 4; i++ {
		parks[fmt.Sprintf("gpu-day-%d", i)] = Suspend
	}
	got := AfterParks(in, parks)
	if len(got) != 1 || len(got[0].PowerOns) != 1 || got[0].PowerOns[0].VM != "gpu-night-1" ||
		fmt.Sprint(got[0].After) != "[gpu-day-1 gpu-day-2 gpu-day-3 gpu-day-4]" {
		t.Fatalf("AfterParks = %+v, want night-1's power-on after the four day VMs", got)
	}
	delete(parks, "gpu-day-4")
	if got := AfterParks(in, parks); len(got) != 0 {
		t.Errorf("AfterParks with day-4 still running = %+v, want none", got)
	}
	in.InFlight = map[string]Action{"gpu-day-4": Suspend} // in flight without a task to follow
	if got := AfterParks(in, parks); len(got) != 0 {
		t.Errorf("AfterParks with day-4's park in flight but not given = %+v, want none", got)
	}
	if got := AfterParks(in, nil); got != nil {
		t.Errorf("AfterParks with no parks = %+v", got)
	}
}
