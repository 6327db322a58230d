package vgpusim

import (
	"fmt"
	"slices"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// DirectPathProfileManager, vSphere API 9.0.0.0 (ServiceContent.directPathProfileManager),
// as its API reference describes DirectPathProfileManagerQueryCapacity:
//
//   - target is a DirectPathProfileManagerTargetHost (an ESXi host) or a
//     DirectPathProfileManagerTargetCluster (a cluster); "a null or an invalid target will
//     cause an exception" (InvalidArgument here).
//   - querySpec lists the DirectPath profiles to count; each spec gets one result, in
//     order: a DirectPathProfileManagerCapacityInfo, or a
//     DirectPathProfileManagerCapacityUnknown with the spec and the faults that explain
//     why (the profile is not found, ...).
//   - CapacityInfo.consumed: units of the profile assigned to powered-on VMs on the
//     target; remaining: units not yet assigned (nor reserved); max: the total capacity
//     of the target with no VM running, without what vSphere's system components take;
//     unusedReservation: reserved but unassigned units. max >= consumed + remaining +
//     unusedReservation.
//
// The simulator creates no DirectPath profiles (DirectPathProfileManagerCreate and List
// are not implemented), so only CapacityQueryByDeviceConfig with a
// DirectPathProfileManagerVmiopDirectPathConfig (a vGPU type name) is answered; by id or
// by name the result is CapacityUnknown (NotFound). The counts come from the simulator's
// own placement model (placement.go), not from gpupool's planner: remaining is how many
// more vGPUs of the type its placement rules would place, one after another, on the GPUs
// as they run now; max the same on idle GPUs; consumed the vGPUs of the type running now.
// A host that does not offer the type counts 0. The simulator reserves nothing, so
// unusedReservation is 0. Hosts in maintenance mode are counted like the others.
//
// Options.NoDirectPathProfileManager leaves the manager out, as vCenters before 9.0 do;
// SetVCenterRemaining forces an answer (a disagreement with the placement model),
// FailCapacityQueries makes queries fail and HangCapacityQueries makes them hang.

// dpmRef is the manager's managed object reference.
var dpmRef = types.ManagedObjectReference{Type: "DirectPathProfileManager", Value: "DirectPathProfileManager"}

// directPathManager serves DirectPathProfileManager.
type directPathManager struct {
	mo.DirectPathProfileManager
	sim *Sim
}

// directPathState is what tests set on the manager; guarded by Sim.mu.
type directPathState struct {
	// remaining forces CapacityInfo.remaining by host name and profile.
	remaining map[string]map[string]int
	// fail makes the next fail queries return fault.
	fail  int
	fault types.BaseMethodFault
}

// installDirectPathManager registers the manager and names it in the ServiceContent.
func (s *Sim) installDirectPathManager() {
	m := &directPathManager{sim: s}
	m.Self = dpmRef
	s.model.Map().Put(m)
	si := s.model.Map().Get(vim25.ServiceInstance).(*simulator.ServiceInstance)
	ref := dpmRef
	si.Content.DirectPathProfileManager = &ref
}

// SetVCenterRemaining makes DirectPathProfileManagerQueryCapacity answer remaining for
// the profile on the host (and count it so in the host's cluster), whatever the
// placement model says: a vCenter that disagrees with gpupool. A negative remaining
// removes the override.
func (s *Sim) SetVCenterRemaining(host, profile string, remaining int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if remaining < 0 {
		delete(s.dp.remaining[host], profile)
		return
	}
	if s.dp.remaining == nil {
		s.dp.remaining = map[string]map[string]int{}
	}
	if s.dp.remaining[host] == nil {
		s.dp.remaining[host] = map[string]int{}
	}
	s.dp.remaining[host][profile] = remaining
}

// FailCapacityQueries makes the next n DirectPathProfileManagerQueryCapacity calls fail
// with fault (a SystemError when nil).
func (s *Sim) FailCapacityQueries(n int, fault types.BaseMethodFault) {
	if fault == nil {
		fault = &types.SystemError{Reason: "vgpusim: injected DirectPathProfileManagerQueryCapacity failure"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dp.fail, s.dp.fault = n, fault
}

// HangCapacityQueries makes every DirectPathProfileManagerQueryCapacity call hang, as a
// DirectPathProfileManager that does not answer, until release is called (idempotent;
// call it in the test's cleanup, before the simulator stops). The call is counted
// (Calls) before it hangs; a client that gives up leaves it hanging on the server only.
func (s *Sim) HangCapacityQueries() (release func()) {
	done := make(chan struct{})
	var once sync.Once
	s.OnCall("DirectPathProfileManagerQueryCapacity", func() { <-done })
	return func() {
		once.Do(func() {
			s.OnCall("DirectPathProfileManagerQueryCapacity", nil)
			close(done)
		})
	}
}

// DirectPathProfileManagerQueryCapacity counts the target's room per queried profile.
func (m *directPathManager) DirectPathProfileManagerQueryCapacity(ctx *simulator.Context, req *types.DirectPathProfileManagerQueryCapacity) soap.HasFault {
	s := m.sim
	body := &methods.DirectPathProfileManagerQueryCapacityBody{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dp.fail > 0 {
		s.dp.fail--
		msg := ""
		if se, ok := s.dp.fault.(*types.SystemError); ok {
			msg = se.Reason
		}
		body.Fault_ = simulator.Fault(msg, s.dp.fault)
		return body
	}
	hosts, fault := s.capacityTarget(ctx, req.Target)
	if fault != nil {
		body.Fault_ = simulator.Fault("", fault)
		return body
	}
	res := &types.DirectPathProfileManagerQueryCapacityResponse{}
	for _, spec := range req.QuerySpec {
		res.Returnval = append(res.Returnval, s.capacityOf(hosts, spec))
	}
	body.Res = res
	return body
}

// capacityTarget is the hosts the target names. Callers hold s.mu.
func (s *Sim) capacityTarget(ctx *simulator.Context, target types.BaseDirectPathProfileManagerTargetEntity) ([]*hostState, types.BaseMethodFault) {
	invalid := &types.InvalidArgument{InvalidProperty: "target"}
	switch t := target.(type) {
	case *types.DirectPathProfileManagerTargetHost:
		h := s.hosts[t.Host]
		if h == nil {
			return nil, invalid
		}
		return []*hostState{h}, nil
	case *types.DirectPathProfileManagerTargetCluster:
		if _, ok := ctx.Map.Get(t.Cluster).(*simulator.ClusterComputeResource); !ok {
			return nil, invalid
		}
		var out []*hostState
		for _, h := range s.hosts {
			if h.obj.Parent != nil && *h.obj.Parent == t.Cluster {
				out = append(out, h)
			}
		}
		slices.SortFunc(out, func(a, b *hostState) int {
			switch {
			case a.cfg.Name < b.cfg.Name:
				return -1
			case a.cfg.Name > b.cfg.Name:
				return 1
			}
			return 0
		})
		return out, nil
	}
	return nil, invalid
}

// capacityOf answers one query spec for the hosts. Callers hold s.mu.
func (s *Sim) capacityOf(hosts []*hostState, spec types.BaseDirectPathProfileManagerCapacityQuerySpec) types.BaseDirectPathProfileManagerCapacityResult {
	var vgpu string
	if q, ok := spec.(*types.DirectPathProfileManagerCapacityQueryByDeviceConfig); ok {
		if cfg, ok := q.DeviceConfig.(*types.DirectPathProfileManagerVmiopDirectPathConfig); ok {
			vgpu = cfg.VgpuProfile
		}
	}
	if vgpu == "" {
		return &types.DirectPathProfileManagerCapacityUnknown{
			QuerySpec: spec,
			FaultList: []types.LocalizedMethodFault{{
				Fault:            &types.NotFound{},
				LocalizedMessage: "vgpusim: no DirectPath profile matches the query spec (only VMIOP device configs are counted)",
			}},
		}
	}
	info := &types.DirectPathProfileManagerCapacityInfo{
		Profile: types.DirectPathProfileInfo{
			Id:           "vmiop-" + vgpu,
			Name:         vgpu,
			VendorName:   "NVIDIA",
			DeviceConfig: &types.DirectPathProfileManagerVmiopDirectPathConfig{VgpuProfile: vgpu},
		},
	}
	for _, h := range hosts {
		consumed, remaining, most := h.capacity(vgpu)
		if r, ok := s.dp.remaining[h.cfg.Name][vgpu]; ok {
			remaining = r
		}
		info.Consumed += int32(consumed)
		info.Remaining += int32(remaining)
		info.Max += int32(max(most, consumed+remaining))
	}
	return info
}

// capacity counts the host's vGPUs of the type: running now, how many more the
// placement rules would place on the GPUs as they are, and how many on idle GPUs.
// Callers hold s.mu.
func (h *hostState) capacity(vgpu string) (consumed, remaining, most int) {
	p, ok := h.cfg.profile(vgpu)
	if !ok {
		return 0, 0, 0
	}
	for _, g := range h.gpus {
		for _, v := range g.vgpus {
			if v.profile.Name == vgpu {
				consumed++
			}
		}
		remaining += fill(g, p, g.vgpus)
		most += fill(g, p, nil)
	}
	return consumed, remaining, most
}

// fill is how many vGPUs of p the GPU takes, one after another, next to running.
func fill(g *gpuState, p Profile, running []placed) int {
	trial := &gpuState{pciID: g.pciID, device: g.device, memMiB: g.memMiB, mode: g.mode, vgpus: slices.Clone(running)}
	size := int(p.frameBufferMiB() / slotMiB)
	n := 0
	for n <= maxVGPUsPerGPU {
		start, why := trial.fit(p)
		if why != "" || start < 0 {
			return n
		}
		trial.vgpus = append(trial.vgpus, placed{profile: p, start: start, slots: size})
		n++
	}
	panic(fmt.Sprintf("vgpusim: GPU %s took more than %d vGPUs of %s", g.pciID, maxVGPUsPerGPU, p.Name))
}
