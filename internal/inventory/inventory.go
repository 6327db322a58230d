// Package inventory holds the observed vSphere state that the planner reasons about and
// the vSphere layer reports: VMs, hosts, their physical GPUs and the vGPU profiles they
// offer. It is plain data with no client in it, so planning stays a pure function.
package inventory

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// PowerState is a VM's runtime.powerState.
type PowerState string

// Power states as vSphere names them.
const (
	PoweredOn  PowerState = "poweredOn"
	PoweredOff PowerState = "poweredOff"
	Suspended  PowerState = "suspended"
)

// Placement policies (HostGraphicsConfig.sharedPassthruAssignmentPolicy).
const (
	// PolicyPerformance spreads vGPUs over the physical GPUs (vSphere's default).
	PolicyPerformance = "performance"
	// PolicyConsolidation fills one physical GPU before the next.
	PolicyConsolidation = "consolidation"
)

// VM is one virtual machine.
type VM struct {
	// Name is the VM's name; names are unique within the datacenter for gpupool's purposes.
	Name string
	// Path is the inventory path, such as /dc1/vm/gpu/worker-1.
	Path string
	// Ref is the managed object id, such as vm-42.
	Ref string
	// UUID is the BIOS UUID (config.uuid), which Node.spec.providerID carries.
	UUID string
	// Host is the name of the ESXi host the VM is registered on.
	Host string
	// PowerState is the VM's power state.
	PowerState PowerState
	// Profile is the vGPU profile of the VM's (first) vGPU device; empty when it has none.
	Profile string
	// Profiles are the profiles of all the VM's vGPU devices, in device order, when they
	// are not all Profile (NVIDIA lets one VM carry vGPUs of different sizes of one
	// series); nil when every device carries Profile. See DeviceProfiles and Is.
	Profiles []string
	// VGPUs is the number of the VM's vGPU devices (VirtualPCIPassthrough with a VMIOP
	// backing). 0 with a Profile means 1: see VGPUCount.
	VGPUs int
	// GPU is the PCI id of the physical GPU the (first) vGPU runs on; empty unless
	// powered on. GPUs lists them all; GPU is GPUs[0], kept for callers that show one.
	GPU string
	// GPUs are the PCI ids of the GPUs whose graphicsInfo[].vm lists the VM, sorted.
	GPUs []string
	// RecentTasks are the ids of the VM's recent tasks (recentTask), which tell a task
	// that was started before a crash from one started after.
	RecentTasks []string
	// Datastores are the managed object ids of the datastores the VM's files are on
	// (VirtualMachine.datastore): a host it is powered on on must mount them all.
	Datastores []string
}

// VGPUCount is how many vGPUs of Profile the VM has: 0 without a profile, else VGPUs,
// at least 1 (inventories that predate VGPUs set only Profile).
func (vm *VM) VGPUCount() int {
	switch {
	case vm.Profile == "":
		return 0
	case len(vm.Profiles) > 0:
		return len(vm.Profiles)
	}
	return max(vm.VGPUs, 1)
}

// DeviceProfiles is the profile of each of the VM's vGPU devices: Profiles, else
// VGPUCount times Profile.
func (vm *VM) DeviceProfiles() []string {
	if len(vm.Profiles) > 0 {
		return vm.Profiles
	}
	out := make([]string, vm.VGPUCount())
	for i := range out {
		out[i] = vm.Profile
	}
	return out
}

// Is tells whether the VM has exactly n vGPUs, all of the profile: a VM whose devices
// differ is never what a worker asks for, and must be reconfigured.
func (vm *VM) Is(profile string, n int) bool {
	devs := vm.DeviceProfiles()
	if len(devs) != n {
		return false
	}
	for _, p := range devs {
		if p != profile {
			return false
		}
	}
	return true
}

// Describe writes the VM's vGPUs: "none", "grid_a100-40c", "2 x grid_a100-40c", or
// "grid_a100-40c, grid_a100-20c" when the devices differ.
func (vm *VM) Describe() string {
	switch {
	case vm.Profile == "":
		return "none"
	case len(vm.Profiles) > 0:
		return strings.Join(vm.Profiles, ", ")
	case vm.VGPUCount() == 1:
		return vm.Profile
	}
	return fmt.Sprintf("%d x %s", vm.VGPUCount(), vm.Profile)
}

// Profile is a vGPU profile as a host offers it.
type Profile struct {
	// Name, such as grid_p100-4q.
	Name string
	// FrameBufferMiB is the frame buffer of one vGPU of this profile.
	FrameBufferMiB int64
	// SuspendSupported tells whether VMs with this profile can be suspended.
	SuspendSupported bool
}

