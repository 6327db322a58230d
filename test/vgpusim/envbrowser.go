package vgpusim

import (
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// envBrowser adds the hosts' vGPU profiles to vcsim's QueryConfigTarget, where vCenter
// reports each profile's frame buffer (ConfigTarget.vgpuProfileInfo).
type envBrowser struct {
	*simulator.EnvironmentBrowser
	sim   *Sim
	hosts []types.ManagedObjectReference
}

// QueryConfigTarget returns vcsim's config target plus one VgpuProfileInfo per profile
// offered by the queried host (or by every host of the compute resource).
func (b *envBrowser) QueryConfigTarget(ctx *simulator.Context, req *types.QueryConfigTarget) soap.HasFault {
	body, ok := b.EnvironmentBrowser.QueryConfigTarget(ctx, req).(*methods.QueryConfigTargetBody)
	if !ok || body.Res == nil || body.Res.Returnval == nil {
		return body
	}
	hosts := b.hosts
	if req.Host != nil {
		hosts = []types.ManagedObjectReference{*req.Host}
	}
	seen := map[string]bool{}
	b.sim.mu.Lock()
	defer b.sim.mu.Unlock()
	for _, ref := range hosts {
		h := b.sim.hosts[ref]
		if h == nil {
			continue
		}
		var vendor int64 = 0x10de
		if len(h.cfg.GPUs) > 0 {
			vendor |= int64(uint16(deviceID(h.cfg.GPUs[0].Model))) << 16
		}
		for _, p := range h.cfg.Profiles {
			if seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			body.Res.Returnval.VgpuProfileInfo = append(body.Res.Returnval.VgpuProfileInfo, types.VirtualMachineVgpuProfileInfo{
				VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: p.Name},
				ProfileName:              p.Name,
				DeviceVendorId:           vendor,
				FbSizeInGib:              p.FrameBufferGiB,
				ProfileSharing:           "timeSliced",
				ProfileClass:             profileClass(p.Name),
			})
		}
	}
	return body
}

// profileClass maps a profile's series letter to NVIDIA's class names.
func profileClass(profile string) string {
	switch {
	case strings.HasSuffix(profile, "c"):
		return "compute"
	case strings.HasSuffix(profile, "q"):
		return "quadro"
	}
	return "graphics"
}
