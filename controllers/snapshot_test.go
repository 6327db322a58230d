package controllers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/vsphere"
)

// The snapshot rule (docs/operations.md): a pass knows which of its tasks are in flight
// before it reads what they change. These tests end vgpusim's held tasks at the moments
// that break it: right after the operator's inventory read, right after its task check,
// and between passes.

// hookConnector hands the reconciler clients that call the hooks after each inventory
// read and each task check, before the answer reaches the operator.
type hookConnector struct {
	vsphere.Connector
	mu             sync.Mutex
	afterInventory func()
	afterTasks     func()
	// read changes what an inventory read of the named VMs returns, as a read caught
	// between two states of a VM would (the operator's reads name the pool's VMs; the
	// harness's settle reads them all).
	read func(inv *inventory.Inventory, vms []string)
}

func (c *hookConnector) Connect(ctx context.Context, cfg vsphere.Config) (vsphere.Client, error) {
	cl, err := c.Connector.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &hookClient{Client: cl, c: c}, nil
}

func (c *hookConnector) Close() { closeConnector(c.Connector) }

func (c *hookConnector) set(afterInventory, afterTasks func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afterInventory, c.afterTasks = afterInventory, afterTasks
}

func (c *hookConnector) run(which func(*hookConnector) func()) {
	c.mu.Lock()
	f := which(c)
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

type hookClient struct {
	vsphere.Client
	c *hookConnector
}

func (cl *hookClient) Inventory(ctx context.Context, vms ...string) (*inventory.Inventory, error) {
	inv, err := cl.Client.Inventory(ctx, vms...)
	cl.c.mu.Lock()
	read := cl.c.read
	cl.c.mu.Unlock()
	if read != nil && err == nil {
		read(inv, vms)
	}
	cl.c.run(func(c *hookConnector) func() { return c.afterInventory })
	return inv, err
}

func (cl *hookClient) Tasks(ctx context.Context, ids []string) (map[string]vsphere.TaskInfo, error) {
	infos, err := cl.Client.Tasks(ctx, ids)
	cl.c.run(func(c *hookConnector) func() { return c.afterTasks })
	return infos, err
}

// hook makes the harness's reconciler (a new one from the next pass) use a
// hookConnector.
func (h *harness) hook() *hookConnector {
	c := &hookConnector{Connector: h.conn}
	h.conn, h.rec = c, nil
	return c
}

// opLedger counts, per VM and per node, what one transition did: vSphere task calls
// (vgpusim's per-VM counts) and cordons (a node seen going from schedulable to cordoned
// between two looks).
type opLedger struct {
	h        *harness
	refs     map[string]string // moref -> VM
	before   map[string]map[string]int
	cordoned map[string]bool
	cordons  map[string]int
}

func (h *harness) ledger(vms ...string) *opLedger {
	l := &opLedger{h: h, refs: map[string]string{}, before: h.sim.VMCallCounts(), cordoned: map[string]bool{}, cordons: map[string]int{}}
	for _, vm := range vms {
		st, _ := h.sim.VM(h.prefix + vm)
		l.refs[st.Ref] = vm
		l.cordoned[vm] = h.node(vm).Spec.Unschedulable
	}
	return l
}

// look records the cordons since the last look.
func (l *opLedger) look() {
	for _, vm := range l.refs {
		c := l.h.node(vm).Spec.Unschedulable
		if c && !l.cordoned[vm] {
			l.cordons[vm]++
		}
		l.cordoned[vm] = c
	}
}

// once fails for every VM that got an operation twice, or a node cordoned twice, since
// the ledger was opened.
func (l *opLedger) once(when string) {
	l.h.t.Helper()
	after := l.h.sim.VMCallCounts()
	for ref, vm := range l.refs {
		for _, m := range []string{"PowerOnVM_Task", "SuspendVM_Task", "PowerOffVM_Task", "ReconfigVM_Task"} {
			if n := after[ref][m] - l.before[ref][m]; n > 1 {
				l.h.t.Errorf("%s: VM %s got %d %s calls in one transition", when, vm, n, m)
			}
		}
		if n := l.cordons[vm]; n > 1 {
			l.h.t.Errorf("%s: node of %s cordoned %d times in one transition", when, vm, n)
		}
	}
}

var dayNightVMs = []string{"day-1", "day-2", "day-3", "day-4", "night-1"}

// TestTasksEndingInTheMiddleOfTheReadAreNotRepeated: on a bench-like world, every task
// of a switch ends at one moment of the operator's next inventory read: after its
// property read and before vCenter's capacity query (a VM that reads as before its
// task, counted by vCenter as after it), or right after the whole read. A pass that read
// the inventory before checking its tasks saw the VMs before their tasks with the tasks
// recorded as ended, believed the double-counted GPUs a shortfall and turned back,
// parking VMs it had just powered on. Each VM must get each operation once, each node be
// cordoned once, and the pool never report the layout infeasible.
func TestTasksEndingInTheMiddleOfTheReadAreNotRepeated(t *testing.T) {
	for _, moment := range []string{"capacity", "read"} {
		t.Run(moment, func(t *testing.T) {
			h, pool, vms := newBenchLike(t, "snr"+moment[:1]+"-")
			all := func(int) bool { return true }
			if moment == "capacity" {
				h.sim.OnCall("DirectPathProfileManagerQueryCapacity", func() { h.sim.CompleteHeld(all) })
				defer h.sim.OnCall("DirectPathProfileManagerQueryCapacity", nil)
			} else {
				h.hook().set(func() { h.sim.CompleteHeld(all) }, nil)
			}
			h.sim.HoldTasks()
			defer h.sim.ReleaseTasks()
			for _, to := range []string{"night", "day"} {
				l := h.ledger(vms...)
				h.switchTo(pool.Name, to)
				p := h.untilLayout(pool.Name, to, 80, l)
				l.once("to " + to + ", tasks ending at the " + moment)
				h.neverInfeasible(p)
			}
		})
	}
}

// newBenchLike is a harness on benchLikeInventory with its day/night pool created and
// at day.
func newBenchLike(t *testing.T, prefix string) (*harness, *gpupoolv1.GPUPoolProfile, []string) {
	t.Helper()
	inv, day, night := benchLikeInventory()
	h := newHarnessWith(t, prefix, inv)
	var dayW, nightW []string
	for _, vm := range day {
		dayW = append(dayW, vm+"=grid_p100-4q")
	}
	for _, vm := range night {
		nightW = append(nightW, vm+"=grid_p100-16q")
	}
	pool := h.pool("snap", h.layout("day", dayW...), h.layout("night", nightW...))
	pool.Spec.MaxParallel = 2
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 60)
	return h, pool, append(slices.Clone(day), night...)
}

