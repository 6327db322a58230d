package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/vsphere"
)

// TestStartsBehindThePass: the one-host world switches day -> night -> day with the
// vSphere task starts inside the pass (the tests' reconciler) and past it
// (execute.Starts, as the manager runs them), and past it with every start held at
// vCenter's door while three more passes run. Each way reaches each layout, each VM's
// operation is asked for once per switch, and no pass asks vCenter whether a start it
// handed out happened (an intent whose start is in flight is a task in flight, not one
// to resolve).
func TestStartsBehindThePass(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		behind, hold bool
	}{
		{"in the pass", "stp-", false, false},
		{"behind the pass", "stb-", true, false},
		{"behind the pass, passes while they are asked", "sth-", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.prefix)
			door := &startDoor{asked: map[string]int{}}
			door.cond = sync.NewCond(&door.mu)
			h.conn = &doorConnector{Connector: h.conn, door: door}
			door.stored = h.intentStored
			var starts *execute.Starts
			if c.behind {
				starts = execute.NewStarts(h.ctx, nil)
				h.reconciler().starts = starts
			}
			pool := h.dayNight()
			h.clock.SetTime(monday1000)
			h.create(pool)
			h.converge(pool.Name, "day", 30)
			asked := door.counts()
			for _, sw := range []struct {
				layout string
				at     func()
			}{
				{"night", func() { h.clock.SetTime(monday1950) }},
				{"day", func() { h.clock.SetTime(tuesday0750) }},
			} {
				sw.at()
				reached, held := false, 0
				for range 60 {
					door.hold(c.hold && held < 3)
					res := h.reconcile(pool.Name)
					if door.waiting() > 0 {
						held++ // a pass ran while starts were at the door
					}
					if !c.hold || held >= 3 {
						door.hold(false)
						if starts != nil {
							starts.Wait()
						}
					}
					h.settle()
					if testworld.Reached(h.get(pool.Name), sw.layout) {
						reached = true
						break
					}
					h.clock.Step(testworld.Step(res))
				}
				door.hold(false)
				if !reached {
					t.Fatalf("pool did not reach %s: %s", sw.layout, testworld.Conditions(h.get(pool.Name)))
				}
				if c.hold && held < 3 {
					t.Errorf("switch to %s: %d passes ran with starts held, want 3", sw.layout, held)
				}
				now, total := door.counts(), 0
				for vm, n := range now {
					total += n - asked[vm]
					if n-asked[vm] > 1 {
						t.Errorf("switch to %s: VM %s's operations asked %d times, want once", sw.layout, vm, n-asked[vm])
					}
				}
				// Four day VMs suspended and the night VM powered on, or the other way.
				if total != 5 {
					t.Errorf("switch to %s: %d operations asked, want 5", sw.layout, total)
				}
				asked = now
			}
			if door.finds != 0 {
				t.Errorf("vCenter was asked %d times for the task of an intent; a start in flight is no intent to resolve", door.finds)
			}
			if len(door.unstored) > 0 {
				t.Errorf("vCenter was asked for starts whose intents were not stored: %v", door.unstored)
			}
			if starts != nil {
				if n := starts.InFlight(pool.Name); n != 0 {
					t.Errorf("%d starts recorded and not taken after the switches", n)
				}
			}
		})
	}
}

