package vgpusim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// build creates the datacenter, hosts, datastore and VMs through the vSphere API of the
// in-process service, then layers the vGPU model over the resulting objects.
func (s *Sim) build() error {
	ctx := context.Background()
	c, err := vim25.NewClient(ctx, s.model.Service)
	if err != nil {
		return err
	}
	dc, err := object.NewRootFolder(c).CreateDatacenter(ctx, s.inv.Datacenter)
	if err != nil {
		return fmt.Errorf("create datacenter: %w", err)
	}
	folders, err := dc.Folders(ctx)
	if err != nil {
		return err
	}
	if s.dsDir, err = os.MkdirTemp("", "vgpusim-"); err != nil {
		return err
	}

	hostObjs, err := s.addHosts(ctx, folders.HostFolder)
	if err != nil {
		return err
	}
	s.wrapEnvBrowsers()
	if err := s.createVMs(ctx, folders.VmFolder, hostObjs); err != nil {
		return err
	}
	if err := s.applyPowerStates(); err != nil {
		return err
	}
	s.applyAvailability()
	return nil
}

// addHosts adds the inventory's hosts in order, each with its datastores and GPUs, and
// returns them by name.
func (s *Sim) addHosts(ctx context.Context, hostFolder *object.Folder) (map[string]*object.HostSystem, error) {
	hostObjs := map[string]*object.HostSystem{}
	clusters := map[string]*object.ClusterComputeResource{}
	for i := range s.inv.Hosts {
		h := &s.inv.Hosts[i]
		host, err := s.addHost(ctx, hostFolder, clusters, h)
		if err != nil {
			return nil, err
		}
		hostObjs[h.Name] = host
		if err := s.addDatastores(ctx, host, h); err != nil {
			return nil, err
		}
		s.addGPUs(host.Reference(), h)
	}
	return hostObjs, nil
}

// addDatastores creates the host's local datastores, each over a directory of s.dsDir.
func (s *Sim) addDatastores(ctx context.Context, host *object.HostSystem, h *Host) error {
	dss, err := host.ConfigManager().DatastoreSystem(ctx)
	if err != nil {
		return err
	}
	for _, ds := range h.Datastores {
		dir := s.dsDir
		if ds != "datastore1" {
			// Note: the simulator shares a datastore of one name and path among
			// the hosts that create it; other names get their own directory.
			dir = filepath.Join(s.dsDir, ds)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
		}
		if _, err := dss.CreateLocalDatastore(ctx, ds, dir); err != nil {
			return fmt.Errorf("host %s: create datastore %s: %w", h.Name, ds, err)
		}
	}
	return nil
}

// vmFolderTree returns a function that finds the VM folder at a path below root
// ("" is root itself, "a/b" is b in a), creating the folders missing on the way.
func vmFolderTree(ctx context.Context, root *object.Folder) func(p string) (*object.Folder, error) {
	vmFolders := map[string]*object.Folder{"": root}
	var folderFor func(p string) (*object.Folder, error)
	folderFor = func(p string) (*object.Folder, error) {
		if f, ok := vmFolders[p]; ok {
			return f, nil
		}
		parent, err := folderFor(strings.Trim(path.Dir("/"+p), "/"))
		if err != nil {
			return nil, err
		}
		f, err := parent.CreateFolder(ctx, path.Base(p))
		if err != nil {
			return nil, fmt.Errorf("create folder %s: %w", p, err)
		}
		vmFolders[p] = f
		return f, nil
	}
	return folderFor
}

