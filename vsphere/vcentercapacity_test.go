package vsphere_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// newEnvWith is newEnv with simulator options (and connector options).
func newEnvWith(t *testing.T, doc string, opts vgpusim.Options, connOpts ...vsphere.Option) *env {
	t.Helper()
	inv, err := vgpusim.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn := vsphere.NewConnector(connOpts...)
	t.Cleanup(func() { _ = conn.Close() })
	e := &env{t: t, sim: sim, conn: conn, ctx: ctx}
	if e.c, err = conn.Connect(ctx, e.config()); err != nil {
		t.Fatal(err)
	}
	return e
}

const capacityDoc = `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q}, {name: grid_p100-8q}]
- name: h2
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q}]
- name: plain
vms:
- {name: a, host: h1, profile: grid_p100-4q, powerState: poweredOn}
`

func TestInventoryReadsVCenterCapacity(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC))
	e := newEnvWith(t, capacityDoc, vgpusim.Options{}, vsphere.WithClock(clk))
	e.sim.ResetCalls()
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := inv.FindHost("h1")
	if h1.VCenterCapacity.State != inventory.CapacityRead {
		t.Fatalf("h1: %+v", h1.VCenterCapacity)
	}
	if got, ok := h1.VCenterCapacity.Said("grid_p100-4q"); !ok || got != (inventory.ProfileCapacity{Consumed: 1, Remaining: 3, Max: 4}) {
		t.Errorf("h1 grid_p100-4q: %+v, %v", got, ok)
	}
	// Same-size: the GPU runs a 4Q vGPU, so no 8Q fits until it stops.
	if got, _ := h1.VCenterCapacity.Said("grid_p100-8q"); got != (inventory.ProfileCapacity{Remaining: 0, Max: 2}) {
		t.Errorf("h1 grid_p100-8q: %+v", got)
	}
	h2, _ := inv.FindHost("h2")
	if got, _ := h2.VCenterCapacity.Said("grid_p100-4q"); got != (inventory.ProfileCapacity{Remaining: 4, Max: 4}) {
		t.Errorf("h2 grid_p100-4q: %+v", got)
	}
	// One query per host with profiles; none for a host without vGPU profiles.
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 2 {
		t.Errorf("%d capacity queries, want 2", n)
	}

	// Nothing on the hosts changed: the last answers are reused, vCenter is not asked,
	// even though it would now say otherwise (SetVCenterRemaining changes nothing a read
	// sees).
	e.sim.SetVCenterRemaining("h2", "grid_p100-4q", 1)
	e.sim.ResetCalls()
	inv, err = e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 0 {
		t.Errorf("%d capacity queries for unchanged hosts, want none", n)
	}
	h2, _ = inv.FindHost("h2")
	if got, _ := h2.VCenterCapacity.Said("grid_p100-4q"); got.Remaining != 4 {
		t.Errorf("reused answer: %+v, want the last one (remaining 4)", got)
	}

	// Past CapacityMaxAge, vCenter is asked again.
	clk.Step(vsphere.CapacityMaxAge)
	inv, err = e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ = inv.FindHost("h2")
	if got, _ := h2.VCenterCapacity.Said("grid_p100-4q"); got.Remaining != 1 {
		t.Errorf("forced remaining: %+v", got)
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 2 {
		t.Errorf("%d capacity queries once the answers are %s old, want 2", n, vsphere.CapacityMaxAge)
	}
}

// TestOnlyChangedHostsAreAskedAgain: a VM that changes power state makes its host's
// answer stale; the other host's answer is reused.
func TestOnlyChangedHostsAreAskedAgain(t *testing.T) {
	e := newEnvWith(t, capacityDoc, vgpusim.Options{}, vsphere.WithClock(clocktesting.NewFakeClock(time.Now())))
	if _, err := e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
	if info := e.do(e.c.PowerOff, "a"); info.State != "success" {
		t.Fatalf("power-off: %+v", info)
	}
	e.sim.ResetCalls()
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 1 {
		t.Errorf("%d capacity queries, want 1 (h1, whose VM a stopped)", n)
	}
	h1, _ := inv.FindHost("h1")
	if got, _ := h1.VCenterCapacity.Said("grid_p100-4q"); got != (inventory.ProfileCapacity{Remaining: 4, Max: 4}) {
		t.Errorf("h1 grid_p100-4q after a stopped: %+v", got)
	}
	h2, _ := inv.FindHost("h2")
	if got, _ := h2.VCenterCapacity.Said("grid_p100-4q"); got != (inventory.ProfileCapacity{Remaining: 4, Max: 4}) {
		t.Errorf("h2 grid_p100-4q, reused: %+v", got)
	}
}

