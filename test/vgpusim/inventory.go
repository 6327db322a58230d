package vgpusim

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/vmware/govmomi/vim25/types"
	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/inventory"
)

// DefaultDatacenter names the datacenter when the inventory does not.
const DefaultDatacenter = "dc1"

// Inventory is what the simulator serves: one datacenter with standalone ESXi hosts,
// their NVIDIA GPUs and the VMs registered on them. It is read from YAML (see
// docs/vgpusim.md for every field).
type Inventory struct {
	// Datacenter is the datacenter's name; DefaultDatacenter when empty.
	Datacenter string `json:"datacenter,omitempty"`
	// Hosts are the ESXi hosts, each a standalone host in the datacenter's host folder.
	Hosts []Host `json:"hosts"`
	// VMs are the virtual machines, created in the inventory's order.
	VMs []VM `json:"vms,omitempty"`
}

// Host is one ESXi host with GPUs.
type Host struct {
	// Name is the host's name, such as esx-01.
	Name string `json:"name"`
	// Policy is the vGPU placement policy: performance (default) or consolidation.
	Policy string `json:"policy,omitempty"`
	// VGPUMode is the time-sliced vGPU mode of the host's GPUs: sameSize (default) or
	// mixedSize (vSphere 8.0 U3 and later). A GPU's own vgpuMode overrides it.
	VGPUMode string `json:"vgpuMode,omitempty"`
	// Cluster names the cluster the host belongs to; empty for a standalone host. VMs
	// may be powered on on any host of their cluster (PowerOnVM_Task's host argument).
	Cluster string `json:"cluster,omitempty"`
	// InMaintenanceMode starts the host in maintenance mode: no VM powers on there.
	InMaintenanceMode bool `json:"inMaintenanceMode,omitempty"`
	// ConnectionState is runtime.connectionState: connected (default), disconnected or
	// notResponding. VMs on a host that is not connected cannot be powered on.
	ConnectionState string `json:"connectionState,omitempty"`
	// GPUs are the host's physical NVIDIA GPUs.
	GPUs []GPU `json:"gpus,omitempty"`
	// Profiles are the vGPU profiles the host offers.
	Profiles []Profile `json:"profiles,omitempty"`
	// Datastores are the names of the datastores the host mounts; hosts listing the
	// same name share it. Default: [datastore1], which every such host shares.
	Datastores []string `json:"datastores,omitempty"`
}

// GPU is one physical GPU. Give its memory in MiB or GiB, not both.
type GPU struct {
	// Model is the device name, such as "Tesla P100".
	Model string `json:"model"`
	// MemoryMiB is the GPU's frame buffer in MiB.
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MemoryGiB is the GPU's frame buffer in GiB.
	MemoryGiB int64 `json:"memoryGiB,omitempty"`
	// PCIID is the GPU's PCI address, such as 0000:3b:00.0.
	PCIID string `json:"pciId"`
	// VGPUMode is sameSize or mixedSize; the host's vgpuMode when empty.
	VGPUMode string `json:"vgpuMode,omitempty"`
}

// Profile is a vGPU profile a host offers.
type Profile struct {
	// Name is the profile, such as grid_p100-4q.
	Name string `json:"name"`
	// FrameBufferGiB is one vGPU's frame buffer; parsed from the name when zero.
	FrameBufferGiB int64 `json:"frameBufferGiB,omitempty"`
	// SuspendSupported tells whether VMs with this profile may be suspended.
	SuspendSupported bool `json:"suspendSupported,omitempty"`
	// MixedSizeMax caps how many vGPUs of this profile one GPU runs in mixed-size mode,
	// where NVIDIA's maximum is lower than in same-size mode for some types (NVIDIA vGPU
	// user guide, "vGPUs in mixed-size mode"); 0 means only the placement slots limit it.
	MixedSizeMax int `json:"mixedSizeMax,omitempty"`
}

