package inventory

// vCenter's own count of a host's vGPU room: vSphere API 9.0's
// DirectPathProfileManager.DirectPathProfileManagerQueryCapacity, asked with the host
// (DirectPathProfileManagerTargetHost) as the target and one
// DirectPathProfileManagerCapacityQueryByDeviceConfig per vGPU profile the host offers
// (a DirectPathProfileManagerVmiopDirectPathConfig naming the profile). The planner uses
// it as a second opinion next to its own packing (internal/plan/vcentercapacity.go).

// VCenterCapacity states.
const (
	// CapacityNotOffered: vCenter's ServiceContent has no directPathProfileManager
	// (vCenter before 9.0), or the inventory was not read from vCenter; the zero value.
	CapacityNotOffered = ""
	// CapacityRead: the query answered; Profiles holds what it said.
	CapacityRead = "read"
	// CapacityFailed: the query failed (Error says why); gpupool has no second opinion
	// for the host and goes on with its own packing.
	CapacityFailed = "failed"
)

// VCenterCapacity is what vCenter said about the host's room per vGPU profile.
type VCenterCapacity struct {
	// State is CapacityNotOffered, CapacityRead or CapacityFailed.
	State string
	// Error is why the query failed (CapacityFailed).
	Error string
	// Profiles are vCenter's counts by vGPU profile name (CapacityRead). A profile
	// vCenter could not count (DirectPathProfileManagerCapacityUnknown) is absent: no
	// opinion on it.
	Profiles map[string]ProfileCapacity
}

// ProfileCapacity is one DirectPathProfileManagerCapacityInfo, counted in vGPUs of the
// profile on the target (the host).
type ProfileCapacity struct {
	// Consumed: vGPUs of the profile assigned to powered-on VMs.
	Consumed int
	// Remaining: vGPUs of the profile that could still be assigned (neither assigned
	// nor reserved), with what runs now.
	Remaining int
	// Max: vGPUs of the profile the target could hold with no VM running (without
	// what vSphere's system components take).
	Max int
	// UnusedReservation: reserved but not assigned; vCenter keeps
	// max >= consumed + remaining + unusedReservation.
	UnusedReservation int
}

// Said returns vCenter's counts for the profile, when it gave them.
func (c *VCenterCapacity) Said(profile string) (ProfileCapacity, bool) {
	if c == nil || c.State != CapacityRead {
		return ProfileCapacity{}, false
	}
	pc, ok := c.Profiles[profile]
	return pc, ok
}
