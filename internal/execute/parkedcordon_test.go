package execute

import (
	"fmt"
	"slices"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// TestCordonCarriesTheParkedMarksOfEmptyNodes: a node with nothing on it to drain, whose
// VM the plan parks after its drain, is cordoned and marked parked in one patch, and its
// suspend is asked with no second write of the node (its Machine protected first); a node
// with pods, or whose pods the watch cannot tell, is cordoned alone and marked just
// before its suspend, as before. Every node is written at most twice, every suspend
// asked once.
func TestCordonCarriesTheParkedMarksOfEmptyNodes(t *testing.T) {
	all := []string{"day-1", "day-2", "day-3", "day-4"}
	cases := []struct {
		name    string
		empty   []string // nodes (by VM) with nothing to drain before the first pass
		never   bool     // the watch cannot tell
		noWatch bool     // no DrainWatch: each suspend waits for a pass
		want    []string // VMs whose cordon carries the parked marks
	}{
		{name: "two empty nodes", empty: []string{"day-1", "day-2"}, want: []string{"day-1", "day-2"}},
		{name: "every node empty", empty: all, want: all},
		{name: "no node empty", want: nil},
		{name: "the watch cannot tell", empty: []string{"day-1"}, never: true, want: nil},
		{name: "no watch", empty: []string{"day-1"}, noWatch: true, want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool, w, in, p := sampleDayToNight(t)
			pool.Status.ActiveLayout = "day"
			log := &orderLog{}
			ln := &loggedNodes{log: log, store: storeOf(w)}
			dr := newGatedDrainer(drain.Result{Done: true}, "node-day-1", "node-day-2", "node-day-3", "node-day-4")
			gates := newDrainGates()
			gates.never = c.never
			for _, vm := range c.empty {
				gates.end("node-" + vm)
				close(dr.gates["node-"+vm])
			}
			ev := NewEvictions(t.Context(), nil)
			defer ev.Cancel("pool")
			s := NewStarts(t.Context(), nil)
			defer s.Cancel("pool")
			e := &Executor{Nodes: ln, Drainer: dr, Events: noEvents{}, VSphere: &chainVC{suspendVC{log: log}}, Evictions: ev, Starts: s, Drains: gates}
			if c.noWatch {
				e.Drains = nil
			}
			out := e.Run(t.Context(), Input{Pool: pool, Now: startsAt, Plan: p, Layout: &pool.Spec.Layouts[1], World: w, Planned: in,
				Budget: NewBudget(4, 16).WithCordons(1024)})
			for _, vm := range all {
				n := w.Nodes[vm]
				parked, want := nodes.HasMeta(n, nodes.ParkedMeta("pool")), slices.Contains(c.want, vm)
				if !n.Spec.Unschedulable || !nodes.CordonedByUs(n) || n.Labels[gpupoolv1.LabelPool] != "pool" {
					t.Errorf("node of %s: unschedulable %v, labels %v, want cordoned by the pool", vm, n.Spec.Unschedulable, n.Labels)
				}
				if parked != want {
					t.Errorf("node of %s: parked marks %v with its cordon, want %v", vm, parked, want)
				}
				if got := slices.Index(log.all(), "patch node-"+vm); got < 0 {
					t.Errorf("node of %s not patched in the pass: %v", vm, log.all())
				}
			}
			if c.never || c.noWatch {
				return // the suspends wait for a pass that sees the drains ended
			}
			if out.Starts.Len() != 5 {
				t.Fatalf("handed out %d starts, want the four suspends and night-1's power-on", out.Starts.Len())
			}
			out.Starts.Hand()
			// The later passes leave the state labels of the nodes still to be written to
			// those writes, and only of those: a node its cordon marked parked gets none.
			pending := s.PendingMarks("pool")
			for _, vm := range all {
				if pending[vm] == slices.Contains(c.want, vm) {
					t.Errorf("%s: pending node write %v, want %v", vm, pending[vm], !slices.Contains(c.want, vm))
				}
			}
			for _, vm := range all {
				if !slices.Contains(c.empty, vm) {
					close(dr.gates["node-"+vm])
					gates.end("node-" + vm)
				}
			}
			s.Wait()
			got := log.all()
			for _, vm := range all {
				patches := 0
				for _, l := range got {
					if l == "patch node-"+vm {
						patches++
					}
				}
				want := map[bool]int{true: 1, false: 2}[slices.Contains(c.want, vm)]
				protect, ask := slices.Index(got, "protect node-"+vm), slices.Index(got, "suspend "+vm)
				last := slices.Index(got, "patch node-"+vm)
				for i, l := range got {
					if l == "patch node-"+vm {
						last = i
					}
				}
				if patches != want || protect < 0 || ask < protect || ask < last || slices.Index(got[ask+1:], "suspend "+vm) >= 0 {
					t.Errorf("%s: %d node patches (want %d), then its Machine protected and one suspend: %v", vm, patches, want, got)
				}
				if a, ended, _ := s.take("pool", vm, vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-"+vm {
					t.Errorf("%s: %+v ended %v, want its task", vm, a, ended)
				}
			}
		})
	}
}

