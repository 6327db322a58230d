package vsphere

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Properties read by Inventory: only what the planner needs, since config.hardware.device
// of every VM is already the bulk of the answer.
var (
	vmProps = []string{
		"name", "parent", "config.uuid", "runtime.host", "runtime.powerState", "config.hardware.device",
		"recentTask", "datastore",
	}
	hostProps = []string{
		"name", "config.graphicsInfo", "config.sharedPassthruGpuTypes",
		"config.sharedGpuCapabilities", "config.graphicsConfig",
		"parent", "runtime.connectionState", "runtime.inMaintenanceMode", "recentTask",
		"datastore", "hardware.pciDevice",
	}
	// taskProps tell a host's EnterMaintenanceMode_Task that is queued or running.
	hostTaskProps = []string{"info.descriptionId", "info.state"}
	folderProps   = []string{"name", "parent"}
	computeProps  = []string{"host", "environmentBrowser"}
)

// inventorySpec selects, from the datacenter down, every folder, VM, compute resource and
// host, so that one RetrievePropertiesEx returns the whole inventory. vCenter applies a
// traversal spec's type to subtypes (ClusterComputeResource is a ComputeResource); the
// property specs name both because vcsim matches them by exact type.
func inventorySpec(dc types.ManagedObjectReference) types.PropertyFilterSpec {
	sel := func(names ...string) []types.BaseSelectionSpec {
		out := make([]types.BaseSelectionSpec, len(names))
		for i, n := range names {
			out[i] = &types.SelectionSpec{Name: n}
		}
		return out
	}
	traverse := func(name, kind, path string, next ...string) *types.TraversalSpec {
		return &types.TraversalSpec{
			SelectionSpec: types.SelectionSpec{Name: name},
			Type:          kind,
			Path:          path,
			Skip:          types.NewBool(false),
			SelectSet:     sel(next...),
		}
	}
	return types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{
			Obj:  dc,
			Skip: types.NewBool(true),
			SelectSet: []types.BaseSelectionSpec{
				traverse("dcToVmFolder", "Datacenter", "vmFolder", "visitFolders"),
				traverse("dcToHostFolder", "Datacenter", "hostFolder", "visitFolders"),
				traverse("visitFolders", "Folder", "childEntity", "visitFolders", "crToHost", "vappToVm"),
				traverse("crToHost", "ComputeResource", "host", "hostToTask"),
				traverse("hostToTask", "HostSystem", "recentTask"),
				traverse("vappToVm", "VirtualApp", "vm"),
			},
		}},
		PropSet: []types.PropertySpec{
			{Type: "VirtualMachine", PathSet: vmProps},
			{Type: "HostSystem", PathSet: hostProps},
			{Type: "Folder", PathSet: folderProps},
			{Type: "ComputeResource", PathSet: computeProps},
			{Type: "ClusterComputeResource", PathSet: computeProps},
			{Type: "Task", PathSet: hostTaskProps},
		},
	}
}

// Inventory reads the datacenter's VMs and hosts in one RetrievePropertiesEx round trip
// (plus continuations for very large inventories); with vms, only what those VMs' pool
// needs is read in full (readScoped). The frame buffer of each host's profiles comes
// from the host's config target, queried once per host and session.
func (c *client) Inventory(ctx context.Context, vms ...string) (*inventory.Inventory, error) {
	if len(vms) > 0 {
		return c.readScoped(ctx, vms)
	}
	content, err := c.retrieve(ctx, inventorySpec(c.dc.ref))
	if err != nil {
		return nil, err
	}
	o, err := decodeInventory(content)
	if err != nil {
		return nil, err
	}
	return c.convert(ctx, o, nil), nil
}

// readPage is how many objects one answer of a read of vCenter carries at most
// (RetrieveOptions.MaxObjects); the rest come with ContinueRetrievePropertiesEx. An
// answer is decoded whole before its objects are built, so a read's transient memory is
// a page's, not the pool's or its datacenter's: at 64 hosts (1,280 VMs) the decoding of
// one answer was 14-20 MB of the manager's live heap at a switch's peak. The pages are
// of the one retrieval the first call started (vCenter "suspends the retrieval" at the
// maximum), and vCenter's own policy may page a read that asks for no maximum anyway.
var readPage int32 = 500

