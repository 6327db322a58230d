package execute

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// drainGates says when nodes' pods are gone, for Executor.Drains: a node's drain ends
// when the test says.
type drainGates struct {
	mu    sync.Mutex
	gone  map[string]bool
	never bool // cannot tell (a node whose pods are not watched)
	subs  map[int]drainSub
	next  int
	waits int // subscriptions made
}

type drainSub struct {
	node string
	fn   func()
}

func newDrainGates() *drainGates {
	return &drainGates{gone: map[string]bool{}, subs: map[int]drainSub{}}
}

// end ends the drains of nodes, and calls what waits on them, as a watch does: once,
// outside its lock.
func (d *drainGates) end(nodes ...string) {
	d.mu.Lock()
	var fns []func()
	for _, n := range nodes {
		d.gone[n] = true
	}
	for id, sub := range d.subs {
		if slices.Contains(nodes, sub.node) {
			fns = append(fns, sub.fn)
			delete(d.subs, id)
		}
	}
	d.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (d *drainGates) Drained(node string) (drained, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.never {
		d.waits++
		return false, false
	}
	return d.gone[node], true
}

func (d *drainGates) OnChange(node string, fn func()) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waits++
	id := d.next
	d.next++
	d.subs[id] = drainSub{node: node, fn: fn}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.subs, id)
	}
}

// subscribed is how many waits follow a node now.
func (d *drainGates) subscribed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.subs)
}

// waiting waits until n waits have begun.
func (d *drainGates) waiting(t *testing.T, n int) {
	t.Helper()
	waitCount(t, n, "waits for drains", func() int { d.mu.Lock(); defer d.mu.Unlock(); return d.waits })
}