// createVMs creates the inventory's VMs in order, powered off, each in its folder on
// its host, and puts vgpusim's VM in the registry in place of vcsim's.
func (s *Sim) createVMs(ctx context.Context, vmFolder *object.Folder, hostObjs map[string]*object.HostSystem) error {
	folderFor := vmFolderTree(ctx, vmFolder)
	for _, v := range s.inv.VMs {
		folder, err := folderFor(v.Folder)
		if err != nil {
			return err
		}
		host := hostObjs[v.Host]
		pool, err := host.ResourcePool(ctx)
		if err != nil {
			return err
		}
		task, err := folder.CreateVM(ctx, vmConfigSpec(v), pool, host)
		if err != nil {
			return fmt.Errorf("create VM %s: %w", v.Name, err)
		}
		info, err := s.waitTask(task)
		if err != nil {
			return fmt.Errorf("create VM %s: %w", v.Name, err)
		}
		ref := info.Result.(types.ManagedObjectReference)
		s.vmRefs[v.Name] = ref
		if len(v.Placements) > 0 {
			s.placements[ref] = slices.Clone(v.Placements)
		}
		// Replace vcsim's VM by one whose power and reconfigure methods know about vGPUs.
		s.model.Map().Put(&vgpuVM{VirtualMachine: s.vm(ref), sim: s})
	}
	return nil
}

// vmConfigSpec is the spec a VM of the inventory is created with: with a profile, its
// memory reserved and one vGPU device per vGPU (Profiles, where given, override Profile).
func vmConfigSpec(v VM) types.VirtualMachineConfigSpec {
	spec := types.VirtualMachineConfigSpec{
		Name:     v.Name,
		GuestId:  string(types.VirtualMachineGuestOsIdentifierOtherGuest64),
		Files:    &types.VirtualMachineFileInfo{VmPathName: "[" + v.Datastore + "]"},
		Uuid:     v.BIOSUUID,
		MemoryMB: int64(v.MemoryMiB),
		NumCPUs:  v.CPUs,
	}
	if v.Profile != "" {
		spec.MemoryReservationLockedToMax = types.NewBool(true)
		for i := range v.VGPUs {
			profile := v.Profile
			if i < len(v.Profiles) {
				profile = v.Profiles[i]
			}
			spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
				Operation: types.VirtualDeviceConfigSpecOperationAdd,
				Device:    NewVGPUDevice(profile, i),
			})
		}
	}
	return spec
}

// applyPowerStates brings VMs to their power state in inventory order, placing vGPUs
// as vCenter would.
func (s *Sim) applyPowerStates() error {
	for _, v := range s.inv.VMs {
		ref := s.vmRefs[v.Name]
		sctx := s.newContext()
		var fault types.BaseMethodFault
		sctx.WithLock(ref, func() {
			vm := s.vm(ref)
			switch inventory.PowerState(v.PowerState) {
			case inventory.PoweredOn:
				fault = s.powerOn(sctx, vm, nil)
			case inventory.Suspended:
				// A suspended VM holds no vGPU, so it needs no slot.
				setPowerState(sctx, vm, types.VirtualMachinePowerStateSuspended)
			}
		})
		if fault != nil {
			return fmt.Errorf("power on VM %s: %s", v.Name, faultMessage(fault))
		}
	}
	return nil
}

// applyAvailability sets the hosts' maintenance mode and connection state from the
// inventory. It comes after applyPowerStates: VMs keep running on a host that is no
// longer connected, and a host in maintenance mode runs none (normalize checks that).
func (s *Sim) applyAvailability() {
	for ref, h := range s.hosts {
		h.inMaintenance, h.connection = h.cfg.InMaintenanceMode, h.cfg.ConnectionState
		s.publishRuntime(s.newContext(), s.hosts[ref])
	}
}

