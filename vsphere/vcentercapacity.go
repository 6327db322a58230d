package vsphere

import (
	"context"
	"errors"
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
// DirectPath profile has to be created in vCenter for gpupool's sake; an unchanged host's
// last answer is reused, and each query has its own deadline (capacitymemo.go).
//
// The answer is a second opinion (internal/plan/vcentercapacity.go). An inventory read
// never fails because of it: a vCenter without the manager is recorded as not offering
// it, a failed query as failed with its error, and the planner goes on with its own
// packing.

// maxCapacityQueries bounds the capacity queries in flight at once: one round trip per
// host, so that a read of 64 hosts costs about as long as a few of them.
const maxCapacityQueries = 8

// vcenterCapacities fills hosts[i].VCenterCapacity for asked[i], whose read had
// fingerprint fps[i]: from the session's last answer when the host is unchanged
// (capacitymemo.go), else from vCenter, asking for up to maxCapacityQueries hosts at once.
func (c *client) vcenterCapacities(ctx context.Context, hosts []inventory.Host, asked []mo.HostSystem, fps [][32]byte) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxCapacityQueries)
	for i := range hosts {
		out, ask := c.capacityWithoutQuery(asked[i], hosts[i].Profiles, fps[i])
		if !ask {
			hosts[i].VCenterCapacity = out
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			hosts[i].VCenterCapacity = c.vcenterCapacity(ctx, asked[i], hosts[i].Profiles, fps[i])
		}()
	}
	wg.Wait()
}

// capacityWithoutQuery answers for the host when vCenter need not (or cannot) be asked:
// no DirectPathProfileManager, a host that is not connected or offers no vGPU profile,
// or an unchanged host whose last answer is fresh. ask is true otherwise.
func (c *client) capacityWithoutQuery(h mo.HostSystem, profiles []inventory.Profile, fp [32]byte) (out inventory.VCenterCapacity, ask bool) {
	mgr := c.s.vc.ServiceContent.DirectPathProfileManager
	if mgr == nil || mgr.Value == "" {
		return inventory.VCenterCapacity{State: inventory.CapacityNotOffered}, false
	}
	if out := (inventory.Host{ConnectionState: string(h.Runtime.ConnectionState)}); !out.Reachable() {
		return inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: "not asked: host is " + string(h.Runtime.ConnectionState)}, false
	}
	if len(profiles) == 0 {
		return inventory.VCenterCapacity{State: inventory.CapacityRead, Profiles: map[string]inventory.ProfileCapacity{}}, false
	}
	if said, ok := c.s.capacity.reuse(h.Self, fp, c.clock.Now(), CapacityMaxAge); ok {
		return said, false
	}
	return inventory.VCenterCapacity{}, true
}

// vcenterCapacity asks vCenter for the host's room per offered vGPU profile, within the
// query's own deadline, unless a query timed out lately (then it records why it did not
// ask). An answer is remembered for the host's fingerprint.
func (c *client) vcenterCapacity(ctx context.Context, h mo.HostSystem, profiles []inventory.Profile, fp [32]byte) inventory.VCenterCapacity {
	if why := c.s.capacity.backingOff(c.clock.Now()); why != "" {
		return inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: why}
	}
	req := types.DirectPathProfileManagerQueryCapacity{
		This:   *c.s.vc.ServiceContent.DirectPathProfileManager,
		Target: &types.DirectPathProfileManagerTargetHost{Host: h.Self},
	}
	for _, p := range profiles {
		req.QuerySpec = append(req.QuerySpec, &types.DirectPathProfileManagerCapacityQueryByDeviceConfig{
			DeviceConfig: &types.DirectPathProfileManagerVmiopDirectPathConfig{VgpuProfile: p.Name},
		})
	}
	qctx, cancel := context.WithTimeout(ctx, c.capacityTimeout)
	defer cancel()
	res, err := methods.DirectPathProfileManagerQueryCapacity(qctx, c.s.vc, &req)
	if err != nil {
		msg := err.Error()
		if ctx.Err() == nil && errors.Is(qctx.Err(), context.DeadlineExceeded) {
			// The query's own deadline, not the caller's: vCenter's manager hangs.
			msg = c.s.capacity.timedOut(h.Name, c.capacityTimeout, CapacityQueryBackoff, c.clock.Now())
			msg = strings.TrimPrefix(msg, "not asked: ")
		}
		c.log.Info("vCenter's DirectPathProfileManager.QueryCapacity failed; planning with gpupool's own packing only",
			"host", h.Name, "err", msg)
		c.s.capacity.remember(h.Self, fp, c.clock.Now(), inventory.VCenterCapacity{})
		return inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: msg}
	}
	out := capacityOf(res.Returnval, profiles)
	c.s.capacity.remember(h.Self, fp, c.clock.Now(), out)
	return out
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