// retrieve runs one RetrievePropertiesEx of the filter specs, in pages of readPage
// objects, and merges what it returns per object (an object that two specs select comes
// back once per spec, not always in the same page).
func (c *client) retrieve(ctx context.Context, specs ...types.PropertyFilterSpec) (map[types.ManagedObjectReference]*types.ObjectContent, error) {
	pc := property.DefaultCollector(c.s.vc)
	res, err := pc.RetrieveProperties(ctx, types.RetrieveProperties{This: pc.Reference(), SpecSet: specs}, readPage)
	if err != nil {
		return nil, c.errorf(err, "read inventory")
	}
	out := map[types.ManagedObjectReference]*types.ObjectContent{}
	for i := range res.Returnval {
		oc := &res.Returnval[i]
		if len(oc.PropSet) == 0 && len(oc.MissingSet) > 0 {
			continue // an object that no longer exists (ReportMissingObjectsInResults)
		}
		if prev, ok := out[oc.Obj]; ok {
			prev.PropSet = append(prev.PropSet, oc.PropSet...)
			continue
		}
		out[oc.Obj] = oc
	}
	return out, nil
}

// inventoryObjects are the decoded objects of one inventory read.
type inventoryObjects struct {
	vms     []mo.VirtualMachine
	hosts   []mo.HostSystem
	folders []mo.Folder
	crs     []mo.ComputeResource
	tasks   []mo.Task
}

func decodeInventory(content map[types.ManagedObjectReference]*types.ObjectContent) (inventoryObjects, error) {
	var vmContent, hostContent, folderContent, crContent, taskContent []types.ObjectContent
	for _, oc := range content {
		switch oc.Obj.Type {
		case "VirtualMachine":
			vmContent = append(vmContent, *oc)
		case "HostSystem":
			hostContent = append(hostContent, *oc)
		case "Folder":
			folderContent = append(folderContent, *oc)
		case "ComputeResource", "ClusterComputeResource":
			crContent = append(crContent, *oc)
		case "Task":
			taskContent = append(taskContent, *oc)
		}
	}
	// Each slice has room for all its objects at once: mo.LoadObjectContent appends one
	// by one, and the copies a growing slice of 2-KB VMs left behind were megabytes of
	// garbage a read at 64 hosts.
	o := inventoryObjects{vms: make([]mo.VirtualMachine, 0, len(vmContent)), hosts: make([]mo.HostSystem, 0, len(hostContent)),
		folders: make([]mo.Folder, 0, len(folderContent)), crs: make([]mo.ComputeResource, 0, len(crContent)), tasks: make([]mo.Task, 0, len(taskContent))}
	for _, load := range []struct {
		content []types.ObjectContent
		dst     any
	}{{vmContent, &o.vms}, {hostContent, &o.hosts}, {folderContent, &o.folders}, {crContent, &o.crs}, {taskContent, &o.tasks}} {
		if len(load.content) == 0 {
			continue
		}
		if err := mo.LoadObjectContent(load.content, load.dst); err != nil {
			return o, fmt.Errorf("vsphere: decode inventory: %w", err)
		}
	}
	return o, nil
}

// convert turns a read into the planner's inventory. With detailed set, only those hosts
// are converted (the others were listed by name only); every VM is, those outside the
// detailed hosts with only their name, path, host and power state.
func (c *client) convert(ctx context.Context, o inventoryObjects, detailed map[types.ManagedObjectReference]bool) *inventory.Inventory {
	inv := &inventory.Inventory{}
	var gpusOf map[types.ManagedObjectReference][]string
	inv.Hosts, gpusOf = c.convertHosts(ctx, o, detailed)
	hostNames := map[types.ManagedObjectReference]string{}
	for _, h := range o.hosts {
		hostNames[h.Self] = h.Name
	}
	paths := folderPaths(c.dc, o.folders)
	for _, vm := range o.vms {
		inv.VMs = append(inv.VMs, convertVM(vm, hostNames, paths, gpusOf))
	}
	// Name, then id: VMs of the same name in different folders come in a stable order.
	sort.Slice(inv.VMs, func(i, j int) bool {
		a, b := inv.VMs[i], inv.VMs[j]
		return a.Name < b.Name || (a.Name == b.Name && a.Ref < b.Ref)
	})
	sort.Slice(inv.Hosts, func(i, j int) bool {
		a, b := inv.Hosts[i], inv.Hosts[j]
		return a.Name < b.Name || (a.Name == b.Name && a.Ref < b.Ref)
	})
	return inv
}

