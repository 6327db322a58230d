package vsphere

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// vCenter's own count of vGPU room (vSphere API 9.0.0.0): ServiceContent.
// directPathProfileManager, when vCenter has one, answers
// DirectPathProfileManagerQueryCapacity for a target (a host or a cluster) and a list of
// DirectPath profiles: per profile, the units consumed by powered-on VMs, the units
// remaining, the most the target could hold with no VM running, and the units reserved
// but unused. gpupool asks once per host whose details an inventory read converts, with
// the host as the target and one query spec per vGPU profile the host offers, by device
// config (a DirectPathProfileManagerVmiopDirectPathConfig naming the vGPU type), so no
// DirectPath profile has to be created in vCenter for gpupool's sake.
//
// The answer is a second opinion (internal/plan/vcentercapacity.go). An inventory read
// never fails because of it: a vCenter without the manager is recorded as not offering
// it, a failed query as failed with its error, and the planner goes on with its own
// packing.

// maxCapacityQueries bounds the capacity queries in flight at once: one round trip per
// host, so that a read of 64 hosts costs about as long as a few of them.
const maxCapacityQueries = 8

// vcenterCapacities fills hosts[i].VCenterCapacity from vCenter's answer for asked[i],
// asking for up to maxCapacityQueries hosts at once.
func (c *client) vcenterCapacities(ctx context.Context, hosts []inventory.Host, asked []mo.HostSystem) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxCapacityQueries)
	for i := range hosts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			hosts[i].VCenterCapacity = c.vcenterCapacity(ctx, asked[i], hosts[i].Profiles)
		}()
	}
	wg.Wait()
}

// vcenterCapacity asks vCenter for the host's room per offered vGPU profile.
func (c *client) vcenterCapacity(ctx context.Context, h mo.HostSystem, profiles []inventory.Profile) inventory.VCenterCapacity {
	mgr := c.s.vc.ServiceContent.DirectPathProfileManager
	if mgr == nil || mgr.Value == "" {
		return inventory.VCenterCapacity{State: inventory.CapacityNotOffered}
	}
	if out := (inventory.Host{ConnectionState: string(h.Runtime.ConnectionState)}); !out.Reachable() {
		return inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: "not asked: host is " + string(h.Runtime.ConnectionState)}
	}
	if len(profiles) == 0 {
		return inventory.VCenterCapacity{State: inventory.CapacityRead, Profiles: map[string]inventory.ProfileCapacity{}}
	}
	req := types.DirectPathProfileManagerQueryCapacity{
		This:   *mgr,
		Target: &types.DirectPathProfileManagerTargetHost{Host: h.Self},
	}
	for _, p := range profiles {
		req.QuerySpec = append(req.QuerySpec, &types.DirectPathProfileManagerCapacityQueryByDeviceConfig{
			DeviceConfig: &types.DirectPathProfileManagerVmiopDirectPathConfig{VgpuProfile: p.Name},
		})
	}
	res, err := methods.DirectPathProfileManagerQueryCapacity(ctx, c.s.vc, &req)
	if err != nil {
		c.log.Info("vCenter's DirectPathProfileManager.QueryCapacity failed; planning with gpupool's own packing only",
			"host", h.Name, "err", err.Error())
		return inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: err.Error()}
	}
	return capacityOf(res.Returnval, profiles)
}

// capacityOf reads the query's results. Each result answers one query spec; a
// CapacityInfo names its profile's device config (or, failing that, matches its spec by
// position), a CapacityUnknown gives no opinion.
func capacityOf(results []types.BaseDirectPathProfileManagerCapacityResult, profiles []inventory.Profile) inventory.VCenterCapacity {
	out := inventory.VCenterCapacity{State: inventory.CapacityRead, Profiles: map[string]inventory.ProfileCapacity{}}
	var unknown []string
	for i, r := range results {
		switch r := r.(type) {
		case *types.DirectPathProfileManagerCapacityInfo:
			name := ""
			if cfg, ok := r.Profile.DeviceConfig.(*types.DirectPathProfileManagerVmiopDirectPathConfig); ok {
				name = cfg.VgpuProfile
			}
			if name == "" && i < len(profiles) {
				name = profiles[i].Name
			}
			if name == "" {
				continue
			}
			out.Profiles[name] = inventory.ProfileCapacity{
				Consumed: int(r.Consumed), Remaining: int(r.Remaining), Max: int(r.Max), UnusedReservation: int(r.UnusedReservation),
			}
		case *types.DirectPathProfileManagerCapacityUnknown:
			name := ""
			if q, ok := r.QuerySpec.(*types.DirectPathProfileManagerCapacityQueryByDeviceConfig); ok {
				if cfg, ok := q.DeviceConfig.(*types.DirectPathProfileManagerVmiopDirectPathConfig); ok {
					name = cfg.VgpuProfile
				}
			}
			var msgs []string
			for _, f := range r.FaultList {
				msgs = append(msgs, f.LocalizedMessage)
			}
			unknown = append(unknown, fmt.Sprintf("%s: %s", name, strings.Join(msgs, "; ")))
		}
	}
	if len(unknown) > 0 {
		// Note: the profiles vCenter could not count are absent from Profiles; the error
		// says which, for the log and the tests.
		out.Error = "vCenter could not count " + strings.Join(unknown, ", ")
	}
	return out
}