// TestTasksEndingRightAfterTheCheckAreNotRepeated: as above, but the tasks end just
// after the task check, before the inventory read: the read shows them done while the
// pass still counts them in flight.
func TestTasksEndingRightAfterTheCheckAreNotRepeated(t *testing.T) {
	h := newHarness(t, "snc-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)

	hooks := h.hook()
	hooks.set(nil, func() { h.sim.CompleteHeld(func(int) bool { return true }) })
	h.sim.HoldTasks()
	defer h.sim.ReleaseTasks()
	l := h.ledger(dayNightVMs...)
	h.clock.SetTime(tuesday0750)
	p := h.untilLayout(pool.Name, "day", 80, l)
	l.once("tasks ending after the check")
	h.neverInfeasible(p)
}

// benchLikeInventory is the benchmark's world in small: 2 hosts x 2 P100s, each GPU
// with four 4Q day VMs (running) and one 16Q night VM (off).
func benchLikeInventory() (inventory string, day, night []string) {
	var b strings.Builder
	b.WriteString("datacenter: dc1\nhosts:\n")
	for h := range 2 {
		fmt.Fprintf(&b, "  - name: %%[1]sesx-%d\n    policy: performance\n    gpus:\n", h)
		for g := range 2 {
			fmt.Fprintf(&b, "      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:%02x:00.0\"}\n", 0x10+g)
		}
		b.WriteString("    profiles:\n      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}\n      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}\n")
	}
	b.WriteString("vms:\n")
	for h := range 2 {
		for g := range 2 {
			for k := range 4 {
				vm := fmt.Sprintf("day-%d-%d-%d", h, g, k)
				day = append(day, vm)
				fmt.Fprintf(&b, "  - {name: %%[1]s%s, host: %%[1]sesx-%d, profile: grid_p100-4q, powerState: poweredOn}\n", vm, h)
			}
			vm := fmt.Sprintf("night-%d-%d", h, g)
			night = append(night, vm)
			fmt.Fprintf(&b, "  - {name: %%[1]s%s, host: %%[1]sesx-%d, profile: grid_p100-16q, powerState: poweredOff}\n", vm, h)
		}
	}
	return b.String(), day, night
}

// TestSnapshotPropertyOverRandomInterleavings: over seeded random runs on a bench-like
// world, held tasks end at random moments (in the middle of an inventory read, right
// after it, right after a task check, between passes), the wanted layout may flip back
// once in the middle of a switch, and the pool switches day -> night -> day. Per switch
// (with its flip), each VM gets each operation at most once, each node is cordoned at
// most once, the layout is never reported infeasible, and every switch completes.
func TestSnapshotPropertyOverRandomInterleavings(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 41))
			var mu sync.Mutex
			coin := func(p float64) func(int) bool {
				return func(int) bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < p }
			}
			h, pool, vms := newBenchLike(t, fmt.Sprintf("snp%d-", seed))
			h.sim.OnCall("DirectPathProfileManagerQueryCapacity", func() { h.sim.CompleteHeld(coin(0.5)) })
			defer h.sim.OnCall("DirectPathProfileManagerQueryCapacity", nil)
			h.hook().set(func() { h.sim.CompleteHeld(coin(0.5)) }, func() { h.sim.CompleteHeld(coin(0.5)) })
			h.sim.HoldTasks()
			defer h.sim.ReleaseTasks()
			current := "day"
			for i, to := range []string{"night", "day"} {
				back := current
				l := h.ledger(vms...)
				h.switchTo(pool.Name, to)
				flipAt := rng.IntN(12)
				flip := rng.IntN(2) == 0
				want := to
				var p *gpupoolv1.GPUPoolProfile
				for pass := 0; pass < 150; pass++ {
					if flip && pass == flipAt {
						want = back
						h.switchTo(pool.Name, back)
					}
					h.sim.CompleteHeld(coin(0.3))
					res := h.reconcile(pool.Name)
					h.settle()
					l.look()
					h.clock.Step(testworld.StepAtMost(res, requeueTask))
					if p = h.get(pool.Name); p.Status.ActiveLayout == want && p.Status.Transition == nil && len(inFlight(p)) == 0 && pass > flipAt {
						break
					}
				}
				if p.Status.ActiveLayout != want || p.Status.Transition != nil {
					t.Fatalf("switch %d to %s (flip back at pass %d: %v) did not complete: active %q, phase %s", i, to, flipAt, flip, p.Status.ActiveLayout, p.Status.Phase)
				}
				l.once(fmt.Sprintf("switch %d to %s (flip back at pass %d: %v)", i, to, flipAt, flip))
				h.neverInfeasible(p)
				current = want
			}
		})
	}
}