// convertHosts converts the detailed hosts (every host when detailed is nil), with their
// availability, datastores and vCenter's capacity for them, and says which GPUs (PCI
// ids) each VM runs on, as the hosts' GPUs tell.
func (c *client) convertHosts(ctx context.Context, o inventoryObjects, detailed map[types.ManagedObjectReference]bool) ([]inventory.Host, map[types.ManagedObjectReference][]string) {
	envBrowsers := map[types.ManagedObjectReference]types.ManagedObjectReference{}
	for _, cr := range o.crs {
		if cr.EnvironmentBrowser == nil {
			continue
		}
		for _, h := range cr.Host {
			envBrowsers[h] = *cr.EnvironmentBrowser
		}
	}
	vmNames := map[types.ManagedObjectReference]string{}
	for _, vm := range o.vms {
		vmNames[vm.Self] = vm.Name
	}
	var hosts []inventory.Host
	gpusOf := map[types.ManagedObjectReference][]string{}
	entering := enteringMaintenance(o.tasks)
	var asked []mo.HostSystem // the hosts whose capacity vCenter is asked for, as hosts
	var fps [][32]byte        // what the read saw of each of them (capacitymemo.go)
	onHost := vmsByHost(o.vms)
	for _, h := range o.hosts {
		if detailed != nil && !detailed[h.Self] {
			continue
		}
		host := c.host(ctx, h, envBrowsers[h.Self], vmNames)
		availability(&host, h, entering)
		asked = append(asked, h)
		host.Datastores = refValues(h.Datastore)
		for _, g := range host.GPUs {
			for _, ref := range gpuRefs(h, g.PCIID) {
				gpusOf[ref] = append(gpusOf[ref], g.PCIID)
			}
		}
		fps = append(fps, capacityFingerprint(host, h, onHost[h.Self]))
		hosts = append(hosts, host)
	}
	c.vcenterCapacities(ctx, hosts, asked, fps)
	return hosts, gpusOf
}

// convertVM converts one VM: its power state, host, folder path, GPUs, vGPU profiles
// (when its config was read), recent tasks and datastores.
func convertVM(vm mo.VirtualMachine, hostNames map[types.ManagedObjectReference]string, paths map[types.ManagedObjectReference]string,
	gpusOf map[types.ManagedObjectReference][]string) inventory.VM {
	v := inventory.VM{
		Name:       vm.Name,
		Ref:        vm.Self.Value,
		PowerState: inventory.PowerState(vm.Runtime.PowerState),
		GPUs:       gpusOf[vm.Self],
	}
	if len(v.GPUs) > 0 {
		v.GPU = v.GPUs[0]
	}
	if vm.Parent != nil {
		if p, ok := paths[*vm.Parent]; ok {
			v.Path = path.Join(p, vm.Name)
		}
	}
	if vm.Config != nil {
		v.UUID = vm.Config.Uuid
		v.Profile, v.VGPUs, v.Profiles = vgpuProfiles(vm.Config.Hardware.Device)
	}
	if vm.Runtime.Host != nil {
		v.Host = hostNames[*vm.Runtime.Host]
	}
	for _, t := range vm.RecentTask {
		v.RecentTasks = append(v.RecentTasks, t.Value)
	}
	v.Datastores = refValues(vm.Datastore)
	return v
}