// TestHangingCapacityQuery: a DirectPathProfileManager that does not answer costs a read
// at most the query's deadline; the read goes on without vCenter's opinion, no host is
// asked again during the back-off (each says why and until when), and after it the
// hosts are asked again.
func TestHangingCapacityQuery(t *testing.T) {
	const deadline = 300 * time.Millisecond
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC))
	e := newEnvWith(t, capacityDoc, vgpusim.Options{}, vsphere.WithClock(clk), vsphere.WithCapacityQueryTimeout(deadline))
	release := e.sim.HangCapacityQueries()
	t.Cleanup(release)
	e.sim.ResetCalls()

	start := time.Now()
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatalf("inventory failed with the capacity query hanging: %v", err)
	}
	// Both queries run at once and end at the deadline. The bound leaves room for a
	// loaded machine (the read itself, -race); without the deadline the read took the
	// caller's whole budget (30 s here).
	if took := time.Since(start); took > 10*deadline {
		t.Errorf("the read took %s with the capacity query hanging, want about %s", took, deadline)
	}
	until := clk.Now().Add(vsphere.CapacityQueryBackoff).UTC().Format(time.RFC3339)
	for _, name := range []string{"h1", "h2"} {
		h, _ := inv.FindHost(name)
		if h.VCenterCapacity.State != inventory.CapacityFailed || !strings.Contains(h.VCenterCapacity.Error, "did not answer within 300ms") ||
			!strings.Contains(h.VCenterCapacity.Error, "before "+until) {
			t.Errorf("%s: %+v, want failed, saying the query did not answer and until when it is not asked", name, h.VCenterCapacity)
		}
	}
	asked := e.sim.Calls("DirectPathProfileManagerQueryCapacity")
	if asked == 0 || asked > 2 {
		t.Errorf("%d capacity queries, want 1 or 2 (the hosts asked before the first timed out)", asked)
	}

	// During the back-off nobody is asked.
	clk.Step(vsphere.CapacityQueryBackoff - time.Second)
	inv, err = e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != asked {
		t.Errorf("%d capacity queries during the back-off, want none", n-asked)
	}
	for _, name := range []string{"h1", "h2"} {
		h, _ := inv.FindHost(name)
		if !strings.Contains(h.VCenterCapacity.Error, "not asked") || !strings.Contains(h.VCenterCapacity.Error, "no host is asked before "+until) {
			t.Errorf("%s during the back-off: %+v", name, h.VCenterCapacity)
		}
	}

	// After it, and with vCenter answering again, the hosts are asked.
	release()
	clk.Step(time.Second)
	inv, err = e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"h1", "h2"} {
		if h, _ := inv.FindHost(name); h.VCenterCapacity.State != inventory.CapacityRead {
			t.Errorf("%s after the back-off: %+v, want read", name, h.VCenterCapacity)
		}
	}
}

func TestInventoryWithoutDirectPathProfileManager(t *testing.T) {
	e := newEnvWith(t, capacityDoc, vgpusim.Options{NoDirectPathProfileManager: true})
	e.sim.ResetCalls()
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range inv.Hosts {
		if h.VCenterCapacity.State != inventory.CapacityNotOffered || h.VCenterCapacity.Profiles != nil {
			t.Errorf("%s: %+v, want not offered", h.Name, h.VCenterCapacity)
		}
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 0 {
		t.Errorf("%d capacity queries, want none", n)
	}
}

func TestFailedCapacityQueryKeepsInventory(t *testing.T) {
	e := newEnvWith(t, capacityDoc, vgpusim.Options{})
	e.sim.FailCapacityQueries(1, nil)
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatalf("inventory failed with the capacity query: %v", err)
	}
	failed, read := 0, 0
	for _, h := range inv.Hosts {
		switch h.VCenterCapacity.State {
		case inventory.CapacityFailed:
			failed++
			if !strings.Contains(h.VCenterCapacity.Error, "injected") {
				t.Errorf("%s: error %q", h.Name, h.VCenterCapacity.Error)
			}
			if _, ok := h.VCenterCapacity.Said("grid_p100-4q"); ok {
				t.Errorf("%s: a failed query says something", h.Name)
			}
		case inventory.CapacityRead:
			read++
		}
	}
	if failed != 1 || read != 2 {
		t.Fatalf("%d failed, %d read; want 1 and 2", failed, read)
	}
}

func TestScopedInventoryReadsVCenterCapacity(t *testing.T) {
	e := newEnvWith(t, capacityDoc, vgpusim.Options{})
	e.sim.ResetCalls()
	inv, err := e.c.Inventory(e.ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	h1, ok := inv.FindHost("h1")
	if !ok || h1.VCenterCapacity.State != inventory.CapacityRead {
		t.Fatalf("h1: %+v", h1)
	}
	if n := e.sim.Calls("DirectPathProfileManagerQueryCapacity"); n > len(inv.Hosts) {
		t.Errorf("%d capacity queries for %d hosts", n, len(inv.Hosts))
	}
}