// VM is one virtual machine.
type VM struct {
	// Name of the VM, unique in the inventory.
	Name string `json:"name"`
	// Host is the name of the host the VM is registered on.
	Host string `json:"host"`
	// Profile is the vGPU profile of the VM's vGPU devices; empty for no vGPU.
	Profile string `json:"profile,omitempty"`
	// VGPUs is how many vGPU devices of Profile the VM has; 1 when Profile is set.
	VGPUs int `json:"vgpus,omitempty"`
	// Profiles, instead of Profile and VGPUs, gives each vGPU device its own profile
	// (NVIDIA Multi-vGPU allows different sizes of one board and series in a VM), such
	// as [grid_a100-40c, grid_a100-20c].
	Profiles []string `json:"profiles,omitempty"`
	// PowerState is poweredOn, poweredOff (default) or suspended.
	PowerState string `json:"powerState,omitempty"`
	// BIOSUUID is config.uuid; derived from the name when empty, so it is stable.
	BIOSUUID string `json:"biosUUID,omitempty"`
	// Datastore is the datastore the VM's files are on; one of its host's, the host's
	// first by default. A host that does not mount it cannot power the VM on.
	Datastore string `json:"datastore,omitempty"`
	// Folder is a path below the datacenter's vm folder, such as gpu/workers.
	Folder string `json:"folder,omitempty"`
	// Tags are vSphere tags attached to the VM, each as category/name (the category and
	// tag are made when missing), served by the REST API as vCenter's are.
	Tags []string `json:"tags,omitempty"`
	// MemoryMiB is the VM's memory; 4096 when zero.
	MemoryMiB int32 `json:"memoryMiB,omitempty"`
	// CPUs is the VM's number of vCPUs; 2 when zero.
	CPUs int32 `json:"cpus,omitempty"`
	// Placements are a history's doing: the placement IDs (in GB, NVIDIA's "Supported
	// Placement IDs") at which the VM's vGPU devices start on a GPU in mixed-size mode,
	// in device order. NVIDIA's vGPU manager places a vGPU when it starts, so after
	// other vGPUs came and went a running vGPU may sit at any listed ID, and vSphere does
	// not report which. Each device starts at the lowest free listed ID at or above its
	// entry, else (none free above) at the lowest free one; without an entry, at the
	// lowest free one. The GPU is chosen as before: the entry only moves the vGPU on it.
	Placements []int `json:"placements,omitempty"`
}

// LoadFile reads an inventory from a YAML file.
func LoadFile(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	inv, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	return inv, nil
}