// host converts one host: its NVIDIA GPUs with who runs on them, its vGPU profiles with
// frame buffer and suspend support, and its placement policy.
func (c *client) host(ctx context.Context, h mo.HostSystem, envBrowser types.ManagedObjectReference,
	vmNames map[types.ManagedObjectReference]string) inventory.Host {
	out := inventory.Host{Name: h.Name, Ref: h.Self.Value, Policy: inventory.PolicyPerformance}
	cfg := h.Config
	if cfg == nil {
		return out
	}
	if gc := cfg.GraphicsConfig; gc != nil && gc.SharedPassthruAssignmentPolicy == inventory.PolicyConsolidation {
		out.Policy = inventory.PolicyConsolidation
	}
	ids := pciDeviceIDs(h)
	for _, g := range cfg.GraphicsInfo {
		if !isVGPUCapable(g) {
			continue
		}
		gpu := inventory.GPU{PCIID: g.PciId, Device: g.DeviceName, DeviceID: ids[g.PciId], MemoryMiB: g.MemorySizeInKB / 1024, Mode: vgpuMode(g, cfg.GraphicsConfig)}
		for _, ref := range g.Vm {
			if name, ok := vmNames[ref]; ok {
				gpu.VMs = append(gpu.VMs, name)
			}
		}
		sort.Strings(gpu.VMs)
		out.GPUs = append(out.GPUs, gpu)
	}
	sort.Slice(out.GPUs, func(i, j int) bool { return out.GPUs[i].PCIID < out.GPUs[j].PCIID })

	suspend := map[string]bool{}
	for _, capability := range cfg.SharedGpuCapabilities {
		suspend[capability.Vgpu] = capability.SuspendSupported
	}
	var fbs map[string]int64
	if len(cfg.SharedPassthruGpuTypes) > 0 {
		fbs = c.s.frameBuffers(ctx, h.Self, envBrowser)
	}
	for _, name := range cfg.SharedPassthruGpuTypes {
		fb, ok := fbs[name]
		if !ok {
			var err error
			if fb, err = inventory.ProfileFrameBufferMiB(name); err != nil {
				// Fail safe: a profile of unknown size is one the planner must not use.
				c.log.Info("Ignoring vGPU profile of unknown frame buffer size", "host", h.Name, "profile", name, "err", err.Error())
				continue
			}
		}
		out.Profiles = append(out.Profiles, inventory.Profile{Name: name, FrameBufferMiB: fb, SuspendSupported: suspend[name]})
	}
	return out
}

// pciDeviceIDs are the PCI device ids of the host's NVIDIA devices by PCI address
// (hardware.pciDevice[].id, such as 0000:3b:00.0, the address graphicsInfo[].pciId
// names): with the device name they tell a GPU's board (inventory.BoardOf).
func pciDeviceIDs(h mo.HostSystem) map[string]uint16 {
	out := map[string]uint16{}
	if h.Hardware == nil {
		return out
	}
	for _, d := range h.Hardware.PciDevice {
		if uint16(d.VendorId) == nvidiaVendorID {
			out[d.Id] = uint16(d.DeviceId)
		}
	}
	return out
}

// nvidiaVendorID is NVIDIA's PCI vendor id.
const nvidiaVendorID = 0x10de

// vgpuMode is the GPU's vGPU mode: graphicsInfo[].vgpuMode, else the mode the host's
// graphicsConfig sets for the device (deviceType[].deviceId is the PCI id), else ""
// (hosts before vSphere 8.0.3: same-size).
func vgpuMode(g types.HostGraphicsInfo, gc *types.HostGraphicsConfig) string {
	if g.VgpuMode != "" {
		return g.VgpuMode
	}
	if gc != nil {
		for _, dt := range gc.DeviceType {
			if dt.DeviceId == g.PciId && dt.VgpuMode != "" {
				return dt.VgpuMode
			}
		}
	}
	return ""
}

// enteringMaintenance are the EnterMaintenanceMode_Tasks that are queued or running,
// among the tasks of the hosts' recentTask read in the inventory's batch.
func enteringMaintenance(tasks []mo.Task) map[types.ManagedObjectReference]bool {
	out := map[types.ManagedObjectReference]bool{}
	for _, t := range tasks {
		if t.Info.DescriptionId == "HostSystem.enterMaintenanceMode" &&
			(t.Info.State == types.TaskInfoStateQueued || t.Info.State == types.TaskInfoStateRunning) {
			out[t.Self] = true
		}
	}
	return out
}

// availability fills in whether new work may go to the host: its connection state,
// maintenance mode, an EnterMaintenanceMode_Task under way among its recentTask
// (entering, by task), and its compute resource.
func availability(out *inventory.Host, h mo.HostSystem, entering map[types.ManagedObjectReference]bool) {
	out.ConnectionState = string(h.Runtime.ConnectionState)
	out.InMaintenance = h.Runtime.InMaintenanceMode
	for _, t := range h.RecentTask {
		if entering[t] {
			out.EnteringMaintenance = true
		}
	}
	if h.Parent != nil {
		out.ComputeResource = h.Parent.Value
	}
}

// isVGPUCapable keeps NVIDIA devices that can host vGPUs (sharedDirect), not the host's
// basic graphics adapter.
func isVGPUCapable(g types.HostGraphicsInfo) bool {
	return g.GraphicsType == string(types.HostGraphicsInfoGraphicsTypeSharedDirect) ||
		strings.Contains(strings.ToUpper(g.VendorName), "NVIDIA")
}