// TestPauseDropsStartsNotAsked: night -> day hands the night VM's suspend and, ahead of
// it, the day VMs' power-ons, one after the other on their host, to the starts past the
// pass. Once the suspend ended the first power-on waits at vCenter's door when the pool is
// paused. The paused pass drops the power-ons not yet asked, the one being asked goes
// through, and once unpaused the pool reaches day with each day VM's power-on asked once
// in all.
func TestPauseDropsStartsNotAsked(t *testing.T) {
	h := newHarness(t, "stq-")
	door, starts := h.doorStarts(false)
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	h.clock.SetTime(monday1950)
	h.converge(pool.Name, "night", 60)
	asked := door.counts()
	door.mu.Lock()
	door.powerOns = 0 // night-1's
	door.mu.Unlock()
	h.clock.SetTime(tuesday0750)
	h.sim.HoldTasksOf("SuspendVM_Task")
	handed := h.handAhead(pool.Name, starts, 5) // the suspend and the four power-ons
	if !handed {
		t.Fatal("the power-ons were never handed out ahead of the suspend")
	}
	// The suspend is asked past the pass once its node is marked parked: the door holds
	// only what comes after it.
	night, ok := h.sim.VM(h.prefix + "night-1")
	if !ok || !door.waitFor(func() bool { return door.asked[night.Ref] > asked[night.Ref] }) {
		t.Fatal("the suspend of night-1 was never asked")
	}
	door.hold(true)
	h.sim.ReleaseTasks()
	if !door.waitFor(func() bool { return door.powerOns > 0 }) {
		t.Fatal("no power-on reached vCenter's door once the suspend ended")
	}
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = true })
	h.reconcile(pool.Name)
	door.hold(false)
	starts.Wait()
	door.mu.Lock()
	if door.powerOns != 1 {
		t.Errorf("%d power-ons asked by the pause, want the one at the door only", door.powerOns)
	}
	door.mu.Unlock()
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = false })
	h.converge(pool.Name, "day", 60)
	h.checkDay(h.get(pool.Name))
	now, total := door.counts(), 0
	for vm, n := range now {
		total += n - asked[vm]
		if n-asked[vm] > 1 {
			t.Errorf("VM %s's operations asked %d times in night -> day, want once", vm, n-asked[vm])
		}
	}
	if total != 5 {
		t.Errorf("%d operations asked in night -> day, want 5 (a suspend, four power-ons)", total)
	}
	if door.finds != 0 {
		t.Errorf("vCenter was asked %d times for the task of an intent", door.finds)
	}
}

// doorStarts puts a startDoor in front of the harness's vCenter (checking, with stored,
// that each start's intent is stored when it is asked) and has the reconciler ask its
// starts past the pass, as the manager does.
func (h *harness) doorStarts(stored bool) (*startDoor, *execute.Starts) {
	door := &startDoor{asked: map[string]int{}}
	door.cond = sync.NewCond(&door.mu)
	if stored {
		door.stored = h.intentStored
	}
	h.conn = &doorConnector{Connector: h.conn, door: door}
	starts := execute.NewStarts(h.ctx, nil)
	h.reconciler().starts = starts
	return door, starts
}

// handAhead reconciles the pool (bounded) until a pass has handed out at least n starts
// and left them in flight, as a pass that starts parks with power-ons ahead of them does
// while the parks' tasks are held; the starts of the passes before are answered.
func (h *harness) handAhead(pool string, starts *execute.Starts, n int) bool {
	h.t.Helper()
	for range 60 {
		res := h.reconcile(pool)
		if starts.InFlight(pool) >= n {
			return true
		}
		starts.Wait()
		h.settle()
		h.clock.Step(testworld.Step(res))
	}
	return false
}