// TestParkedWithCordon: only a due drain's node that the watch shows empty, of a VM the
// plan suspends after it and that is a worker of the active layout, between layouts not
// by count, is marked parked with its cordon; a host whose turn has not come
// (maxParallel), a drain that suspends nothing (a power-off), a node with pods or whose
// pods cannot be told, a pass without a watch, no active layout or a layout by count
// mark nothing ahead of the park.
func TestParkedWithCordon(t *testing.T) {
	pool, w, in, p := sampleDayToNight(t)
	pool.Status.ActiveLayout = "day"
	powerOff := &plan.Plan{Layout: p.Layout}
	for _, hp := range p.Hosts {
		hp.Steps = slices.Clone(hp.Steps)
		for i, st := range hp.Steps {
			if st.Action == plan.Suspend {
				hp.Steps[i].Action = plan.PowerOff
			}
		}
		powerOff.Hosts = append(powerOff.Hosts, hp)
	}
	byCount := pool.Spec.Layouts[1]
	byCount.Convert = &gpupoolv1.Conversion{Base: "day"}
	drains := func(vms ...string) []plan.Step {
		var out []plan.Step
		for _, vm := range vms {
			out = append(out, plan.Step{VM: vm, Host: "esx-01", Action: plan.Drain})
		}
		return out
	}
	noPark := &plan.Plan{Layout: p.Layout}
	for _, hp := range p.Hosts {
		hp.Steps = slices.DeleteFunc(slices.Clone(hp.Steps), func(st plan.Step) bool { return st.VM == "day-2" && st.Action == plan.Suspend })
		noPark.Hosts = append(noPark.Hosts, hp)
	}
	cases := []struct {
		name  string
		plan  *plan.Plan
		due   []plan.Step
		empty []string
		never bool
		none  bool // no watch
		// active is the pool's active layout ("-": none); wanted the layout made (nil:
		// night).
		active string
		wanted *gpupoolv1.Layout
		want   []string
	}{
		{name: "empty nodes, due", plan: p, due: drains("day-1", "day-2", "day-3"), empty: []string{"day-1", "day-3", "day-4"}, want: []string{"day-1", "day-3"}},
		{name: "no drain due", plan: p, empty: []string{"day-1"}},
		{name: "the drain parks nothing", plan: noPark, due: drains("day-1", "day-2"), empty: []string{"day-1", "day-2"}, want: []string{"day-1"}},
		{name: "cannot tell", plan: p, due: drains("day-1"), empty: []string{"day-1"}, never: true},
		{name: "no watch", plan: p, due: drains("day-1"), empty: []string{"day-1"}, none: true},
		{name: "parked by power-off", plan: powerOff, due: drains("day-1"), empty: []string{"day-1"}},
		{name: "no active layout", plan: p, due: drains("day-1"), empty: []string{"day-1"}, active: "-"},
		{name: "not a worker of the active layout", plan: p, due: drains("day-1"), empty: []string{"day-1"}, active: "night"},
		{name: "to a layout by count", plan: p, due: drains("day-1"), empty: []string{"day-1"}, wanted: &byCount},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gates := newDrainGates()
			gates.never = c.never
			for _, vm := range c.empty {
				gates.end("node-" + vm)
			}
			e := &Executor{Drains: gates}
			if c.none {
				e.Drains = nil
			}
			pool := pool.DeepCopy()
			switch c.active {
			case "-":
				pool.Status.ActiveLayout = ""
			case "":
			default:
				pool.Status.ActiveLayout = c.active
			}
			wanted := c.wanted
			if wanted == nil {
				wanted = &pool.Spec.Layouts[1]
			}
			r := &run{Executor: e, Input: Input{Pool: pool, Now: startsAt, Plan: c.plan, Layout: wanted, World: w, Planned: in}}
			var got []string
			for vm, ok := range r.parkedWithCordon(c.due) {
				if ok {
					got = append(got, vm)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("marked parked with the cordon: %v, want %v", got, c.want)
			}
		})
	}
}

// TestCordonedParkedNodeKeepsItsMarks: a pass that finds a node marked parked with its
// cordon, its VM still running and its drain done, writes it no more: its suspend's start
// makes no node write (markLater), and the cordon is not made again.
func TestCordonedParkedNodeKeepsItsMarks(t *testing.T) {
	pool, w, in, p := sampleDayToNight(t)
	for i := 1; i <= 4; i++ {
		n := w.Nodes[fmt.Sprintf("day-%d", i)]
		nodes.Cordon(n)
		nodes.SetManagedLabel(n, gpupoolv1.LabelPool, "pool")
		nodes.ApplyMeta(n, nodes.ParkedMeta("pool"))
	}
	r := &run{Executor: &Executor{Starts: NewStarts(t.Context(), nil), Nodes: &loggedNodes{log: &orderLog{}}}, Input: Input{Pool: pool, Now: startsAt, Plan: p, World: w, Planned: in}}
	for i := 1; i <= 4; i++ {
		vm := fmt.Sprintf("day-%d", i)
		if mark := r.markLater(vm, w.Nodes[vm]); mark != nil {
			t.Errorf("%s: a node write before its suspend, want none: the cordon carried its marks", vm)
		}
		if err := r.cordonNode(t.Context(), vm, w.Nodes[vm], true); err != nil {
			t.Errorf("%s: %v", vm, err)
		}
	}
	if got := r.Nodes.(*loggedNodes).log.all(); len(got) != 0 {
		t.Errorf("node writes %v, want none", got)
	}
}