// GPU is one physical GPU of a host.
type GPU struct {
	// PCIID is the GPU's PCI address, such as 0000:3b:00.0.
	PCIID string
	// Device is the model name (graphicsInfo[].deviceName), such as "Tesla P100".
	Device string
	// DeviceID is the PCI device id (hardware.pciDevice[].deviceId of the device with
	// the GPU's PCI address), such as 0x27b8 for an NVIDIA L4; 0 when not read. With
	// Device it tells the GPU's board (BoardOf).
	DeviceID uint16
	// MemoryMiB is the GPU's frame buffer.
	MemoryMiB int64
	// VMs are the names of the VMs whose vGPU runs on this GPU now.
	VMs []string
	// Mode is HostGraphicsInfo.vgpuMode (vSphere API 8.0.3): ModeSameSize, ModeMixedSize,
	// ModeMIG or ModeNone. Empty, as hosts before 8.0.3 report it, is same-size.
	Mode string
}

// vGPU modes of a GPU (HostGraphicsInfo.vgpuMode).
const (
	// ModeSameSize: every time-sliced vGPU on the GPU has the same profile (NVIDIA's
	// equal-size mode, the default).
	ModeSameSize = "sameSize"
	// ModeMixedSize: time-sliced vGPUs of different sizes share the GPU, placed at
	// placement IDs (see Occupancy).
	ModeMixedSize = "mixedSize"
	// ModeMIG: the GPU runs MIG-backed vGPUs; gpupool treats it as same-size.
	ModeMIG = "multiInstanceGpu"
	// ModeNone: not a vGPU GPU mode (vSphere's "not applicable").
	ModeNone = "none"
)

// Mixed tells whether the GPU is in mixed-size mode.
func (g GPU) Mixed() bool { return g.Mode == ModeMixedSize }

// Host is one ESXi host.
type Host struct {
	// Name of the host.
	Name string
	// Ref is the managed object id, such as host-21.
	Ref string
	// Policy is PolicyPerformance or PolicyConsolidation.
	Policy string
	// GPUs are the host's physical NVIDIA GPUs.
	GPUs []GPU
	// Profiles are the vGPU profiles the host offers.
	Profiles []Profile
	// ComputeResource is the managed object id of the host's cluster or standalone
	// compute resource: a powered-off VM may be powered on on another host of it.
	ComputeResource string
	// ConnectionState is runtime.connectionState: connected, disconnected or
	// notResponding; empty is read as connected.
	ConnectionState string
	// InMaintenance is runtime.inMaintenanceMode.
	InMaintenance bool
	// EnteringMaintenance: an EnterMaintenanceMode_Task of the host is queued or running.
	EnteringMaintenance bool
	// Datastores are the managed object ids of the datastores the host mounts
	// (HostSystem.datastore).
	Datastores []string
	// VCenterCapacity is vCenter's own count of the host's vGPU room (vSphere 9.0's
	// DirectPathProfileManager.QueryCapacity); its zero value: vCenter does not offer it.
	VCenterCapacity VCenterCapacity
}

// Mounts tells whether the host mounts every one of the datastores. A VM that reports
// none (an inventory that predates Datastores) is taken to need none.
func (h *Host) Mounts(datastores []string) bool {
	for _, ds := range datastores {
		if !slices.Contains(h.Datastores, ds) {
			return false
		}
	}
	return true
}

// Connection states (HostSystemConnectionState).
const (
	Connected     = "connected"
	Disconnected  = "disconnected"
	NotResponding = "notResponding"
)

// Unavailable says why no new work may go to the host: "" when it is available, else
// "is in maintenance mode", "is entering maintenance mode", "is disconnected" or "is
// not responding".
func (h *Host) Unavailable() string {
	switch {
	case h.ConnectionState == Disconnected:
		return "is disconnected"
	case h.ConnectionState == NotResponding:
		return "is not responding"
	case h.ConnectionState != "" && h.ConnectionState != Connected:
		return "is " + h.ConnectionState
	case h.InMaintenance:
		return "is in maintenance mode"
	case h.EnteringMaintenance:
		return "is entering maintenance mode"
	}
	return ""
}

// Reachable tells whether vCenter can act on the host's VMs at all (it is connected,
// perhaps in maintenance mode): a powered-off VM of a host in maintenance mode can still
// be reconfigured and powered on on another host of its compute resource.
func (h *Host) Reachable() bool {
	return h.ConnectionState == "" || h.ConnectionState == Connected
}

// Inventory is a snapshot of the VMs and hosts of one datacenter.
type Inventory struct {
	VMs   []VM
	Hosts []Host
}