// intentStored tells whether the API server holds the pool's intent of op for the VM
// of vmRef (the worker's task, op, no task id yet) and, for a park, its node's parked
// marks: a start must not be asked before.
func (h *harness) intentStored(vmRef string, op vsphere.Op) error {
	var pools gpupoolv1.GPUPoolProfileList
	if err := k8s.List(context.Background(), &pools); err != nil {
		return err
	}
	for _, p := range pools.Items {
		for _, w := range p.Status.Workers {
			if vm, ok := h.sim.VM(w.VM); ok && vm.Ref == vmRef {
				if t := w.Task; t == nil || t.Operation != string(op) || t.ID != "" {
					return fmt.Errorf("%s of VM %s asked with task %+v stored", op, w.VM, t)
				}
				if op != vsphere.OpSuspend && op != vsphere.OpPowerOff || w.Node == "" {
					return nil
				}
				// A park is asked once its node is marked parked (in the pass, or by the
				// start past it: execute.Starts.mark), as the API server has it.
				var n corev1.Node
				if err := k8s.Get(context.Background(), client.ObjectKey{Name: w.Node}, &n); err != nil {
					return err
				}
				if !nodes.HasMeta(&n, nodes.ParkedMeta(p.Name)) {
					return fmt.Errorf("%s of VM %s asked before its node %s was marked parked (labels %v)", op, w.VM, w.Node, n.Labels)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("%s of VM %s asked: no pool holds its worker", op, vmRef)
}

// startDoor holds the vSphere task starts at vCenter's door while held, and counts
// each VM's starts asked and the tasks asked for by intent (FindTask).
type startDoor struct {
	mu    sync.Mutex
	cond  *sync.Cond
	held  bool
	wait  int
	asked map[string]int
	finds int
	// powerOns counts the power-ons asked.
	powerOns int
	// stored, when set, checks as a start is asked that its intent is stored (nil:
	// stored); unstored lists the starts it found otherwise.
	stored   func(vmRef string, op vsphere.Op) error
	unstored []string
}

func (d *startDoor) hold(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = on
	d.cond.Broadcast()
}

// waiting is how many starts wait at the door.
func (d *startDoor) waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.wait
}

// waitFor waits, bounded, until ok holds (it is called with d.mu held); a start that
// reaches the door wakes it.
func (d *startDoor) waitFor(ok func() bool) bool {
	deadline := time.AfterFunc(30*time.Second, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for !ok() {
		if time.Since(start) >= 30*time.Second {
			return false
		}
		d.cond.Wait()
	}
	return true
}

func (d *startDoor) counts() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.asked {
		out[k] = v
	}
	return out
}

// pass counts a start of vm and waits while the door is held; with stored set, it
// first checks that the start's intent is stored.
func (d *startDoor) pass(vm string, op vsphere.Op) {
	if d.stored != nil {
		if err := d.stored(vm, op); err != nil {
			d.mu.Lock()
			d.unstored = append(d.unstored, err.Error())
			d.mu.Unlock()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked[vm]++
	d.wait++
	d.cond.Broadcast() // waitFor
	for d.held {
		d.cond.Wait()
	}
	d.wait--
}

type doorConnector struct {
	vsphere.Connector
	door *startDoor
}

func (c *doorConnector) Connect(ctx context.Context, cfg vsphere.Config) (vsphere.Client, error) {
	vc, err := c.Connector.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &doorClient{Client: vc, door: c.door}, nil
}

func (c *doorConnector) Close() { closeConnector(c.Connector) }

type doorClient struct {
	vsphere.Client
	door *startDoor
}

func (c *doorClient) PowerOn(ctx context.Context, vmRef, hostRef string) (string, error) {
	c.door.mu.Lock()
	c.door.powerOns++
	c.door.mu.Unlock()
	c.door.pass(vmRef, vsphere.OpPowerOn)
	return c.Client.PowerOn(ctx, vmRef, hostRef)
}

func (c *doorClient) Suspend(ctx context.Context, vmRef string) (string, error) {
	c.door.pass(vmRef, vsphere.OpSuspend)
	return c.Client.Suspend(ctx, vmRef)
}

func (c *doorClient) PowerOff(ctx context.Context, vmRef string) (string, error) {
	c.door.pass(vmRef, vsphere.OpPowerOff)
	return c.Client.PowerOff(ctx, vmRef)
}

func (c *doorClient) SetProfile(ctx context.Context, vmRef, profile string, count int) (string, error) {
	c.door.pass(vmRef, vsphere.OpReconfigure)
	return c.Client.SetProfile(ctx, vmRef, profile, count)
}

func (c *doorClient) FindTask(ctx context.Context, vmRef string, op vsphere.Op, known []string) (string, error) {
	c.door.mu.Lock()
	c.door.finds++
	c.door.mu.Unlock()
	return c.Client.FindTask(ctx, vmRef, op, known)
}