// TestStartsAfterDrains: suspends after drains are asked once the pods of every node they
// wait for are gone, each after its own node's parked marks, and never otherwise: drains
// that end after StartTimeout (from the handout, or from the last pass that planned for
// their generation and layout: Renew), a cancel, an edit or another layout, a failed node
// write, or a wait that cannot tell leave them not asked. While they wait they are starts
// in flight, marked ahead, with their node writes pending.
func TestStartsAfterDrains(t *testing.T) {
	type result struct{ asked, notAsked, markFailed []string }
	cases := []struct {
		name  string
		fail  map[string]bool // node writes refused
		never bool
		run   func(s *Starts, d *drainGates, advance func(time.Duration))
		want  result
	}{
		{name: "the drains end", run: func(_ *Starts, d *drainGates, _ func(time.Duration)) {
			d.end("node-a")
			d.end("node-b")
		}, want: result{asked: []string{"a", "b"}}},
		{name: "the drains end too late", run: func(_ *Starts, d *drainGates, advance func(time.Duration)) {
			advance(StartTimeout + time.Second)
			d.end("node-a", "node-b")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "a pass renews them, the drains end past the handout's time", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			advance(StartTimeout - time.Second)
			s.Renew("pool", 3, "night")
			advance(StartTimeout - time.Second)
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a", "b"}}},
		{name: "passes renew them again and again", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			for range 5 {
				advance(StartTimeout / 2)
				s.Renew("pool", 3, "night")
			}
			advance(StartTimeout)
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a", "b"}}},
		{name: "the renewal lapses", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			advance(time.Minute)
			s.Renew("pool", 3, "night")
			advance(StartTimeout + time.Second)
			d.end("node-a", "node-b")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "a pass for another layout renews nothing", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			advance(StartTimeout - time.Second)
			s.Renew("pool", 3, "day")
			s.Renew("pool", 4, "night")
			s.Renew("other", 3, "night")
			advance(2 * time.Second)
			d.end("node-a", "node-b")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "a renewal comes too late", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			advance(StartTimeout + time.Second)
			s.Renew("pool", 3, "night") // stale is final
			d.end("node-a", "node-b")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "a held VM is not renewed", run: func(s *Starts, d *drainGates, advance func(time.Duration)) {
			advance(time.Minute)
			s.CancelAheadOf("pool", map[string]bool{"b": true})
			s.Renew("pool", 3, "night")
			advance(StartTimeout - time.Second)
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a"}, notAsked: []string{"b"}}},
		{name: "one drain never ends", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			d.end("node-a")
			s.Cancel("pool") // ends the wait; without it, StartTimeout would
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "the same switch goes on", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			s.CancelAhead("pool", 3, "night")
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a", "b"}}},
		{name: "another layout is made", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			s.CancelAhead("pool", 3, "day")
			d.end("node-a", "node-b")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "the spec changed", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			s.CancelAhead("pool", 4, "night")
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "a node write fails", fail: map[string]bool{"node-b": true}, run: func(_ *Starts, d *drainGates, _ func(time.Duration)) {
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a"}, markFailed: []string{"b"}}},
		{name: "the wait cannot tell", never: true, run: func(*Starts, *drainGates, func(time.Duration)) {},
			want: result{notAsked: []string{"a", "b"}}},
		{name: "a VM is held", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			s.CancelAheadOf("pool", map[string]bool{"b": true})
			d.end("node-a", "node-b")
		}, want: result{asked: []string{"a"}, notAsked: []string{"b"}}},
		{name: "a pass sees the drains ended", run: func(s *Starts, _ *drainGates, _ func(time.Duration)) {
			s.OpenGates("pool", func(string) bool { return true }) // a terminating pod past its deadline, say
		}, want: result{asked: []string{"a", "b"}}},
		{name: "a pass sees one drain ended", run: func(s *Starts, d *drainGates, _ func(time.Duration)) {
			s.OpenGates("pool", func(vm string) bool { return vm == "a" })
			s.OpenGates("other", func(string) bool { return true })
			s.Cancel("pool")
		}, want: result{notAsked: []string{"a", "b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			clock, wakes := startsAt, 0
			s := NewStarts(t.Context(), func(string) { mu.Lock(); wakes++; mu.Unlock() })
			s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
			log := &orderLog{}
			ln := &loggedNodes{log: log, fail: c.fail}
			d := newDrainGates()
			d.never = c.never
			vc := &suspendVC{log: log}
			var q []queuedStart
			for _, w := range []string{"a", "b"} {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + w}}
				st := queue(w, vsphere.OpSuspend, "h1", func(ctx context.Context) (string, error) { return vc.Suspend(ctx, w) })
				st.mark, st.writes = func(ctx context.Context) error { return ln.Patch(ctx, node, func(*corev1.Node) {}) }, true
				st.gate = &drainGate{nodes: []string{"node-a", "node-b"}, watch: d}
				st.gateVMs = []string{"a", "b"}
				st.plannedFor = aheadPlan{generation: 3, layout: "night"}
				q = append(q, st)
			}
			asked0, notAsked0 := counterValue(t, SuspendsAfterDrains, "pool", "asked"), counterValue(t, SuspendsAfterDrains, "pool", "not-asked")
			stages := stageCounts(t)
			s.hand("pool", q, startGroups(q))
			if !c.never {
				d.waiting(t, 2)
				for _, w := range []string{"a", "b"} {
					if a, ended, inFlight := s.take("pool", w, vsphere.OpSuspend, startsAt, false); ended || !inFlight || !a.ahead {
						t.Fatalf("%s before its drains end: %+v ended %v in flight %v, want in flight and ahead", w, a, ended, inFlight)
					}
				}
				if pending := s.PendingMarks("pool"); !pending["a"] || !pending["b"] {
					t.Fatalf("pending node writes %v before the drains end, want a and b", pending)
				}
			}
			if got := log.all(); len(got) != 0 {
				t.Fatalf("before the drains end: %v, want nothing written or asked", got)
			}
			c.run(s, d, advance)
			s.Wait()
			got := log.all()
			var asked []string
			for i, l := range got {
				if w, ok := strings.CutPrefix(l, "suspend "); ok {
					asked = append(asked, w)
					if !slices.Contains(got[:i], "patch node-"+w) {
						t.Errorf("%s asked before its node's marks: %v", w, got)
					}
				}
			}
			slices.Sort(asked)
			if !slices.Equal(asked, c.want.asked) {
				t.Errorf("asked %v, want %v (log %v)", asked, c.want.asked, got)
			}
			for _, w := range c.want.notAsked {
				if a, ended, _ := s.take("pool", w, vsphere.OpSuspend, startsAt, false); !ended || !a.notAsked || a.markErr != nil {
					t.Errorf("%s: %+v ended %v, want not asked", w, a, ended)
				}
				if slices.Contains(got, "patch node-"+w) {
					t.Errorf("%s: its node written, not asked: %v", w, got)
				}
			}
			for _, w := range c.want.markFailed {
				if a, ended, _ := s.take("pool", w, vsphere.OpSuspend, startsAt, false); !ended || !a.notAsked || a.markErr == nil {
					t.Errorf("%s: %+v ended %v, want not asked for its node write", w, a, ended)
				}
			}
			for _, w := range c.want.asked {
				if a, ended, _ := s.take("pool", w, vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-"+w {
					t.Errorf("%s: %+v ended %v, want its task", w, a, ended)
				}
			}
			if p := s.PendingMarks("pool"); len(p) != 0 {
				t.Errorf("node writes pending once answered: %v", p)
			}
			if n := counterValue(t, SuspendsAfterDrains, "pool", "asked") - asked0; n != float64(len(c.want.asked)) {
				t.Errorf("counted %v asked, want %d", n, len(c.want.asked))
			}
			if n := counterValue(t, SuspendsAfterDrains, "pool", "not-asked") - notAsked0; n != float64(len(c.want.notAsked)+len(c.want.markFailed)) {
				t.Errorf("counted %v not asked, want %d", n, len(c.want.notAsked)+len(c.want.markFailed))
			}
			timed := stageCounts(t)
			if n := timed["drains"] - stages["drains"]; n != uint64(len(c.want.asked)+len(c.want.markFailed)) {
				t.Errorf("the drains' wait timed %d times, want once per start whose drains ended in time", n)
			}
			if n := d.subscribed(); n != 0 {
				t.Errorf("%d waits still follow a node's pods once answered", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if wakes != 2 {
				t.Errorf("woken %d times, want once per suspend after drains", wakes)
			}
		})
	}
}

// TestSuspendsAfterDrainsHoldNoGoroutine: suspends waiting for their drains are records
// the pods' watches wake, not goroutines (at 64 hosts a thousand of them wait at once);
// each is asked once its node's pods are gone, and nothing follows the nodes after.
func TestSuspendsAfterDrainsHoldNoGoroutine(t *testing.T) {
	const n = 200
	s := NewStarts(t.Context(), nil)
	d := newDrainGates()
	vc := &suspendVC{log: &orderLog{}}
	var q []queuedStart
	for i := range n {
		w := fmt.Sprintf("vm-%d", i)
		st := queue(w, vsphere.OpSuspend, "h1", func(ctx context.Context) (string, error) { return vc.Suspend(ctx, w) })
		st.gate, st.gateVMs = &drainGate{nodes: []string{"node-" + w}, watch: d}, []string{w}
		q = append(q, st)
	}
	before := runtime.NumGoroutine()
	s.hand("pool", q, startGroups(q))
	if grew := runtime.NumGoroutine() - before; grew > n/20 {
		t.Errorf("%d suspends waiting for their drains: %d goroutines more, want none of their own", n, grew)
	}
	if got := d.subscribed(); got != n {
		t.Fatalf("%d waits follow their nodes' pods, want %d", got, n)
	}
	for i := range n {
		d.end(fmt.Sprintf("node-vm-%d", i))
	}
	s.Wait()
	for i := range n {
		w := fmt.Sprintf("vm-%d", i)
		if a, ended, _ := s.take("pool", w, vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-"+w {
			t.Errorf("%s: %+v ended %v, want its task", w, a, ended)
		}
	}
	if got := d.subscribed(); got != 0 {
		t.Errorf("%d waits still follow a node's pods", got)
	}
}

// sampleDayToNight is the README's pool on one host with one 16 GiB P100, by day: four
// VMs with grid_p100-4q running, each with its node (node-<vm>), and the night VM with
// grid_p100-16q suspended; the plan input and plan of the switch to night.
func sampleDayToNight(t *testing.T) (*gpupoolv1.GPUPoolProfile, *world.World, *plan.Input, *plan.Plan) {
	t.Helper()
	const pci = "0000:3b:00.0"
	day := gpupoolv1.Layout{Name: "day"}
	gpu := inventory.GPU{PCIID: pci, Device: "Tesla P100", MemoryMiB: 16 * 1024}
	inv := &inventory.Inventory{}
	inv.VMs = append(inv.VMs, inventory.VM{Name: "night-1", Ref: "night-1", Host: "esx-01", Profile: "grid_p100-16q", PowerState: inventory.Suspended})
	for i := 1; i <= 4; i++ {
		vm := fmt.Sprintf("day-%d", i)
		day.Workers = append(day.Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
		inv.VMs = append(inv.VMs, inventory.VM{Name: vm, Ref: vm, Host: "esx-01", Profile: "grid_p100-4q", PowerState: inventory.PoweredOn, GPU: pci, GPUs: []string{pci}})
		gpu.VMs = append(gpu.VMs, vm)
	}
	inv.Hosts = []inventory.Host{{Name: "esx-01", Policy: inventory.PolicyPerformance, GPUs: []inventory.GPU{gpu}, Profiles: []inventory.Profile{
		{Name: "grid_p100-4q", FrameBufferMiB: 4 * 1024, SuspendSupported: true},
		{Name: "grid_p100-16q", FrameBufferMiB: 16 * 1024, SuspendSupported: true},
	}}}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool", Generation: 3}, Spec: gpupoolv1.GPUPoolProfileSpec{
		MaxParallel: 1, DefaultLayout: "day", Parking: gpupoolv1.ParkingSuspend,
		Layouts: []gpupoolv1.Layout{day, {Name: "night", Workers: []gpupoolv1.Worker{{VM: "night-1", Profile: "grid_p100-16q"}}}},
	}}
	w := world.Resolve(&pool.Spec, inv)
	w.Nodes = map[string]*corev1.Node{}
	states := map[string]plan.NodeState{}
	for i := 1; i <= 4; i++ {
		vm := fmt.Sprintf("day-%d", i)
		w.Nodes[vm] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + vm}}
		states[vm] = plan.NodeState{Name: "node-" + vm, Exists: true, Ready: true}
	}
	in := &plan.Input{Spec: &pool.Spec, Layout: "night", Inventory: inv, Nodes: states}
	p, err := plan.Build(*in)
	if err != nil || len(p.Problems) > 0 {
		t.Fatalf("plan: %v %v", err, p.Problems)
	}
	return pool, w, in, p
}

// TestRunSuspendsAfterDrains: the pass that hands out the drains' first rounds, or the
// pass that settles rounds with nothing left but terminating pods, hands out the
// suspends the end of those drains makes due on the host (and the power-on ahead of
// them), their intents recorded on the workers, each waiting for every drain of the
// host; they are asked, once each and after their node's parked marks, only once the
// pods are gone, or a pass observes the nodes drained. A round that finds a pod blocking
// the drain cancels them: nothing is asked.
func TestRunSuspendsAfterDrains(t *testing.T) {
	cases := []struct {
		name   string
		result drain.Result
		// settled: the first rounds' pass hands out no suspends (no Drained then); the
		// pass that settles the rounds does.
		settled bool
		// passOpens: the pods do not go (no kubelet); a pass that observes the nodes
		// drained (terminating pods past their deadline) lets the suspends go.
		passOpens bool
		blocked   bool
	}{
		{name: "the first rounds", result: drain.Result{Evicted: 1, Waiting: []string{"ns/p"}}},
		{name: "rounds settled, pods terminating", result: drain.Result{Evicted: 1, Waiting: []string{"ns/p"}}, settled: true},
		{name: "rounds settled, pods gone", result: drain.Result{Done: true}, settled: true},
		{name: "a pass sees the nodes drained", result: drain.Result{Evicted: 1, Waiting: []string{"ns/p"}}, passOpens: true},
		{name: "a pod blocks", result: drain.Result{Blocked: []string{"ns/p: PodDisruptionBudget"}}, blocked: true},
		{name: "a pod blocks, rounds settled", result: drain.Result{Blocked: []string{"ns/p: PodDisruptionBudget"}}, settled: true, blocked: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool, w, in, p := sampleDayToNight(t)
			log := &orderLog{}
			ln := &loggedNodes{log: log, store: storeOf(w)}
			held := []string{"node-day-1", "node-day-2", "node-day-3", "node-day-4"}
			dr := newGatedDrainer(c.result, held...)
			gates := newDrainGates()
			ev := NewEvictions(t.Context(), nil)
			defer ev.Cancel("pool")
			s := NewStarts(t.Context(), nil)
			e := &Executor{Nodes: ln, Drainer: dr, Events: noEvents{}, VSphere: &chainVC{suspendVC{log: log}}, Evictions: ev, Starts: s, Drains: gates}
			now, intents := startsAt, time.Time{}
			pass := func() Outcome {
				t.Helper()
				now = now.Add(time.Second)
				// The cordons spend the pass's node writes: the marks made past the pass are
				// not counted in them (Starts paces them).
				budget := NewBudget(4, 16).WithCordons(1024)
				return e.Run(t.Context(), Input{Pool: pool, Now: now, Plan: p, Layout: &pool.Spec.Layouts[1], World: w, Planned: in, Budget: budget})
			}
			// settling: the pass settled the drains' rounds, and the workers' messages
			// say what the drains wait for; else what the suspends wait for.
			handOut := func(out Outcome, want int, settling bool) {
				t.Helper()
				if out.Starts.Len() != want {
					t.Fatalf("handed out %d starts, want %d (the suspends, and night-1's power-on ahead of them)", out.Starts.Len(), want)
				}
				if want == 0 {
					return
				}
				intents = now
				for i := 1; i <= 4; i++ {
					ws := FindWorker(pool, fmt.Sprintf("day-%d", i))
					if ws == nil || ws.Task == nil || ws.Task.Operation != string(vsphere.OpSuspend) || ws.Task.ID != "" {
						t.Fatalf("worker day-%d: %+v, want the suspend's intent", i, ws)
					}
					if want := "Suspend to be asked once the drains on host esx-01 end"; settling && !strings.HasPrefix(ws.Message, "draining node node-day-") ||
						!settling && ws.Message != want {
						t.Errorf("worker day-%d's message %q, want its drain's (%v) or %q", i, ws.Message, settling, want)
					}
				}
				out.Starts.Hand()
				gates.waiting(t, 4)
			}
			if c.settled {
				e.Drains = nil
			}
			handOut(pass(), map[bool]int{false: 5, true: 0}[c.settled], false)
			e.Drains = gates
			for _, n := range held {
				close(dr.gates[n])
			}
			for i := 0; endedRounds(ev, "pool") < 4; i++ { // the rounds end
				if i == 10000 {
					t.Fatalf("%d rounds ended, want 4", endedRounds(ev, "pool"))
				}
				time.Sleep(time.Millisecond)
			}
			handOut(pass(), map[bool]int{false: 0, true: 5}[c.settled && !c.blocked], true) // settles the rounds
			if c.blocked {
				s.Wait()
				if got := log.all(); slices.ContainsFunc(got, func(l string) bool {
					return strings.HasPrefix(l, "suspend ") || strings.HasPrefix(l, "power-on ") || strings.HasPrefix(l, "protect ")
				}) {
					t.Errorf("with a pod blocking the drains: %v, want nothing asked, no Machine protected", got)
				}
				// The next pass, the intents cleared (as the answers not asked clear them),
				// hands the node its next round, and no suspend: the drain waits for the
				// passes, not for a suspend cancelled each round.
				for i := 1; i <= 4; i++ {
					FindWorker(pool, fmt.Sprintf("day-%d", i)).Task = nil
				}
				if out := pass(); out.Starts.Len() != 0 {
					t.Errorf("the pass after a blocked round handed out %d starts, want none", out.Starts.Len())
				}
				if !c.settled {
					for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
						if a, ended, _ := s.take("pool", vm, vsphere.OpSuspend, intents, false); !ended || !a.notAsked {
							t.Errorf("%s: %+v ended %v, want not asked", vm, a, ended)
						}
					}
				}
				return
			}
			before := len(log.all())
			if c.passOpens {
				drained := *in
				drained.Nodes = map[string]plan.NodeState{}
				for vm, ns := range in.Nodes {
					ns.Cordoned, ns.Drained = true, vm != "day-4"
					drained.Nodes[vm] = ns
				}
				now = now.Add(time.Second)
				e.Run(t.Context(), Input{Pool: pool, Now: now, Plan: &plan.Plan{Layout: "night"}, Layout: &pool.Spec.Layouts[1], World: w, Planned: &drained})
				if got := log.all()[before:]; len(got) != 0 {
					t.Fatalf("a pass that saw node-day-4 still draining let suspends go: %v", got)
				}
				ns := drained.Nodes["day-4"]
				ns.Drained = true
				drained.Nodes["day-4"] = ns
				now = now.Add(time.Second)
				e.Run(t.Context(), Input{Pool: pool, Now: now, Plan: &plan.Plan{Layout: "night"}, Layout: &pool.Spec.Layouts[1], World: w, Planned: &drained})
			} else {
				gates.end("node-day-1", "node-day-2", "node-day-3")
				if got := log.all()[before:]; len(got) != 0 {
					t.Fatalf("with node-day-4's pods still there: %v", got)
				}
				gates.end("node-day-4")
			}
			s.Wait()
			got := log.all()[before:]
			for i := 1; i <= 4; i++ {
				vm := fmt.Sprintf("day-%d", i)
				protect, mark, ask := slices.Index(got, "protect node-"+vm), slices.Index(got, "patch node-"+vm), slices.Index(got, "suspend "+vm)
				if protect < 0 || mark < protect || ask < mark || slices.Index(got[ask+1:], "suspend "+vm) >= 0 {
					t.Errorf("%s: %v, want its Machine protected and its node's marks once its drains ended, then one suspend", vm, got)
				}
				if a, ended, _ := s.take("pool", vm, vsphere.OpSuspend, intents, false); !ended || a.id != "task-"+vm {
					t.Errorf("%s: %+v ended %v, want its task", vm, a, ended)
				}
			}
			// The night VM's power-on, ahead of the parks, once they ended: after all four.
			if on := slices.Index(got, "power-on night-1"); on < 0 || slices.ContainsFunc(got[on:], func(l string) bool { return strings.HasPrefix(l, "suspend ") }) ||
				slices.Index(got[on+1:], "power-on night-1") >= 0 {
				t.Errorf("%v, want night-1's power-on once, after the four suspends", got)
			}
		})
	}
}

// endedRounds is how many of the pool's rounds have ended and are not settled yet.
func endedRounds(e *Evictions, pool string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range e.rounds[pool] {
		if r.ended {
			n++
		}
	}
	return n
}

// chainVC answers suspends and power-ons with a task per VM, logs them, and reports every
// task it is asked to watch ended well.
type chainVC struct{ suspendVC }

func (v *chainVC) PowerOn(_ context.Context, ref, _ string) (string, error) {
	v.log.add("power-on " + ref)
	return "task-" + ref, nil
}

func (v *chainVC) WatchTasks(_ context.Context, ids []string, ended func(string, bool)) error {
	for _, id := range ids {
		ended(id, true)
	}
	return nil
}

// TestFollowerSaysWhyASuspendAfterDrainsWasNotAsked: the pass that takes the answer of a
// suspend after drains not asked clears its intent and says what it waited for.
func TestFollowerSaysWhyASuspendAfterDrainsWasNotAsked(t *testing.T) {
	s := NewStarts(t.Context(), nil)
	q := queue("a", vsphere.OpSuspend, "h1", func(context.Context) (string, error) {
		t.Error("a suspend after drains that never ended was asked")
		return "", nil
	})
	d := newDrainGates()
	d.never = true
	q.gate = &drainGate{nodes: []string{"node-a"}, watch: d}
	s.hand("pool", []queuedStart{q}, startGroups([]queuedStart{q}))
	s.Wait()
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{
		{VM: "a", Task: &gpupoolv1.TaskReference{Operation: string(vsphere.OpSuspend), StartTime: metav1.NewTime(startsAt)}}}}}
	f := &Follower{Pool: pool, Starts: s, Now: startsAt.Add(time.Minute)}
	f.takeStarts(t.Context())
	if ws := pool.Status.Workers[0]; ws.Task != nil || !strings.Contains(ws.Message, "the drains it waited for did not end within 2m0s") {
		t.Errorf("worker after the answer: %+v, want its intent cleared and what it waited for", ws)
	}
}
