package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUPoolUsage is one pool's GPU accounting for one day: GPU-equivalent seconds offered,
// allocated (per tenant), idle and switching, per layout and vGPU profile, and per hour.
// The manager writes it (named <pool>.<YYYY-MM-DD>, the day in the pool's
// schedule.timeZone) and deletes it after spec.accounting.retentionDays; it is owned by
// the pool and goes with it. A GPU-equivalent is a vGPU's frame buffer over its GPU's:
// a grid_p100-4q on a 16 GB P100 is 0.25 (docs/accounting.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpuusage,categories=gpupool
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.pool`
// +kubebuilder:printcolumn:name="Day",type=string,JSONPath=`.day`
// +kubebuilder:printcolumn:name="Offered",type=string,JSONPath=`.totals.offeredGPUHours`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.totals.allocatedGPUHours`
// +kubebuilder:printcolumn:name="Idle",type=string,JSONPath=`.totals.idleGPUHours`
// +kubebuilder:printcolumn:name="Switching",type=string,JSONPath=`.totals.switchingGPUHours`
// +kubebuilder:printcolumn:name="Through",type=date,JSONPath=`.through`,priority=1
type GPUPoolUsage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Pool is the GPUPoolProfile this is the accounting of.
	Pool string `json:"pool"`
	// Day is the day, YYYY-MM-DD, in TimeZone.
	Day string `json:"day"`
	// TimeZone is the IANA zone the day and its hours are in.
	TimeZone string `json:"timeZone"`
	// Through is how far the day is accounted (on the manager's clock): the end of the
	// day once it is over.
	Through metav1.Time `json:"through"`
	// Totals are the day's sums over every row, in GPU-hours, for reading at a glance.
	// +optional
	Totals UsageTotals `json:"totals,omitempty"`
	// Rows are the day's GPU-equivalent seconds per layout, profile and tenant: a row
	// without a tenant has what was offered, allocated in all and switching; a row with a
	// tenant what that tenant's pods were allocated.
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Rows []UsageRow `json:"rows,omitempty"`
	// Hours are the day's GPU-equivalent seconds per hour and layout, for a timeline.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	Hours []UsageHour `json:"hours,omitempty"`
}

// UsageTotals are a day's sums in GPU-hours, as decimal strings (such as "12.25").
type UsageTotals struct {
	// +optional
	OfferedGPUHours string `json:"offeredGPUHours,omitempty"`
	// +optional
	AllocatedGPUHours string `json:"allocatedGPUHours,omitempty"`
	// +optional
	IdleGPUHours string `json:"idleGPUHours,omitempty"`
	// +optional
	SwitchingGPUHours string `json:"switchingGPUHours,omitempty"`
}

// UsageRow is GPU-equivalent seconds of one layout and profile, and of one tenant when
// Tenant is set.
type UsageRow struct {
	// Layout is the layout the capacity belonged to (the node's gpupool.dev/layout label;
	// for switching, the layout being switched to).
	Layout string `json:"layout"`
	// Profile is the vGPU profile; empty for switching capacity, which has none.
	// +optional
	Profile string `json:"profile,omitempty"`
	// Tenant is the tenant the row's allocation is of; empty for the layout's and
	// profile's own row. Tenants past the day's first 256 (or past 2,048 tenant rows) are
	// summed as "(other)".
	// +optional
	Tenant string `json:"tenant,omitempty"`
	// OfferedGPUSeconds: capacity on schedulable, Ready nodes of running VMs.
	// +optional
	OfferedGPUSeconds int64 `json:"offeredGPUSeconds,omitempty"`
	// AllocatedGPUSeconds: what running pods asked of that capacity.
	// +optional
	AllocatedGPUSeconds int64 `json:"allocatedGPUSeconds,omitempty"`
	// SwitchingGPUSeconds: capacity of the pool's GPUs offline during a transition.
	// +optional
	SwitchingGPUSeconds int64 `json:"switchingGPUSeconds,omitempty"`
}

// UsageHour is one hour's GPU-equivalent seconds of one layout.
type UsageHour struct {
	// Start is the hour's start.
	Start metav1.Time `json:"start"`
	// Layout as in UsageRow.
	Layout string `json:"layout"`
	// +optional
	OfferedGPUSeconds int64 `json:"offeredGPUSeconds,omitempty"`
	// +optional
	AllocatedGPUSeconds int64 `json:"allocatedGPUSeconds,omitempty"`
	// +optional
	SwitchingGPUSeconds int64 `json:"switchingGPUSeconds,omitempty"`
}

// GPUPoolUsageList is a list of GPUPoolUsage.
//
// +kubebuilder:object:root=true
type GPUPoolUsageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUPoolUsage `json:"items"`
}
