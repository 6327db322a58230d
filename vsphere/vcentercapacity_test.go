package vsphere_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// newEnvWith is newEnv with simulator options.
func newEnvWith(t *testing.T, doc string, opts vgpusim.Options) *env {
	t.Helper()
	inv, err := vgpusim.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn := vsphere.NewConnector()
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
	e := newEnvWith(t, capacityDoc, vgpusim.Options{})
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

	e.sim.SetVCenterRemaining("h2", "grid_p100-4q", 1)
	inv, err = e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ = inv.FindHost("h2")
	if got, _ := h2.VCenterCapacity.Said("grid_p100-4q"); got.Remaining != 1 {
		t.Errorf("forced remaining: %+v", got)
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