// Load parses an inventory from YAML, rejects unknown fields, fills defaults and
// validates it, so that a typo fails here rather than as a puzzling simulator state.
func Load(data []byte) (*Inventory, error) {
	var inv Inventory
	if err := yaml.UnmarshalStrict(data, &inv); err != nil {
		return nil, fmt.Errorf("parse inventory: %w", err)
	}
	if err := inv.normalize(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// uuidNamespace makes derived BIOS UUIDs stable across runs.
var uuidNamespace = uuid.MustParse("5b0e6c0a-3f59-4d6e-9a51-6d3c1f0a9e11")

// normalize fills defaults and validates; it is idempotent.
func (inv *Inventory) normalize() error {
	if inv.Datacenter == "" {
		inv.Datacenter = DefaultDatacenter
	}
	if len(inv.Hosts) == 0 {
		return errors.New("inventory has no hosts")
	}
	var errs []error
	hosts := map[string]*Host{}
	for i := range inv.Hosts {
		h := &inv.Hosts[i]
		if h.Name == "" {
			errs = append(errs, fmt.Errorf("hosts[%d]: name is required", i))
			continue
		}
		if hosts[h.Name] != nil {
			errs = append(errs, fmt.Errorf("host %s: listed twice", h.Name))
		}
		hosts[h.Name] = h
		errs = append(errs, h.normalize()...)
	}
	vms := map[string]bool{}
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if vm.Name == "" {
			errs = append(errs, fmt.Errorf("vms[%d]: name is required", i))
			continue
		}
		if vms[vm.Name] {
			errs = append(errs, fmt.Errorf("VM %s: listed twice", vm.Name))
		}
		vms[vm.Name] = true
		errs = append(errs, vm.normalize(hosts)...)
	}
	return errors.Join(errs...)
}

// normalize fills a host's defaults (datastore, policy, state) and validates them, then
// its GPUs and profiles.
func (h *Host) normalize() []error {
	var errs []error
	if len(h.Datastores) == 0 {
		h.Datastores = []string{"datastore1"}
	}
	switch h.Policy {
	case "":
		h.Policy = inventory.PolicyPerformance
	case inventory.PolicyPerformance, inventory.PolicyConsolidation:
	default:
		errs = append(errs, fmt.Errorf("host %s: policy %q is neither %s nor %s",
			h.Name, h.Policy, inventory.PolicyPerformance, inventory.PolicyConsolidation))
	}
	errs = append(errs, h.normalizeState()...)
	errs = append(errs, h.normalizeGPUs()...)
	return append(errs, h.normalizeProfiles()...)
}

// normalizeGPUs checks the GPUs' PCI ids and frame buffer and fills their model and
// vGPU mode (the host's when not given).
func (h *Host) normalizeGPUs() []error {
	var errs []error
	pci := map[string]bool{}
	for j := range h.GPUs {
		g := &h.GPUs[j]
		switch {
		case g.PCIID == "":
			errs = append(errs, fmt.Errorf("host %s: gpus[%d]: pciId is required", h.Name, j))
		case pci[g.PCIID]:
			errs = append(errs, fmt.Errorf("host %s: GPU %s listed twice", h.Name, g.PCIID))
		}
		pci[g.PCIID] = true
		switch {
		case g.MemoryMiB > 0 && g.MemoryGiB > 0 && g.MemoryMiB != g.MemoryGiB*1024:
			errs = append(errs, fmt.Errorf("host %s: GPU %s: memoryMiB and memoryGiB disagree", h.Name, g.PCIID))
		case g.MemoryMiB <= 0 && g.MemoryGiB <= 0:
			errs = append(errs, fmt.Errorf("host %s: GPU %s: memoryMiB or memoryGiB is required", h.Name, g.PCIID))
		case g.MemoryMiB <= 0:
			g.MemoryMiB = g.MemoryGiB * 1024
		}
		if g.Model == "" {
			g.Model = "NVIDIA GPU"
		}
		if g.VGPUMode == "" {
			g.VGPUMode = h.VGPUMode
		}
		if g.VGPUMode != modeSameSize && g.VGPUMode != modeMixedSize {
			errs = append(errs, fmt.Errorf("host %s: GPU %s: vgpuMode %q is neither %s nor %s", h.Name, g.PCIID, g.VGPUMode, modeSameSize, modeMixedSize))
		}
	}
	return errs
}

// normalizeProfiles checks the profiles' names and fills the frame buffer a profile's
// name implies when not given.
func (h *Host) normalizeProfiles() []error {
	var errs []error
	profiles := map[string]bool{}
	for j := range h.Profiles {
		p := &h.Profiles[j]
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("host %s: profiles[%d]: name is required", h.Name, j))
			continue
		}
		if profiles[p.Name] {
			errs = append(errs, fmt.Errorf("host %s: profile %s listed twice", h.Name, p.Name))
		}
		profiles[p.Name] = true
		if p.FrameBufferGiB <= 0 {
			mib, err := inventory.ProfileFrameBufferMiB(p.Name)
			if err != nil {
				errs = append(errs, fmt.Errorf("host %s: profile %s: give frameBufferGiB: %w", h.Name, p.Name, err))
				continue
			}
			p.FrameBufferGiB = mib / 1024
		}
	}
	return errs
}