// untilLayout reconciles until the layout is active with no transition or task left,
// looking at the nodes after every pass.
func (h *harness) untilLayout(name, layout string, maxPasses int, l *opLedger) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	for range maxPasses {
		res := h.reconcile(name)
		h.settle()
		l.look()
		h.clock.Step(testworld.StepAtMost(res, requeueTask))
		if p := h.get(name); p.Status.ActiveLayout == layout && p.Status.Transition == nil && len(inFlight(p)) == 0 {
			return p
		}
	}
	p := h.get(name)
	h.t.Fatalf("layout %s not reached in %d passes: active %q, phase %s", layout, maxPasses, p.Status.ActiveLayout, p.Status.Phase)
	return p
}

// neverInfeasible fails when the pool reported its layout infeasible at any pass
// (a Warning event with that reason) or reports it now.
func (h *harness) neverInfeasible(p *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	if c := findCondition(p, gpupoolv1.ConditionStalled); c != nil && c.Reason == ReasonInfeasible {
		h.t.Errorf("the pool reports %s: %s", c.Reason, c.Message)
	}
	for _, e := range h.events() {
		if strings.Contains(e, ReasonInfeasible) || strings.Contains(e, ReasonReverting) {
			h.t.Errorf("event: %s", e)
		}
	}
}

// TestDeletionReleasesNodesFromAReadAfterItsTasks: the pool is deleted while the
// suspends of a switch run, and they end just after the deletion pass's inventory read.
// Nodes must be released by the VMs' states after those suspends: a parked VM's node
// stays cordoned and marked parked (its Machine protected), a running VM's node is
// given back.
func TestDeletionReleasesNodesFromAReadAfterItsTasks(t *testing.T) {
	h := newHarness(t, "snd-")
	pool := h.dayNight()
	h.clock.SetTime(tuesday0750)
	h.create(pool)
	h.converge(pool.Name, "day", 60)

	h.sim.HoldTasksOf("SuspendVM_Task")
	defer h.sim.ReleaseTasks()
	h.clock.SetTime(monday1950.Add(24 * time.Hour))
	h.until(pool.Name, 60, "the day VMs' suspends in flight", func(p *gpupoolv1.GPUPoolProfile) bool {
		n := 0
		for _, w := range p.Status.Workers {
			if w.Task != nil && w.Task.Operation == string(vsphere.OpSuspend) && w.Task.ID != "" {
				n++
			}
		}
		return n == 4
	})
	hooks := h.hook()
	hooks.set(func() { h.sim.CompleteHeld(func(int) bool { return true }) }, nil)
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	for i := 0; i < 10; i++ {
		h.reconcile(pool.Name)
		h.sim.CompleteHeld(func(int) bool { return true })
		h.clock.Step(requeueTask)
		var p gpupoolv1.GPUPoolProfile
		if err := k8s.Get(h.ctx, client.ObjectKey{Name: pool.Name}, &p); err != nil {
			break
		}
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		st := h.vm(vm)
		n := h.node(vm)
		if st.PowerState == "poweredOn" {
			h.released(vm)
			continue
		}
		if !n.Spec.Unschedulable || n.Labels[LabelParked] != "true" {
			t.Errorf("%s is %s, but its node was released: unschedulable %v, parked label %q", vm, st.PowerState, n.Spec.Unschedulable, n.Labels[LabelParked])
		}
	}
}
