package vgpusim_test

import (
	"context"
	"testing"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// queryCapacity asks the simulator's DirectPathProfileManager about the host.
func queryCapacity(t *testing.T, sim *vgpusim.Sim, host string, profiles ...string) ([]types.BaseDirectPathProfileManagerCapacityResult, error) {
	t.Helper()
	c := connect(t, sim)
	ctx := context.Background()
	mgr := c.ServiceContent.DirectPathProfileManager
	if mgr == nil {
		t.Fatal("ServiceContent has no directPathProfileManager")
	}
	f := find.NewFinder(c.Client)
	dc, err := f.Datacenter(ctx, sim.Datacenter())
	if err != nil {
		t.Fatal(err)
	}
	f.SetDatacenter(dc)
	h, err := f.HostSystem(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	req := types.DirectPathProfileManagerQueryCapacity{This: *mgr, Target: &types.DirectPathProfileManagerTargetHost{Host: h.Reference()}}
	for _, p := range profiles {
		req.QuerySpec = append(req.QuerySpec, &types.DirectPathProfileManagerCapacityQueryByDeviceConfig{
			DeviceConfig: &types.DirectPathProfileManagerVmiopDirectPathConfig{VgpuProfile: p},
		})
	}
	res, err := methods.DirectPathProfileManagerQueryCapacity(ctx, c.Client, &req)
	if err != nil {
		return nil, err
	}
	return res.Returnval, nil
}

func capacityInfo(t *testing.T, r types.BaseDirectPathProfileManagerCapacityResult) [3]int32 {
	t.Helper()
	info, ok := r.(*types.DirectPathProfileManagerCapacityInfo)
	if !ok {
		t.Fatalf("result %T, want CapacityInfo", r)
	}
	return [3]int32{info.Consumed, info.Remaining, info.Max}
}

func TestQueryCapacityFromPlacementModel(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	// Four 4Q vGPUs fill the 16 GiB P100 (same-size): no room for 4Q, none for another
	// type either, though an idle GPU would take 16 x 1Q or 1 x 16Q.
	res, err := queryCapacity(t, sim, "esx-01", "grid_p100-4q", "grid_p100-1q", "grid_p100-16q", "grid_t4-4c")
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want one per query spec", len(res))
	}
	for i, want := range [][3]int32{{4, 0, 4}, {0, 0, 16}, {0, 0, 1}, {0, 0, 0}} {
		if got := capacityInfo(t, res[i]); got != want {
			t.Errorf("result %d: consumed, remaining, max = %v, want %v", i, got, want)
		}
	}
	info := res[0].(*types.DirectPathProfileManagerCapacityInfo)
	if cfg, ok := info.Profile.DeviceConfig.(*types.DirectPathProfileManagerVmiopDirectPathConfig); !ok || cfg.VgpuProfile != "grid_p100-4q" {
		t.Errorf("profile device config %#v", info.Profile.DeviceConfig)
	}
}

func TestQueryCapacityFollowsPowerOff(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	tk, err := vmObj(t, sim, c, "gpu-day-1").PowerOff(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ti := taskResult(t, c, tk); ti.State != types.TaskInfoStateSuccess {
		t.Fatalf("power off: %v", ti.State)
	}
	res, err := queryCapacity(t, sim, "esx-01", "grid_p100-4q")
	if err != nil {
		t.Fatal(err)
	}
	if got := capacityInfo(t, res[0]); got != [3]int32{3, 1, 4} {
		t.Fatalf("consumed, remaining, max = %v, want [3 1 4]", got)
	}
}

func TestQueryCapacityForcedAndFailing(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	sim.SetVCenterRemaining("esx-01", "grid_p100-1q", 0)
	sim.SetVCenterRemaining("esx-01", "grid_p100-4q", 2)
	res, err := queryCapacity(t, sim, "esx-01", "grid_p100-4q")
	if err != nil {
		t.Fatal(err)
	}
	if got := capacityInfo(t, res[0]); got != [3]int32{4, 2, 6} {
		t.Fatalf("forced: consumed, remaining, max = %v, want [4 2 6]", got)
	}
	sim.SetVCenterRemaining("esx-01", "grid_p100-4q", -1)
	sim.FailCapacityQueries(1, nil)
	if _, err := queryCapacity(t, sim, "esx-01", "grid_p100-4q"); err == nil {
		t.Fatal("query did not fail")
	}
	res, err = queryCapacity(t, sim, "esx-01", "grid_p100-4q")
	if err != nil {
		t.Fatal(err)
	}
	if got := capacityInfo(t, res[0]); got != [3]int32{4, 0, 4} {
		t.Fatalf("after the failure: %v, want [4 0 4]", got)
	}
	if n := sim.Calls("DirectPathProfileManagerQueryCapacity"); n != 3 {
		t.Errorf("%d calls counted, want 3", n)
	}
}

func TestQueryCapacityByNameIsUnknown(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	f := find.NewFinder(c.Client)
	dc, _ := f.Datacenter(context.Background(), sim.Datacenter())
	f.SetDatacenter(dc)
	h, err := f.HostSystem(context.Background(), "esx-01")
	if err != nil {
		t.Fatal(err)
	}
	res, err := methods.DirectPathProfileManagerQueryCapacity(context.Background(), c.Client, &types.DirectPathProfileManagerQueryCapacity{
		This:      *c.ServiceContent.DirectPathProfileManager,
		Target:    &types.DirectPathProfileManagerTargetHost{Host: h.Reference()},
		QuerySpec: []types.BaseDirectPathProfileManagerCapacityQuerySpec{&types.DirectPathProfileManagerCapacityQueryByName{Name: "p100-4q"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := res.Returnval[0].(*types.DirectPathProfileManagerCapacityUnknown); !ok || len(u.FaultList) == 0 {
		t.Fatalf("result %#v, want CapacityUnknown with faults", res.Returnval[0])
	}
	// An invalid target is a fault.
	_, err = methods.DirectPathProfileManagerQueryCapacity(context.Background(), c.Client, &types.DirectPathProfileManagerQueryCapacity{
		This:   *c.ServiceContent.DirectPathProfileManager,
		Target: &types.DirectPathProfileManagerTargetHost{Host: types.ManagedObjectReference{Type: "HostSystem", Value: "host-nope"}},
	})
	if err == nil {
		t.Fatal("invalid target accepted")
	}
}

func TestNoDirectPathProfileManager(t *testing.T) {
	inv, err := vgpusim.LoadFile("testdata/daynight.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, vgpusim.Options{NoDirectPathProfileManager: true})
	c := connect(t, sim)
	if c.ServiceContent.DirectPathProfileManager != nil {
		t.Fatalf("ServiceContent names %v", c.ServiceContent.DirectPathProfileManager)
	}
	if v := c.ServiceContent.About.ApiVersion; v != "8.0.3.0" {
		t.Errorf("apiVersion %s, want 8.0.3.0", v)
	}
}