// normalize fills a VM's defaults (profile and vGPU count, datastore, power state, BIOS
// UUID, size) and validates it against its host among hosts.
func (vm *VM) normalize(hosts map[string]*Host) []error {
	var errs []error
	if len(vm.Profiles) > 0 {
		if (vm.Profile != "" && vm.Profile != vm.Profiles[0]) || (vm.VGPUs != 0 && vm.VGPUs != len(vm.Profiles)) {
			errs = append(errs, fmt.Errorf("VM %s: profiles replaces profile and vgpus: set only profiles", vm.Name))
		}
		vm.Profile, vm.VGPUs = vm.Profiles[0], len(vm.Profiles)
		for _, p := range vm.Profiles[1:] {
			if !sameSeries(p, vm.Profile) {
				errs = append(errs, fmt.Errorf("VM %s: profiles %s and %s are not of the same board and series", vm.Name, vm.Profile, p))
			}
			if h := hosts[vm.Host]; h != nil && !h.offers(p) {
				errs = append(errs, fmt.Errorf("VM %s: host %s does not offer profile %s", vm.Name, vm.Host, p))
			}
		}
	}
	h := hosts[vm.Host]
	switch {
	case h == nil:
	case vm.Datastore == "":
		vm.Datastore = h.Datastores[0]
	case !slices.Contains(h.Datastores, vm.Datastore):
		errs = append(errs, fmt.Errorf("VM %s: datastore %s is not one of host %s's (%s)", vm.Name, vm.Datastore, h.Name, strings.Join(h.Datastores, ", ")))
	}
	if h == nil {
		errs = append(errs, fmt.Errorf("VM %s: host %q is not in the inventory", vm.Name, vm.Host))
	} else if vm.Profile != "" && !h.offers(vm.Profile) {
		errs = append(errs, fmt.Errorf("VM %s: host %s does not offer profile %s", vm.Name, vm.Host, vm.Profile))
	}
	switch {
	case vm.VGPUs < 0:
		errs = append(errs, fmt.Errorf("VM %s: vgpus %d is negative", vm.Name, vm.VGPUs))
	case vm.VGPUs > 0 && vm.Profile == "":
		errs = append(errs, fmt.Errorf("VM %s: vgpus %d needs a profile", vm.Name, vm.VGPUs))
	case vm.VGPUs == 0 && vm.Profile != "":
		vm.VGPUs = 1
	}
	if h != nil && h.InMaintenanceMode && vm.PowerState == string(inventory.PoweredOn) {
		errs = append(errs, fmt.Errorf("VM %s: host %s is in maintenance mode, where no VM runs", vm.Name, vm.Host))
	}
	switch inventory.PowerState(vm.PowerState) {
	case "":
		vm.PowerState = string(inventory.PoweredOff)
	case inventory.PoweredOn, inventory.PoweredOff, inventory.Suspended:
	default:
		errs = append(errs, fmt.Errorf("VM %s: powerState %q is not poweredOn, poweredOff or suspended", vm.Name, vm.PowerState))
	}
	for i, id := range vm.Placements {
		if id < 0 {
			errs = append(errs, fmt.Errorf("VM %s: placements[%d] %d is negative", vm.Name, i, id))
		}
	}
	if vm.BIOSUUID == "" {
		vm.BIOSUUID = uuid.NewSHA1(uuidNamespace, []byte(vm.Name)).String()
	} else if _, err := uuid.Parse(vm.BIOSUUID); err != nil {
		errs = append(errs, fmt.Errorf("VM %s: biosUUID: %w", vm.Name, err))
	}
	vm.Folder = strings.Trim(vm.Folder, "/")
	for i, t := range vm.Tags {
		if _, _, err := splitTag(t); err != nil {
			errs = append(errs, fmt.Errorf("VM %s: tags[%d]: %w", vm.Name, i, err))
		}
	}
	if vm.MemoryMiB <= 0 {
		vm.MemoryMiB = 4096
	}
	if vm.CPUs <= 0 {
		vm.CPUs = 2
	}
	return errs
}

func (h *Host) offers(profile string) bool {
	for _, p := range h.Profiles {
		if p.Name == profile {
			return true
		}
	}
	return false
}

// normalizeState fills the host's vGPU mode and availability defaults and checks them.
func (h *Host) normalizeState() []error {
	var errs []error
	if h.VGPUMode == "" {
		h.VGPUMode = modeSameSize
	}
	if h.VGPUMode != modeSameSize && h.VGPUMode != modeMixedSize {
		errs = append(errs, fmt.Errorf("host %s: vgpuMode %q is neither %s nor %s", h.Name, h.VGPUMode, modeSameSize, modeMixedSize))
	}
	switch h.ConnectionState {
	case "":
		h.ConnectionState = string(types.HostSystemConnectionStateConnected)
	case string(types.HostSystemConnectionStateConnected), string(types.HostSystemConnectionStateDisconnected),
		string(types.HostSystemConnectionStateNotResponding):
	default:
		errs = append(errs, fmt.Errorf("host %s: connectionState %q is not connected, disconnected or notResponding", h.Name, h.ConnectionState))
	}
	return errs
}

// profile returns the host's offer of the named profile.
func (h *Host) profile(name string) (Profile, bool) {
	for _, p := range h.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// frameBufferMiB is one vGPU's frame buffer; the 0Q/0B types (0 GiB) have 512 MiB.
func (p Profile) frameBufferMiB() int64 {
	if p.FrameBufferGiB <= 0 {
		return 512
	}
	return p.FrameBufferGiB * 1024
}