// waitTask waits for a task of the in-process service. It reads the task's state from
// the registry rather than through the property collector, whose updates (like vcsim's
// Task.Wait) come in 10 ms steps: building an inventory waits for one task per host and
// VM, and tests start many simulators.
func (s *Sim) waitTask(t *object.Task) (types.TaskInfo, error) {
	inner, ok := s.model.Map().Get(t.Reference()).(*simulator.Task)
	if !ok {
		info, err := t.WaitForResult(context.Background(), nil)
		if info == nil {
			return types.TaskInfo{}, err
		}
		return *info, err
	}
	ctx := s.newContext()
	deadline := time.Now().Add(time.Minute)
	for {
		var info types.TaskInfo
		ctx.WithLock(inner, func() { info = inner.Info })
		switch info.State {
		case types.TaskInfoStateSuccess:
			return info, nil
		case types.TaskInfoStateError:
			return info, errors.New(info.Error.LocalizedMessage)
		}
		if time.Now().After(deadline) {
			return info, fmt.Errorf("task %s still %s after a minute", info.Key, info.State)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// addHost adds a standalone host, or a host of a cluster (created with its first host).
func (s *Sim) addHost(ctx context.Context, folder *object.Folder, clusters map[string]*object.ClusterComputeResource, h *Host) (*object.HostSystem, error) {
	spec := types.HostConnectSpec{HostName: h.Name}
	var task *object.Task
	var err error
	if h.Cluster == "" {
		task, err = folder.AddStandaloneHost(ctx, spec, true, nil, nil)
	} else {
		cl := clusters[h.Cluster]
		if cl == nil {
			if cl, err = folder.CreateCluster(ctx, h.Cluster, types.ClusterConfigSpecEx{}); err != nil {
				return nil, fmt.Errorf("create cluster %s: %w", h.Cluster, err)
			}
			clusters[h.Cluster] = cl
		}
		task, err = cl.AddHost(ctx, spec, true, nil, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("add host %s: %w", h.Name, err)
	}
	info, err := s.waitTask(task)
	if err != nil {
		return nil, fmt.Errorf("add host %s: %w", h.Name, err)
	}
	return object.NewHostSystem(folder.Client(), info.Result.(types.ManagedObjectReference)), nil
}

// addGPUs publishes a host's GPUs and vGPU offer in the properties vCenter reports them in,
// and wraps the host's environment browser so that QueryConfigTarget lists the profiles.
func (s *Sim) addGPUs(ref types.ManagedObjectReference, h *Host) {
	obj := s.model.Map().Get(ref).(*simulator.HostSystem)
	hs := &hostState{obj: obj, cfg: h, connection: string(types.HostSystemConnectionStateConnected)}
	for _, g := range h.GPUs {
		hs.gpus = append(hs.gpus, &gpuState{pciID: g.PCIID, device: g.Model, memMiB: g.MemoryMiB, mode: g.VGPUMode})
	}
	s.hosts[ref] = hs

	cfg := obj.Config
	cfg.SharedPassthruGpuTypes = nil
	cfg.SharedGpuCapabilities = nil
	for _, p := range h.Profiles {
		cfg.SharedPassthruGpuTypes = append(cfg.SharedPassthruGpuTypes, p.Name)
		cfg.SharedGpuCapabilities = append(cfg.SharedGpuCapabilities, types.HostSharedGpuCapabilities{
			Vgpu:                    p.Name,
			DiskSnapshotSupported:   true,
			MemorySnapshotSupported: p.SuspendSupported,
			SuspendSupported:        p.SuspendSupported,
			MigrateSupported:        false,
		})
	}
	graphics := &types.HostGraphicsConfig{
		HostDefaultGraphicsType:        string(types.HostGraphicsConfigGraphicsTypeSharedDirect),
		SharedPassthruAssignmentPolicy: h.Policy,
	}
	for _, g := range h.GPUs {
		graphics.DeviceType = append(graphics.DeviceType, types.HostGraphicsConfigDeviceType{
			DeviceId:     g.PCIID,
			GraphicsType: string(types.HostGraphicsConfigGraphicsTypeSharedDirect),
			VgpuMode:     g.VGPUMode,
		})
	}
	cfg.GraphicsConfig = graphics
	cfg.GraphicsInfo = hs.graphicsInfo()

	// Hardware is shared with vcsim's host template: replace the slice, never append in place.
	pci := append([]types.HostPciDevice(nil), obj.Hardware.PciDevice...)
	for _, g := range h.GPUs {
		pci = append(pci, pciDevice(g))
	}
	hw := *obj.Hardware
	hw.PciDevice = pci
	obj.Hardware = &hw

}

// wrapEnvBrowsers wraps each compute resource's environment browser so that
// QueryConfigTarget lists its hosts' vGPU profiles.
func (s *Sim) wrapEnvBrowsers() {
	done := map[types.ManagedObjectReference]bool{}
	for _, h := range s.hosts {
		parent := *h.obj.Parent
		if done[parent] {
			continue
		}
		done[parent] = true
		var cr *mo.ComputeResource
		switch obj := s.model.Map().Get(parent).(type) {
		case *mo.ComputeResource:
			cr = obj
		case *simulator.ClusterComputeResource:
			cr = &obj.ComputeResource
		}
		if cr == nil || cr.EnvironmentBrowser == nil {
			continue
		}
		if eb, ok := s.model.Map().Get(*cr.EnvironmentBrowser).(*simulator.EnvironmentBrowser); ok {
			s.model.Map().Put(&envBrowser{EnvironmentBrowser: eb, sim: s, hosts: cr.Host})
		}
	}
}

// graphicsInfo renders the host's GPUs as config.graphicsInfo: each GPU's vGPU mode and
// the VMs with a vGPU on it (a VM with vGPUs on several GPUs is listed on each). It
// returns fresh slices so readers holding an older value never see it change. Callers
// hold s.mu.
func (h *hostState) graphicsInfo() []types.HostGraphicsInfo {
	out := make([]types.HostGraphicsInfo, 0, len(h.gpus))
	for _, g := range h.gpus {
		out = append(out, types.HostGraphicsInfo{
			DeviceName:     g.device,
			VendorName:     "NVIDIA Corporation",
			PciId:          g.pciID,
			GraphicsType:   string(types.HostGraphicsInfoGraphicsTypeSharedDirect),
			VgpuMode:       g.mode,
			MemorySizeInKB: g.memMiB * 1024,
			Vm:             g.vmsOn(),
		})
	}
	return out
}

// pciDevice describes a GPU as hardware.pciDevice does; govc gpu.host.info lists devices
// with NVIDIA's vendor id and a non-zero subdevice id.
func pciDevice(g GPU) types.HostPciDevice {
	var domain, bus, slot, fn int
	_, _ = fmt.Sscanf(g.PCIID, "%x:%x:%x.%x", &domain, &bus, &slot, &fn)
	return types.HostPciDevice{
		Id:              g.PCIID,
		ClassId:         0x0302, // 3D controller
		Bus:             byte(bus),
		Slot:            byte(slot),
		Function:        byte(fn),
		VendorId:        0x10de,
		SubVendorId:     0x10de,
		VendorName:      "NVIDIA Corporation",
		DeviceId:        deviceID(g.Model),
		SubDeviceId:     0x118f,
		DeviceName:      g.Model,
		DeviceClassName: "3D controller",
	}
}

// deviceID is the PCI device id of common data-center GPUs (the PCI id database,
// pci-ids.ucw.cz), by the board the model names (boardOfModel); 0 for another model.
func deviceID(model string) int16 {
	board, _ := boardOfModel(model)
	switch board {
	case "p100":
		return 0x15f8 // GP100GL [Tesla P100 PCIe 16GB]
	case "p40":
		return 0x1b38
	case "t4":
		return 0x1eb8 // TU104GL [Tesla T4]
	case "a40":
		return 0x2235 // GA102GL [A40]
	case "a10":
		return 0x2236 // GA102GL [A10]
	case "a16", "a2":
		return 0x25b6 // GA107GL [A2 / A16]
	case "l4":
		return 0x27b8 // AD104GL [L4]
	case "l40":
		return 0x26b5 // AD102GL [L40]
	case "l40s":
		return 0x26b9 // AD102GL [L40S]
	case "m10":
		return 0x13bd // GM107GL [Tesla M10]
	case "m60":
		return 0x13f2 // GM204GL [Tesla M60]
	}
	return 0
}