// FindVM returns the VM whose inventory path is id, else the VM whose name is id. A name
// that several VMs carry (in different folders) finds none: see Ambiguous.
func (inv *Inventory) FindVM(id string) (*VM, bool) {
	var found *VM
	n := 0
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if vm.Path != "" && vm.Path == id {
			return vm, true
		}
		if vm.Name == id {
			if found == nil {
				found = vm
			}
			n++
		}
	}
	if n != 1 {
		return nil, false
	}
	return found, true
}

// Ambiguous returns the inventory paths of the VMs named id, when id is a name that
// more than one VM carries; nil otherwise.
func Ambiguous(inv *Inventory, id string) []string {
	var paths []string
	for i := range inv.VMs {
		if inv.VMs[i].Name == id {
			paths = append(paths, cmp.Or(inv.VMs[i].Path, inv.VMs[i].Name))
		}
	}
	if len(paths) < 2 {
		return nil
	}
	sort.Strings(paths)
	return paths
}

// FindHost returns the host with that name.
func (inv *Inventory) FindHost(name string) (*Host, bool) {
	for i := range inv.Hosts {
		if inv.Hosts[i].Name == name {
			return &inv.Hosts[i], true
		}
	}
	return nil, false
}

// Profile returns the host's offer of the named profile.
func (h *Host) Profile(name string) (Profile, bool) {
	for _, p := range h.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// profileRE is NVIDIA's vGPU type name as vSphere shows it: grid_ or nvidia_, the board
// (p100, a100d, h100xm, ...), then either the frame buffer in GiB and the series (A, B,
// C or Q: grid_p100-4q) or, for MIG-backed types, the slice count 1-7, the frame buffer
// and C, or CME with media extensions (nvidia_a100-3-20c, nvidia_h100xm-1-10cme).
var profileRE = regexp.MustCompile(`^(grid|nvidia)_[a-z][a-z0-9]*-(?:([1-7])-([1-9][0-9]{0,2})(c|cme)|([0-9]{1,3})(a|b|c|q))$`)

// ProfileNamePattern is profileRE for admission messages and CEL, kept in one place.
const ProfileNamePattern = `^(grid|nvidia)_[a-z][a-z0-9]*-([1-7]-[1-9][0-9]{0,2}(c|cme)|[0-9]{1,3}(a|b|c|q))$`

// ProfileFrameBufferMiB parses the frame buffer that a profile name encodes: the number
// before the trailing letters is GiB (grid_p100-4q is 4 GiB, nvidia_a100-3-20c 20 GiB);
// 0 is NVIDIA's 512 MiB type (grid_m60-0q). It is the fallback when the host's config
// target does not say. At most three digits are accepted, so the size cannot overflow.
func ProfileFrameBufferMiB(profile string) (int64, error) {
	m := profileRE.FindStringSubmatch(profile)
	if m == nil {
		return 0, fmt.Errorf("vGPU profile %q is not an NVIDIA vGPU type name such as grid_p100-4q, nvidia_a100-3-20c or nvidia_h100xm-1-10cme", cutName(profile))
	}
	digits := m[3]
	if digits == "" {
		digits = m[5]
	}
	gib, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("vGPU profile %q has no valid frame buffer size", profile)
	}
	if gib == 0 {
		return 512, nil
	}
	return gib * 1024, nil
}

func cutName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// VMIndex finds VMs as FindVM does, from maps built once: a pass that resolves every
// worker of a large pool would otherwise scan every VM once per worker.
type VMIndex struct {
	inv    *Inventory
	byPath map[string]int // the first VM with that path
	byName map[string]int // the first VM with that name
	named  map[string]int // how many VMs carry that name
}

// Index indexes the inventory's VMs; the inventory must not change while it is used.
func (inv *Inventory) Index() *VMIndex {
	x := &VMIndex{inv: inv, byPath: make(map[string]int, len(inv.VMs)), byName: make(map[string]int, len(inv.VMs)), named: make(map[string]int, len(inv.VMs))}
	for i := range inv.VMs {
		vm := &inv.VMs[i]
		if _, seen := x.byPath[vm.Path]; vm.Path != "" && !seen {
			x.byPath[vm.Path] = i
		}
		if _, seen := x.byName[vm.Name]; !seen {
			x.byName[vm.Name] = i
		}
		x.named[vm.Name]++
	}
	return x
}

// FindVM is Inventory.FindVM.
func (x *VMIndex) FindVM(id string) (*VM, bool) {
	if i, ok := x.byPath[id]; ok {
		return &x.inv.VMs[i], true
	}
	if x.named[id] != 1 {
		return nil, false
	}
	return &x.inv.VMs[x.byName[id]], true
}