func gpuRefs(h mo.HostSystem, pciID string) []types.ManagedObjectReference {
	for _, g := range h.Config.GraphicsInfo {
		if g.PciId == pciID {
			return g.Vm
		}
	}
	return nil
}

// frameBuffers reads the host's vGPU profile sizes from its config target, once per host
// and session: they change only with the host's NVIDIA driver. A failed query is logged
// and retried next time; the caller falls back to the size in the profile name.
func (s *vcSession) frameBuffers(ctx context.Context, host, envBrowser types.ManagedObjectReference) map[string]int64 {
	s.mu.Lock()
	fbs, ok := s.fbs[host]
	s.mu.Unlock()
	if ok || envBrowser.Value == "" {
		return fbs
	}
	target, err := object.NewEnvironmentBrowser(s.vc, envBrowser).QueryConfigTarget(ctx, object.NewHostSystem(s.vc, host))
	if err != nil {
		s.log.Info("Could not read vGPU profile sizes; using the sizes in the profile names", "host", host.Value, "err", err.Error())
		return nil
	}
	fbs = map[string]int64{}
	for _, p := range target.VgpuProfileInfo {
		if p.FbSizeInGib > 0 {
			fbs[p.ProfileName] = p.FbSizeInGib * 1024
		}
	}
	s.mu.Lock()
	s.fbs[host] = fbs
	s.mu.Unlock()
	return fbs
}

// folderPaths computes each folder's inventory path from the folders' names and parents.
func folderPaths(dc datacenter, folders []mo.Folder) map[types.ManagedObjectReference]string {
	byRef := map[types.ManagedObjectReference]mo.Folder{}
	for _, f := range folders {
		byRef[f.Self] = f
	}
	dcPath := dc.path
	if dcPath == "" {
		dcPath = "/" + dc.name
	}
	paths := map[types.ManagedObjectReference]string{}
	var resolve func(ref types.ManagedObjectReference, depth int) (string, bool)
	resolve = func(ref types.ManagedObjectReference, depth int) (string, bool) {
		if p, ok := paths[ref]; ok {
			return p, true
		}
		f, ok := byRef[ref]
		if !ok || f.Parent == nil || depth > 64 {
			return "", false
		}
		var parent string
		if *f.Parent == dc.ref {
			parent = dcPath
		} else if parent, ok = resolve(*f.Parent, depth+1); !ok {
			return "", false
		}
		p := path.Join(parent, f.Name)
		paths[ref] = p
		return p, true
	}
	for ref := range byRef {
		resolve(ref, 0)
	}
	return paths
}

// vgpuProfile is the profile of the VM's first vGPU device; empty when it has none.
func vgpuProfile(devices []types.BaseVirtualDevice) string {
	for _, d := range vgpuDevices(devices) {
		if b, ok := d.GetVirtualDevice().Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok && b.Vgpu != "" {
			return b.Vgpu
		}
	}
	return ""
}

// vgpuProfiles reads the VM's vGPU devices: the first one's profile, how many there
// are, and the profile of each when they differ (nil when all are the first's), so the
// planner reconfigures a VM whose vGPUs are not all of the worker's profile.
func vgpuProfiles(devices []types.BaseVirtualDevice) (first string, n int, each []string) {
	var all []string
	mixed := false
	for _, d := range vgpuDevices(devices) {
		b := d.GetVirtualDevice().Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo)
		all = append(all, b.Vgpu)
		mixed = mixed || b.Vgpu != all[0]
	}
	first = vgpuProfile(devices)
	if first == "" {
		return "", 0, nil
	}
	if mixed {
		each = all
	}
	return first, len(all), each
}

// vgpuDevices are the VM's PCI passthrough devices backed by a vGPU (VMIOP) profile.
func vgpuDevices(devices []types.BaseVirtualDevice) []types.BaseVirtualDevice {
	var out []types.BaseVirtualDevice
	for _, d := range devices {
		if p, ok := d.(*types.VirtualPCIPassthrough); ok {
			if _, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok {
				out = append(out, d)
			}
		}
	}
	return out
}

// refValues are the ids of refs, sorted.
func refValues(refs []types.ManagedObjectReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Value)
	}
	sort.Strings(out)
	return out
}
