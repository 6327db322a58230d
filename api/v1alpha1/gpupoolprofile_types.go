package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ParkingMode says what happens to a VM that is not part of the wanted layout.
// +kubebuilder:validation:Enum=Suspend;PowerOff
type ParkingMode string

const (
	// ParkingSuspend suspends parked VMs: fast to resume, the guest keeps its memory. It
	// needs a vGPU profile whose host reports suspendSupported.
	ParkingSuspend ParkingMode = "Suspend"
	// ParkingPowerOff shuts parked VMs down (guest shutdown first, then hard power off).
	ParkingPowerOff ParkingMode = "PowerOff"
)

// DrainTimeoutAction says what happens when a drain does not finish within its timeout.
// +kubebuilder:validation:Enum=Abort;Force
type DrainTimeoutAction string

const (
	// DrainAbort stops the transition, uncordons the nodes gpupool cordoned for it and
	// leaves the VMs running. The pool reports Degraded and names the blocking pods.
	DrainAbort DrainTimeoutAction = "Abort"
	// DrainForce deletes the pods that are still on the node and goes on.
	DrainForce DrainTimeoutAction = "Force"
)

// GPUPoolProfileSpec is the wanted shape of a pool of vGPU worker VMs over time.
//
// Layout references (defaultLayout, override.layout, schedule.windows[].layout) are
// checked by the webhook, which names the field with its index, the value and the
// layouts that exist.
type GPUPoolProfileSpec struct {
	// VCenter is the vCenter that runs the pool's VMs.
	VCenter VCenterSpec `json:"vcenter"`

	// Layouts are the shapes the pool can take: which VMs run, each with which vGPU
	// profile. A VM of the pool that the active layout does not list is parked.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule=`self.all(a, self.exists_one(b, b.name == a.name))`,message=`layout names must be unique; rename or remove the duplicate layout (the Duplicate value error names its index and name)`
	Layouts []Layout `json:"layouts"`

	// Schedule says in which time windows which layout applies.
	// +optional
	Schedule *Schedule `json:"schedule,omitempty"`

	// DefaultLayout is the layout that applies outside every window, when no override is
	// in force.
	// +kubebuilder:validation:MinLength=1
	DefaultLayout string `json:"defaultLayout"`

	// Override forces a layout regardless of the schedule, for example for a maintenance
	// window. It expires by itself at Until.
	// +optional
	Override *Override `json:"override,omitempty"`

	// Demand lets pending GPU work bring a layout in before its window, and lets a
	// layout nobody uses be skipped or ended, within guard rails (dwell, cooldown, a
	// switch budget, a disruption limit). Without it the pool follows the schedule only.
	// +optional
	Demand *DemandPolicy `json:"demand,omitempty"`

	// Kueue maps the layouts to Kueue ResourceFlavors: their quota in the ClusterQueues
	// that opt in follows the layout, and Workloads assigned a flavor whose layout is not
	// ready wait for it (docs/kueue.md). Without it gpupool does not touch Kueue.
	// +optional
	Kueue *KueueSpec `json:"kueue,omitempty"`

	// Accounting says how the pool's GPU-hours are kept (GPUPoolUsage, one per pool per
	// day, and the gpupool_gpu_seconds_total metrics): who the tenant of a pod is, and
	// how many days are kept. Accounting is always on; without it the tenant is the
	// pod's namespace and 35 days are kept (docs/accounting.md).
	// +optional
	Accounting *AccountingSpec `json:"accounting,omitempty"`

	// Parking says what happens to VMs that are not in the wanted layout.
	// +kubebuilder:default=Suspend
	// +optional
	Parking ParkingMode `json:"parking,omitempty"`

	// Drain controls how nodes are drained before their VM is parked or reconfigured.
	// +kubebuilder:default={}
	// +optional
	Drain DrainSpec `json:"drain,omitempty"`

	// NodeReadyTimeout is how long to wait for a powered-on VM's node to become Ready
	// before the transition is reported as Degraded.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`nodeReadyTimeout must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'nodeReadyTimeout must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 10m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) > duration('0s')`,message=`nodeReadyTimeout must be positive, such as 10m`,messageExpression=`'nodeReadyTimeout must be positive, such as 10m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	NodeReadyTimeout *metav1.Duration `json:"nodeReadyTimeout,omitempty"`

	// Readiness says when the node of a powered-on VM is ready for work: Ready, and
	// advertising its GPUs (and, optionally, carrying labels or conditions such as GPU
	// feature discovery's). Only then is it relabelled and uncordoned; until then the
	// worker waits in WaitNodeReady, within nodeReadyTimeout.
	// +kubebuilder:default={}
	// +optional
	Readiness ReadinessSpec `json:"readiness,omitempty"`

	// MaxParallel is how many ESXi hosts are changed at the same time.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxParallel int32 `json:"maxParallel,omitempty"`

	// GuestShutdownTimeout is how long a guest may take to shut down when a VM is powered
	// off (parking PowerOff, or a profile change). After it, or at once when the guest
	// cannot be asked (VMware Tools not running), the VM is powered off hard. A duration
	// in Go's form, as every duration of the spec: 2m, 90s, 1h30m.
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`guestShutdownTimeout must be a duration such as 2m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'guestShutdownTimeout must be a duration such as 2m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 2m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) > duration('0s')`,message=`guestShutdownTimeout must be positive, such as 2m`,messageExpression=`'guestShutdownTimeout must be positive, such as 2m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	GuestShutdownTimeout *metav1.Duration `json:"guestShutdownTimeout,omitempty"`

	// DiscardSuspendedState allows gpupool to power off a suspended VM whose vGPU profile
	// must change: its suspended memory state is lost, as after a hard power-off. Without
	// it such a VM is not touched and the pool reports Stalled (SuspendedStateAtRisk).
	// +optional
	DiscardSuspendedState bool `json:"discardSuspendedState,omitempty"`

	// Paused stops all action on the pool: nothing is drained, parked or powered on, and
	// vCenter is not contacted. The desired layout and the next transition are still
	// reported.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// AccountingSpec says how the pool's GPU-hours are kept.
type AccountingSpec struct {
	// TenantLabel is the namespace label whose value names a pod's tenant, such as
	// example.com/team. A namespace without the label is its own tenant, as is every
	// namespace when it is not set.
	// +kubebuilder:validation:MaxLength=317
	// +optional
	TenantLabel string `json:"tenantLabel,omitempty"`

	// RetentionDays is how many days of GPUPoolUsage are kept; older ones are deleted.
	// +kubebuilder:default=35
	// +kubebuilder:validation:XValidation:rule=`self >= 1 && self <= 400`,message=`accounting.retentionDays must be from 1 to 400 days (leave it out for 35)`
	// +optional
	RetentionDays int32 `json:"retentionDays,omitempty"`
}

// VCenterSpec says how to reach vCenter.
//
// +kubebuilder:validation:XValidation:rule="self.insecure || has(self.thumbprint) || has(self.caBundle)",message="set vcenter.thumbprint or vcenter.caBundle so the server certificate can be verified, or set vcenter.insecure: true to skip verification (not for production)"
type VCenterSpec struct {
	// Server is the vCenter host name, host:port or https URL.
	// +kubebuilder:validation:MinLength=1
	Server string `json:"server"`

	// Datacenter is the name of the datacenter that holds the pool's VMs and hosts.
	// +kubebuilder:validation:MinLength=1
	Datacenter string `json:"datacenter"`

	// CredentialsSecretRef names a Secret with the keys `username` and `password`.
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// Thumbprint is the SHA-1 or SHA-256 fingerprint of the server certificate, as
	// colon-separated hex pairs (the form `govc about.cert -thumbprint` prints after the
	// host name). The schema allows more than the 95 characters of a SHA-256 fingerprint
	// so that a value pasted with a newline, or a whole line of govc or openssl output,
	// reaches the CEL rule, which says what to write.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9A-Fa-f]{2}:){19}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$')`,message=`thumbprint must be a SHA-1 or SHA-256 fingerprint as colon-separated hex pairs, as govc about.cert -thumbprint prints it after the host name (such as 3B:9F:...:0F)`,messageExpression=`'thumbprint must be a SHA-1 or SHA-256 fingerprint as colon-separated hex pairs, as govc about.cert -thumbprint prints it after the host name (such as 3B:9F:...:0F), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.trim() != self && self.trim().matches('^([0-9A-Fa-f]{2}:){19}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.matches('[ =](([0-9A-Fa-f]{2}:){19}|([0-9A-Fa-f]{2}:){31})[0-9A-Fa-f]{2}[[:space:]]*$') ? ': write only the fingerprint, ' + strings.quote(self.find('[ =](([0-9A-Fa-f]{2}:){19}|([0-9A-Fa-f]{2}:){31})[0-9A-Fa-f]{2}[[:space:]]*$').substring(1).trim()) : self.trim().matches('^[0-9A-Fa-f]{40}$|^[0-9A-Fa-f]{64}$') ? ': put a colon between every two hex digits, such as 3B:9F:...' : '')`
	// +optional
	Thumbprint string `json:"thumbprint,omitempty"`

	// CABundle is PEM-encoded CA certificates to verify the server certificate with.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// Insecure skips verification of the server certificate. Never use it in production.
	// +kubebuilder:default=false
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// Layout is one shape of the pool: the workers it lists, or a conversion of some GPUs
// of another layout (convert).
//
// +kubebuilder:validation:XValidation:rule=`has(self.convert) || has(self.select) || (has(self.workers) && size(self.workers) > 0)`,fieldPath=`.workers`,reason=FieldValueRequired,message=`a layout lists its workers (the VMs it runs, each with its vGPU profile), converts GPUs of another layout (convert), or selects its VMs (select)`,messageExpression=`'layout ' + self.name + ' has no workers: list the VMs it runs, each with its vGPU profile, convert GPUs of another layout (convert: base, count, profile, candidates), or select its VMs (select: profile and namePattern, folder, tag or machineDeployment)'`
// +kubebuilder:validation:XValidation:rule=`!has(self.convert) || !has(self.workers) || size(self.workers) == 0`,fieldPath=`.workers`,reason=FieldValueForbidden,message=`a layout by count (convert) lists no workers: it runs convert.base's workers and convert.candidates; remove workers or convert`
// +kubebuilder:validation:XValidation:rule=`!has(self.select) || !has(self.workers) || size(self.workers) == 0`,fieldPath=`.workers`,reason=FieldValueForbidden,message=`a layout that selects its VMs (select) lists no workers: every VM the selector matches is one; remove workers or select`
// +kubebuilder:validation:XValidation:rule=`!has(self.select) || !has(self.convert)`,fieldPath=`.select`,reason=FieldValueForbidden,message=`a layout either converts GPUs (convert) or selects its VMs (select), not both; remove one (convert.candidates may not be selected either)`
type Layout struct {
	// Name identifies the layout in windows, defaultLayout and override: a DNS label of at
	// most 63 characters. The CEL rule checks the length, so that a name a little too long
	// is refused with its value and what to write; the schema's maxLength only bounds the
	// rule's cost.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.size() <= 63 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message=`layout name must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit, such as night or day-small`,messageExpression=`'layout name must be a DNS label: at most 63 lower-case letters, digits and \'-\', starting and ending with a letter or digit, such as night or day-small, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.size() > 63 ? ': it is longer than 63 characters, shorten it' : self.trim().lowerAscii().replace(' ', '-').replace('_', '-').matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') ? ': write ' + strings.quote(self.trim().lowerAscii().replace(' ', '-').replace('_', '-')) + ' (and use that name in defaultLayout, windows and override)' : '')`
	Name string `json:"name"`

	// Workers are the VMs that run in this layout, each with its vGPU profile. Required
	// unless convert is set.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Workers []Worker `json:"workers,omitempty"`

	// Convert makes this a layout by count: the base layout with Count physical GPUs
	// converted to Profile, run by candidate VMs. gpupool chooses the GPUs whose change
	// disrupts least (GPU pods evicted; do-not-disrupt pods and Jobs near completion
	// never, unless disruption weighs them), on every pass, from what it observes; the
	// base layout's workers on the other GPUs keep running. docs/count-layouts.md.
	// +optional
	Convert *Conversion `json:"convert,omitempty"`

	// Select makes the layout's workers the VMs a selector matches, found again on every
	// pass: by name pattern, folder or tag in vCenter, or the Machines of a Cluster API
	// MachineDeployment. A VM that appears is picked up; one that disappears is released
	// as a VM removed from the spec is. A selection that cannot be read (vCenter or API
	// error) never reads as no VMs: the pass keeps the last selection, or stops.
	// docs/api.md#selected-workers.
	// +optional
	Select *Selection `json:"select,omitempty"`

	// NodeLabels are set on this layout's nodes while the layout is active.
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// NodeTaints are set on this layout's nodes while the layout is active.
	// +optional
	// +listType=atomic
	NodeTaints []corev1.Taint `json:"nodeTaints,omitempty"`

	// GPUReplicas is how many of readiness.gpuResource the device plugin advertises per
	// vGPU on this layout's nodes: the replicas of the time-slicing or MPS configuration
	// that the layout's nodeLabels select (the NVIDIA GPU Operator reads the node label
	// nvidia.com/device-plugin.config), such as 4 for four pods sharing each 4Q vGPU.
	// Once a node carries the layout's labels, gpupool waits until it advertises exactly
	// vgpus x gpuReplicas before it uncordons the node. Without it a node must advertise
	// at least one per vGPU, whatever its configuration. Set 1 on a layout of whole GPUs
	// whose VMs may come from a shared configuration, so that they are uncordoned only once
	// the device plugin has dropped the replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 256",message="gpuReplicas must be between 1 and 256 replicas of the GPU resource per vGPU, as the device plugin's time-slicing or MPS configuration sets them; leave it out to wait for at least one per vGPU",messageExpression=`'gpuReplicas must be between 1 and 256 replicas of the GPU resource per vGPU, as the device plugin\'s time-slicing or MPS configuration sets them, not ' + (self < 0 ? 'negative' : self == 0 ? '0' : 'more than 256') + '; leave it out to wait for at least one per vGPU'`
	// +optional
	GPUReplicas *int32 `json:"gpuReplicas,omitempty"`
}

// Worker is one VM of a layout.
//
// +kubebuilder:validation:XValidation:rule=`!(has(self.noNode) && self.noNode && has(self.node))`,message=`set either node (the VM's Kubernetes node) or noNode: true (the VM is no Kubernetes worker), not both`,messageExpression=`'set either node (the VM\'s Kubernetes node) or noNode: true (the VM is no Kubernetes worker), not both: remove node ' + strings.quote(self.node.size() > 64 ? self.node.substring(0, 64) + '...' : self.node) + ' or noNode'`
type Worker struct {
	// VM is the VM's name, or its inventory path such as /dc1/vm/gpu/worker-1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	VM string `json:"vm"`

	// Profile is the NVIDIA vGPU profile the VM runs with in this layout, such as
	// grid_p100-4q, nvidia_a100-3-20c (MIG-backed) or nvidia_h100xm-1-10cme (MIG with
	// media extensions). The number before the last letters is the frame buffer in GiB.
	// It is written into the node label gpupool.dev/vgpu-profile, hence at most 63
	// characters. The pattern is inventory.ProfileNamePattern (a test keeps them equal).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^(grid|nvidia)_[a-z][a-z0-9]*-([1-7]-[1-9][0-9]{0,2}(c|cme)|[0-9]{1,3}(a|b|c|q))$')",message=`profile must be an NVIDIA vGPU type name as govc gpu.host.profile.ls lists it, such as grid_p100-4q, nvidia_a100-3-20c (MIG-backed) or nvidia_h100xm-1-10cme (MIG with media extensions)`,messageExpression=`'profile must be an NVIDIA vGPU type name as govc gpu.host.profile.ls lists it, such as grid_p100-4q, nvidia_a100-3-20c (MIG-backed) or nvidia_h100xm-1-10cme (MIG with media extensions), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.trim() != self && self.trim().lowerAscii().matches('^(grid|nvidia)_[a-z][a-z0-9]*-([1-7]-[1-9][0-9]{0,2}(c|cme)|[0-9]{1,3}(a|b|c|q))$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim().lowerAscii()) : self.trim().lowerAscii().matches('^(grid|nvidia)_[a-z][a-z0-9]*-([1-7]-[1-9][0-9]{0,2}(c|cme)|[0-9]{1,3}(a|b|c|q))$') ? ': write it in lower case, ' + strings.quote(self.trim().lowerAscii()) : ('grid_' + self.trim().lowerAscii()).matches('^(grid|nvidia)_[a-z][a-z0-9]*-([1-7]-[1-9][0-9]{0,2}(c|cme)|[0-9]{1,3}(a|b|c|q))$') ? ': start it with grid_ or nvidia_ as vSphere lists it, such as ' + strings.quote('grid_' + self.trim().lowerAscii()) : self.matches('^(grid|nvidia)_[a-z][a-z0-9]*-([0-9]+-)?[0-9]{4,}') ? ': the frame buffer has at most 3 digits (GiB), such as grid_a100-40c' : '')`
	Profile string `json:"profile"`

	// VGPUs is how many vGPUs of Profile the VM carries in this layout, such as 2 for a
	// training VM with two grid_a100-40c on two GPUs of its host. NVIDIA allows several
	// vGPUs in one VM on vSphere 8.0 and later when they share board and series, which
	// one profile guarantees. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 16",message="vgpus must be between 1 and 16 vGPUs of the profile per VM; leave it out for one vGPU",messageExpression=`'vgpus must be between 1 and 16 vGPUs of the profile per VM, not ' + (self < 0 ? 'negative' : self == 0 ? '0' : 'more than 16') + '; leave it out for one vGPU'`
	// +optional
	VGPUs int32 `json:"vgpus,omitempty"`

	// Node is the name of the VM's Kubernetes node. Without it the node is found by
	// spec.providerID (vsphere://<BIOS UUID>), then by the VM's name, case-insensitively,
	// then by the short name of a node named by FQDN.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`

	// NoNode says the VM is not a Kubernetes worker: it is parked and started without a
	// drain and without waiting for a node. Without it a running VM whose node cannot be
	// found is never parked.
	// +optional
	NoNode bool `json:"noNode,omitempty"`
}

// Selection is a layout's workers by selector: every VM that matches all the sources
// given (at least one) runs Profile (VGPUs of it).
//
// +kubebuilder:validation:XValidation:rule=`has(self.namePattern) || has(self.folder) || has(self.tag) || has(self.machineDeployment)`,reason=FieldValueRequired,message=`select needs at least one source: namePattern (such as gpu-day-*), folder (a path in the datacenter's vm folder), tag (a vSphere tag: category, name) or machineDeployment (namespace, name)`
type Selection struct {
	// Profile is the vGPU profile every selected VM runs, as workers[].profile (the
	// webhook checks it is an NVIDIA vGPU type name).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Profile string `json:"profile"`

	// VGPUs is how many vGPUs of Profile each selected VM carries. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	VGPUs int32 `json:"vgpus,omitempty"`

	VMSelector `json:",inline"`
}

// VMSelector says which VMs are selected: those that match every source given.
type VMSelector struct {
	// NamePattern selects the VMs of the datacenter whose name matches this glob (Go's
	// path.Match: *, ?, [a-z]), such as gpu-day-*.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +optional
	NamePattern string `json:"namePattern,omitempty"`

	// Folder selects the VMs in this folder of the datacenter's vm folder, and in its
	// subfolders: a path relative to the vm folder such as gpu/day, or the folder's
	// inventory path such as /dc1/vm/gpu/day.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Folder string `json:"folder,omitempty"`

	// Tag selects the VMs that carry this vSphere tag. vCenter serves tags through its
	// REST API only: a pool that selects by tag opens a second vCenter session there,
	// with the same credentials (docs/security.md). A tag or category that does not
	// exist is an error, never an empty selection.
	// +optional
	Tag *TagReference `json:"tag,omitempty"`

	// MachineDeployment selects the VMs of a Cluster API MachineDeployment's Machines
	// (label cluster.x-k8s.io/deployment-name): each Machine's VM is the VSphereVM its
	// VSphereMachine owns, its node the Machine's status.nodeRef.
	// +optional
	MachineDeployment *MachineDeploymentReference `json:"machineDeployment,omitempty"`
}

// TagReference names a vSphere tag by its category's name and its own: names are unique
// within vCenter for categories and within a category for tags.
type TagReference struct {
	// Category is the name of the tag's category, such as gpupool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Category string `json:"category"`
	// Name is the tag's name, such as day-workers.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
}

// MachineDeploymentReference names a Cluster API MachineDeployment.
type MachineDeploymentReference struct {
	// Namespace of the MachineDeployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the MachineDeployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Conversion is a layout by count: Count GPUs of the base layout's hosts converted to
// Profile, from the candidates.
//
// +kubebuilder:validation:XValidation:rule=`has(self.candidatesFrom) || (has(self.candidates) && size(self.candidates) > 0)`,fieldPath=`.candidates`,reason=FieldValueRequired,message=`list the candidates (the VMs that may run the profile on a converted GPU), or select them (candidatesFrom)`
// +kubebuilder:validation:XValidation:rule=`!has(self.candidatesFrom) || !has(self.candidates) || size(self.candidates) == 0`,fieldPath=`.candidatesFrom`,reason=FieldValueForbidden,message=`list the candidates or select them (candidatesFrom), not both; remove one`
type Conversion struct {
	// Base is the layout whose workers run outside the converted GPUs: a layout of
	// spec.layouts that lists its workers.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Base string `json:"base"`

	// Count is how many physical GPUs to convert.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 4096",message="count must be between 1 and 4096 GPUs to convert; to convert none, use the base layout itself"
	Count int32 `json:"count"`

	// Profile is the vGPU profile the converted GPUs run, such as grid_p100-16q (the
	// webhook checks it is an NVIDIA vGPU type name).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Profile string `json:"profile"`

	// VGPUs is how many vGPUs of Profile each candidate carries. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	VGPUs int32 `json:"vgpus,omitempty"`

	// Candidates are the VMs that may run Profile on a converted GPU; between equals the
	// earlier is used first. Each converted GPU takes as many as fill it. Required
	// unless candidatesFrom is set.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Candidates []Candidate `json:"candidates,omitempty"`

	// CandidatesFrom selects the candidates instead of listing them, as a layout's
	// select does (in name order; a Machine's node is its status.nodeRef), found again
	// on every pass.
	// +kubebuilder:validation:XValidation:rule=`has(self.namePattern) || has(self.folder) || has(self.tag) || has(self.machineDeployment)`,reason=FieldValueRequired,message=`candidatesFrom needs at least one source: namePattern (such as gpu-night-*), folder (a path in the datacenter's vm folder), tag (a vSphere tag: category, name) or machineDeployment (namespace, name)`
	// +optional
	CandidatesFrom *VMSelector `json:"candidatesFrom,omitempty"`

	// Disruption weighs what a choice disrupts besides GPU pods. Without it no GPU whose
	// emptying disrupts a do-not-disrupt pod or a Job near completion is chosen.
	// +optional
	Disruption *DisruptionWeights `json:"disruption,omitempty"`
}

// Candidate is a VM that may run a conversion's profile.
//
// +kubebuilder:validation:XValidation:rule=`!(has(self.noNode) && self.noNode && has(self.node))`,message=`set either node (the VM's Kubernetes node) or noNode: true (the VM is no Kubernetes worker), not both`
type Candidate struct {
	// VM is the VM's name, or its inventory path, as workers[].vm.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	VM string `json:"vm"`

	// Node is the name of the VM's Kubernetes node, as workers[].node.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`

	// NoNode says the VM is not a Kubernetes worker, as workers[].noNode.
	// +optional
	NoNode bool `json:"noNode,omitempty"`
}

// DisruptionWeights say what disrupting a pod the drain would otherwise spare costs, in
// GPU pods evicted. 0 (the default) is never: no GPU whose emptying disrupts one is
// chosen.
type DisruptionWeights struct {
	// DoNotDisrupt weighs a pod annotated gpupool.dev/do-not-disrupt: "true".
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	DoNotDisrupt int32 `json:"doNotDisrupt,omitempty"`

	// JobNearCompletion weighs a pod of a Job near completion (its
	// gpupool.dev/wait-completed annotation or drain.waitForJobs).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	JobNearCompletion int32 `json:"jobNearCompletion,omitempty"`
}

// Schedule maps time windows to layouts.
type Schedule struct {
	// TimeZone is the IANA time zone the windows' cron expressions are read in, such as
	// Europe/Berlin.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MinLength=1
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Windows are the time windows. When several are active, the one with the highest
	// priority wins, then the earliest in this list.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Windows []Window `json:"windows,omitempty"`

	// LeadTime starts a switch this long before its boundary, so that the new layout is
	// ready on time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`leadTime must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'leadTime must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for no lead time' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`leadTime must be zero or positive, such as 10m`,messageExpression=`'leadTime must be zero or positive, such as 10m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	LeadTime *metav1.Duration `json:"leadTime,omitempty"`

	// WarnAhead is how long before a scheduled switch starts draining nodes gpupool
	// warns the schedulers: the nodes the switch will drain get the taint
	// gpupool.dev/draining-soon:PreferNoSchedule and the annotation gpupool.dev/drain-at
	// (RFC 3339). Unset: leadTime when it is positive, else 15m. 0s: no warning.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`warnAhead must be a duration such as 15m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'warnAhead must be a duration such as 15m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default (leadTime when it is positive, else 15m), or write 0s for no warning' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`warnAhead must be zero (no warning) or positive, such as 15m`,messageExpression=`'warnAhead must be zero (no warning) or positive, such as 15m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	WarnAhead *metav1.Duration `json:"warnAhead,omitempty"`
}

// Window is a recurring time window in which a layout applies.
type Window struct {
	// Layout is the layout that applies while the window is open.
	// +kubebuilder:validation:MinLength=1
	Layout string `json:"layout"`

	// Start is a 5-field cron expression (minute hour day-of-month month day-of-week),
	// read in schedule.timeZone, at which the window opens. Example: "0 8 * * 1-5".
	// +kubebuilder:validation:MinLength=1
	Start string `json:"start"`

	// Duration is how long the window stays open after each start, such as 12h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`duration must be a duration such as 12h, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'duration must be a duration such as 12h, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': write how long the window stays open, such as 12h' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) > duration('0s')`,message=`duration must be positive, such as 12h`,messageExpression=`'duration must be positive, such as 12h, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	Duration metav1.Duration `json:"duration"`

	// Priority orders overlapping windows: the higher wins.
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// Override forces a layout, for example during a maintenance window.
type Override struct {
	// Layout is the layout to force.
	// +kubebuilder:validation:MinLength=1
	Layout string `json:"layout"`

	// Until is when the override expires (RFC 3339). Without it the override stays until
	// it is removed.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`

	// Reason is shown in status and events.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// ReadinessSpec says what a node must show before gpupool relabels and uncordons it.
type ReadinessSpec struct {
	// GPUResource is the extended resource the GPU device plugin advertises. The node is
	// ready only when its allocatable amount is at least the VM's vGPU count. Write ""
	// to not wait for it (nodes without a device plugin). It must be an extended
	// resource name, as a device plugin can only register one: a domain prefix that is
	// not kubernetes.io or one of its subdomains, and not starting with "requests.".
	// Time-slicing with renamed resources advertises nvidia.com/gpu.shared, the MIG
	// mixed strategy nvidia.com/mig-<slice>: set it to what the nodes advertise.
	// +kubebuilder:default="nvidia.com/gpu"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self == '' || (self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && !self.matches('^([^/]*[.])?kubernetes[.]io/') && !self.startsWith('requests.'))`,message=`readiness.gpuResource must be an extended resource name with a domain prefix that is not kubernetes.io and does not start with requests. (such as nvidia.com/gpu or nvidia.com/gpu.shared), or "" to not wait for GPUs`,messageExpression=`'readiness.gpuResource must be an extended resource name with a domain prefix that is not kubernetes.io and does not start with requests. (such as nvidia.com/gpu or nvidia.com/gpu.shared), or "" to not wait for GPUs, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.trim() != self && (self.trim() == '' || (self.trim().matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && !self.trim().matches('^([^/]*[.])?kubernetes[.]io/') && !self.trim().startsWith('requests.'))) ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.startsWith('requests.') ? ': that is the ResourceQuota form, write ' + strings.quote(self.substring(9)) : !self.contains('/') ? ': add the device plugin\'s domain, such as nvidia.com/gpu' : '')`
	// +optional
	GPUResource *string `json:"gpuResource,omitempty"`

	// NodeLabels must all be on the node with these values, such as GPU feature
	// discovery's nvidia.com/vgpu.present: "true" or a licence label. Labels another
	// component sets: gpupool.dev/ keys and keys a layout's nodeLabels set are refused,
	// as gpupool sets them only after the node is ready for work.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// NodeConditions are node condition types that must be True, such as a condition
	// a node problem detector sets when the vGPU licence is acquired.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=316
	// +listType=set
	// +optional
	NodeConditions []string `json:"nodeConditions,omitempty"`

	// DRA names the GPUs as Dynamic Resource Allocation publishes them, for nodes whose
	// GPUs a DRA driver publishes in ResourceSlices instead of (or as well as) a device
	// plugin advertising gpuResource. A node is then ready for work when either its
	// allocatable gpuResource or the devices its driver's ResourceSlices publish reach the
	// VM's vGPU count, and pending pods whose ResourceClaims ask for devices of the class
	// count as demand (docs/demand.md, "Claims").
	// +optional
	DRA *DRASpec `json:"dra,omitempty"`
}

// DRASpec names a pool's GPUs in Dynamic Resource Allocation (resource.k8s.io/v1).
type DRASpec struct {
	// DeviceClassName is the DeviceClass the pods' ResourceClaims ask for the pool's GPUs
	// with, such as gpu.nvidia.com: a claim's request (exactly, or an alternative of
	// firstAvailable) of this class counts as demand for the layouts whose nodes could
	// take the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message=`readiness.dra.deviceClassName must be a DeviceClass name (a DNS subdomain, such as gpu.nvidia.com)`,messageExpression=`'readiness.dra.deviceClassName must be a DeviceClass name (a DNS subdomain: lower case letters, digits, - and ., such as gpu.nvidia.com), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.trim().lowerAscii() != self && self.trim().lowerAscii().matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$') ? ': write ' + strings.quote(self.trim().lowerAscii()) : '')`
	DeviceClassName string `json:"deviceClassName"`

	// Driver is the DRA driver whose ResourceSlices publish a node's GPUs (spec.driver of
	// the slices, such as gpu.nvidia.com): the devices of the node's slices of this
	// driver, in each pool's newest generation, are the GPUs it publishes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message=`readiness.dra.driver must be a DRA driver name (a DNS subdomain of at most 63 characters, such as gpu.nvidia.com)`,messageExpression=`'readiness.dra.driver must be a DRA driver name (a DNS subdomain of at most 63 characters: lower case letters, digits, - and ., such as gpu.nvidia.com), not ' + strings.quote(self) + (self.trim().lowerAscii() != self && self.trim().lowerAscii().matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$') ? ': write ' + strings.quote(self.trim().lowerAscii()) : '')`
	Driver string `json:"driver"`
}

// DrainJobPods says how a drain treats the pods of Jobs.
// +kubebuilder:validation:Enum=Evict;WaitCompleted
type DrainJobPods string

const (
	// JobPodsEvict evicts Job pods like any other pod.
	JobPodsEvict DrainJobPods = "Evict"
	// JobPodsWaitCompleted never evicts a Job's pod: the drain waits until it completes
	// (as Cluster API's MachineDrainRule behavior WaitCompleted), within drain.timeout.
	JobPodsWaitCompleted DrainJobPods = "WaitCompleted"
)

// DrainSpec controls how nodes are drained.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.maxHold) || !has(self.timeout) || !self.maxHold.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || !self.timeout.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self.maxHold) < duration(self.timeout)`,fieldPath=`.maxHold`,message=`drain.maxHold must be shorter than drain.timeout, which bounds the whole drain: shorten maxHold (such as to half of timeout) or raise timeout above it`,messageExpression=`'drain.maxHold must be shorter than drain.timeout, which bounds the whole drain (held pods are evicted at maxHold and must then leave within timeout), not ' + strings.quote(self.maxHold) + ' with timeout ' + strings.quote(self.timeout) + ': write a maxHold below ' + strings.quote(self.timeout) + ' (such as half of it, leaving the evicted pods their grace period), or raise drain.timeout above ' + strings.quote(self.maxHold)`
type DrainSpec struct {
	// Timeout is how long a drain may take.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`drain.timeout must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'drain.timeout must be a duration such as 10m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out for the default of 10m' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) > duration('0s')`,message=`drain.timeout must be positive, such as 10m`,messageExpression=`'drain.timeout must be positive, such as 10m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// OnTimeout says what happens when the timeout passes.
	// +kubebuilder:default=Abort
	// +optional
	OnTimeout DrainTimeoutAction `json:"onTimeout,omitempty"`

	// DeleteEmptyDirData allows evicting pods that use emptyDir volumes (their data is
	// lost), as kubectl drain --delete-emptydir-data does.
	// +optional
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`

	// JobPods says how the pods of Jobs are drained: Evict (the default) or
	// WaitCompleted, which waits for them to finish instead, within timeout. A pod
	// annotated gpupool.dev/do-not-disrupt: "true" is always waited for, whatever its
	// owner, within timeout (within maxHold when it is set).
	// +kubebuilder:default=Evict
	// +optional
	JobPods DrainJobPods `json:"jobPods,omitempty"`

	// GracePeriodSeconds overrides the pods' termination grace period when evicting.
	// +kubebuilder:validation:Minimum=0
	// +optional
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
	// MaxHold bounds how long the pods that hold a drain are waited for on one node,
	// counted from when gpupool started that node's drain: pods annotated
	// gpupool.dev/do-not-disrupt: "true", Job pods under jobPods: WaitCompleted, pods
	// without a controller and pods with emptyDir volumes (without deleteEmptyDirData).
	// After it they are evicted through the eviction API like any other pod, so a
	// PodDisruptionBudget still applies, within timeout. Unset: they are honoured until
	// timeout, and onTimeout decides. It must be shorter than timeout. Set it when
	// tenants who may not stop a switch can create pods on the pool's nodes
	// (docs/operations.md, "Bounding holds").
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$')`,message=`drain.maxHold must be a duration such as 5m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit)`,messageExpression=`'drain.maxHold must be a duration such as 5m, 90m or 1h30m (units h, m, s; no days, years or ISO 8601: write 24h for a day; at most 99999 per unit), not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self == '' ? ': leave it out to honour holds until drain.timeout' : self.trim() != self && self.trim().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': remove the whitespace around it (such as a pasted newline), write ' + strings.quote(self.trim()) : self.replace(' ', '').trim().lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.replace(' ', '').trim().lowerAscii()) : self.trim().matches('^[Pp]?[0-9]+[Dd]$') ? ': a day is 24h, a week 168h' : self.trim().matches('^[Pp][Tt]') && self.trim().substring(2).lowerAscii().matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') ? ': write ' + strings.quote(self.trim().substring(2).lowerAscii()) : '')`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^-?([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4}$') || duration(self) >= duration('0s')`,message=`drain.maxHold must be zero (holds never honoured) or positive, such as 5m`,messageExpression=`'drain.maxHold must be zero (holds never honoured) or positive, such as 5m, not ' + strings.quote(self.size() > 64 ? self.substring(0, 64) + '...' : self) + (self.startsWith('-') ? ': remove the minus sign' : '')`
	// +optional
	MaxHold *metav1.Duration `json:"maxHold,omitempty"`
}

// DesiredReason says why a layout is wanted.
type DesiredReason string

const (
	// DesiredByOverride means spec.override is in force.
	DesiredByOverride DesiredReason = "Override"
	// DesiredBySchedule means a window of spec.schedule is open.
	DesiredBySchedule DesiredReason = "Schedule"
	// DesiredByDefault means no override and no window applies.
	DesiredByDefault DesiredReason = "Default"
)

// Phase summarises the pool's state for humans. Automation should read conditions.
type Phase string

const (
	// PhasePending means the pool has not been observed yet.
	PhasePending Phase = "Pending"
	// PhaseSteady means the active layout is the wanted one.
	PhaseSteady Phase = "Steady"
	// PhaseTransitioning means a switch to another layout is in progress.
	PhaseTransitioning Phase = "Transitioning"
	// PhaseBlocked means the wanted layout cannot be reached now; see the conditions.
	PhaseBlocked Phase = "Blocked"
	// PhasePaused means spec.paused is set.
	PhasePaused Phase = "Paused"
)

// Condition types.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
	ConditionStalled     = "Stalled"
	ConditionPaused      = "Paused"
	// ConditionReconciling is True while gpupool changes the pool (a transition, a
	// repair or a way back). It is the condition kstatus (Flux, Argo CD, kubectl wait
	// --for=condition=Reconciling=false) reads to tell "in progress" from "current".
	ConditionReconciling = "Reconciling"
)

// Step is where a worker is in a transition, named for what must happen next.
type Step string

// Worker steps.
const (
	StepNone                Step = ""
	StepDrainRequired       Step = "DrainRequired"
	StepParkRequired        Step = "ParkRequired"
	StepPowerOffRequired    Step = "PowerOffRequired"
	StepReconfigureRequired Step = "ReconfigureRequired"
	StepPowerOnRequired     Step = "PowerOnRequired"
	StepWaitNodeReady       Step = "WaitNodeReady"
	StepRelabelRequired     Step = "RelabelRequired"
	StepUncordonRequired    Step = "UncordonRequired"
)

// NextTransition is the next scheduled change of the wanted layout.
type NextTransition struct {
	// Layout is the layout wanted from At on.
	Layout string `json:"layout"`
	// At is when the switch starts (the boundary minus schedule.leadTime).
	At metav1.Time `json:"at"`
}

// TransitionStatus is the switch in progress.
type TransitionStatus struct {
	// ID identifies the transition in events and logs.
	ID string `json:"id"`
	// From is the layout the pool had when the transition started.
	// +optional
	From string `json:"from,omitempty"`
	// To is the layout the transition makes.
	To string `json:"to"`
	// Count is, when To is a layout by count, how many GPUs it converts; a transition
	// whose To is the active layout is a step of its count (countFromDemand).
	// +optional
	Count int32 `json:"count,omitempty"`
	// FromCount is status.activeCount when the transition started.
	// +optional
	FromCount int32 `json:"fromCount,omitempty"`
	// StartTime is when the transition started.
	StartTime metav1.Time `json:"startTime"`
	// Generation is the spec generation the transition was started for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// AbortedTime is set when the transition was aborted (a drain timed out with
	// drain.onTimeout: Abort). An aborted transition is not retried until the spec
	// changes or another layout is wanted.
	// +optional
	AbortedTime *metav1.Time `json:"abortedTime,omitempty"`
	// Reason and Cause say why the switch started: Override, Demand, Schedule or
	// Default, and in words (for Demand, the pods that caused it).
	// +optional
	Reason DesiredReason `json:"reason,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Cause string `json:"cause,omitempty"`
	// Message says why the transition was aborted.
	// +optional
	Message string `json:"message,omitempty"`
}

// TaskReference points at a vSphere task started by gpupool. It is written in two
// steps, so that a task is started at most once whatever fails in between: first the
// intent (operation, no ID) is persisted, then vCenter is asked, then the ID is recorded.
// A worker found with an intent and no ID is resolved by looking for the task in vCenter
// before anything new is started.
type TaskReference struct {
	// ID is the task's managed object id, such as task-123. Empty while only the intent
	// is recorded.
	// +optional
	ID string `json:"id,omitempty"`
	// Operation is what the task does: PowerOn, PowerOff, Suspend or Reconfigure.
	Operation string `json:"operation"`
	// StartTime is when gpupool decided to start the task.
	StartTime metav1.Time `json:"startTime"`
	// KnownTasks are the VM's recent tasks of the same operation that vCenter listed when
	// the intent was recorded; none of them is the task this intent starts.
	// +optional
	// +listType=atomic
	KnownTasks []string `json:"knownTasks,omitempty"`
}

// WorkerStatus is the observed state of one VM of the pool.
type WorkerStatus struct {
	// VM is the VM as named in the layouts.
	VM string `json:"vm"`
	// Node is the Kubernetes node of the VM, if one was found.
	// +optional
	Node string `json:"node,omitempty"`
	// Host is the ESXi host the VM is on.
	// +optional
	Host string `json:"host,omitempty"`
	// GPU is the PCI id of the physical GPU the VM's vGPU runs on; for a VM with
	// several vGPUs (workers[].vgpus), the PCI ids of their GPUs, comma-separated in
	// the order of the VM's devices (such as 0000:3b:00.0,0000:af:00.0).
	// +optional
	GPU string `json:"gpu,omitempty"`
	// Profile is the vGPU profile configured on the VM.
	// +optional
	Profile string `json:"profile,omitempty"`
	// PowerState is poweredOn, poweredOff or suspended.
	// +optional
	PowerState string `json:"powerState,omitempty"`
	// Step is what must happen next to this worker in the current transition.
	// +optional
	Step Step `json:"step,omitempty"`
	// StepStartTime is when the current step started.
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// Task is the vSphere task in flight for this worker.
	// +optional
	Task *TaskReference `json:"task,omitempty"`
	// Attempts counts failed attempts of the current step, for backoff.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// NextRetryTime is when a failed step may be tried again.
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`
	// GuestShutdownTime is when gpupool asked the guest to shut down; the VM is powered
	// off hard when spec.guestShutdownTimeout has passed since.
	// +optional
	GuestShutdownTime *metav1.Time `json:"guestShutdownTime,omitempty"`
	// Message explains the current step or the last failure.
	// +optional
	Message string `json:"message,omitempty"`
}

// GPUPoolProfileStatus is the observed state of the pool.
type GPUPoolProfileStatus struct {
	// ObservedGeneration is the generation of the spec last acted upon.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ActiveLayout is the layout the pool runs now, once a transition has completed.
	// +optional
	ActiveLayout string `json:"activeLayout,omitempty"`
	// ActiveCount is, when the active layout is a layout by count, how many GPUs it
	// converts: its convert.count, or the count demand sized it to (countFromDemand).
	// +optional
	ActiveCount int32 `json:"activeCount,omitempty"`
	// DesiredLayout is the layout wanted now.
	// +optional
	DesiredLayout string `json:"desiredLayout,omitempty"`
	// DesiredReason says why DesiredLayout is wanted: Override, Demand, Schedule or
	// Default.
	// +optional
	DesiredReason DesiredReason `json:"desiredReason,omitempty"`
	// Demand is the demand gpupool saw per layout and what it decided (spec.demand).
	// +optional
	Demand *DemandStatus `json:"demand,omitempty"`
	// Kueue is what the pool holds in Kueue (spec.kueue): set from the first pass with
	// spec.kueue, and kept after spec.kueue is removed until the pool's admission checks
	// are released (docs/kueue.md).
	// +optional
	Kueue *KueueStatus `json:"kueue,omitempty"`
	// NextTransition is the next scheduled change of the wanted layout.
	// +optional
	NextTransition *NextTransition `json:"nextTransition,omitempty"`
	// Phase summarises the state for humans.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Transition is the switch in progress, if any.
	// +optional
	Transition *TransitionStatus `json:"transition,omitempty"`
	// Workers is the state of every VM of the pool, one entry per VM. gpupool writes
	// the list whole (atomic), so that the API server keeps no ownership per entry in
	// managedFields, which for a pool of 1,280 VMs was a third of the object. What can
	// be observed again (a task's id, a task ended, a step begun, messages) may reach
	// it about the manager's --status-write-interval (5s) after gpupool decided it;
	// intents, failures and a guest's shutdown are written at once.
	// +optional
	// +listType=atomic
	Workers []WorkerStatus `json:"workers,omitempty"`
	// Progress is "settled/total" over Workers: how many workers have no step left
	// (such as 3/5). It exists for the WORKERS column of kubectl get -o wide, which can
	// only show a field, not count a list.
	// +optional
	Progress string `json:"progress,omitempty"`
	// Conditions are Ready, Progressing, Reconciling, Degraded, Stalled and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Plan is a bounded preview of the steps of the transition in progress or, when the
	// pool is at its wanted layout, of the next scheduled one, as gpupool planned them
	// from what it last observed. It lets `kubectl gpupool plan` work with read access to
	// the pool only.
	// +optional
	Plan *PlanPreview `json:"plan,omitempty"`
	// History is the last transitions, newest first (at most 10). Events expire after an
	// hour; this does not.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	History []TransitionRecord `json:"history,omitempty"`
}

// PlanFor says which transition a plan preview is of.
// +kubebuilder:validation:Enum=Current;Next
type PlanFor string

const (
	// PlanForCurrent is the way to the layout wanted now (a transition, a repair or a way
	// back to the previous layout).
	PlanForCurrent PlanFor = "Current"
	// PlanForNext is the way to status.nextTransition.layout, planned from the state
	// observed now; it is planned again when the switch starts.
	PlanForNext PlanFor = "Next"
)

// PlanPreview is a bounded summary of a plan: per host its first steps, and counts.
type PlanPreview struct {
	// For is Current or Next.
	For PlanFor `json:"for"`
	// Layout is the layout the plan makes.
	Layout string `json:"layout"`
	// At is when the next transition starts (For: Next only).
	// +optional
	At *metav1.Time `json:"at,omitempty"`
	// Generation is the spec generation the plan was made for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Steps counts all steps of the plan, shown or not.
	Steps int32 `json:"steps"`
	// WaitingSteps counts the steps that wait for GPUs other steps free.
	// +optional
	WaitingSteps int32 `json:"waitingSteps,omitempty"`
	// Hosts are the hosts with steps, by name; each lists its first steps in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Hosts []HostPlanPreview `json:"hosts,omitempty"`
	// Problems say why the layout cannot be reached (then there are no steps).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Problems []string `json:"problems,omitempty"`
	// Truncated says what the preview leaves out, such as "+120 more steps on 3 hosts".
	// +optional
	Truncated string `json:"truncated,omitempty"`
	// Conversion is the choice of a layout by count: which GPUs it converts and why.
	// +optional
	Conversion *ConversionPreview `json:"conversion,omitempty"`
}

// ConversionPreview is what gpupool chose for a layout by count (docs/count-layouts.md).
type ConversionPreview struct {
	// Profile is the converted profile; Count the GPUs converted.
	Profile string `json:"profile"`
	Count   int32  `json:"count"`
	// Evicted are the GPU pods the choice evicts; Cost weighs them with the disruption
	// weights.
	Evicted int32 `json:"evicted"`
	Cost    int64 `json:"cost"`
	// Chosen are the GPUs converted, with why.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Chosen []GPUChoicePreview `json:"chosen,omitempty"`
	// NotChosen are the first GPUs that could have been converted and were not, with why.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	NotChosen []GPUChoicePreview `json:"notChosen,omitempty"`
	// Ineligible counts the GPUs of the candidates' hosts that cannot be converted
	// (kubectl gpupool plan --live lists them).
	// +optional
	Ineligible int32 `json:"ineligible,omitempty"`
	// Truncated says what the lists leave out.
	// +optional
	Truncated string `json:"truncated,omitempty"`
}

// GPUChoicePreview is one physical GPU a layout by count considered.
type GPUChoicePreview struct {
	// Host is the ESXi host; GPU the GPU's PCI id.
	Host string `json:"host"`
	GPU  string `json:"gpu"`
	// Why it was chosen or not: the pods it evicts, the VMs it displaces.
	// +kubebuilder:validation:MaxLength=512
	Why string `json:"why"`
}

// HostPlanPreview is the first steps on one ESXi host.
type HostPlanPreview struct {
	// Host is the ESXi host.
	Host string `json:"host"`
	// Steps are the host's first steps, in the order they run.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Steps []PlanStepPreview `json:"steps"`
	// More counts the host's steps not listed.
	// +optional
	More int32 `json:"more,omitempty"`
}

// PlanStepPreview is one step of a plan preview.
type PlanStepPreview struct {
	// VM is the VM the step acts on.
	VM string `json:"vm"`
	// Action is what the step does, as a worker step.
	Action Step `json:"action"`
	// Profile is the vGPU profile concerned.
	// +optional
	Profile string `json:"profile,omitempty"`
	// Reason says why.
	// +optional
	Reason string `json:"reason,omitempty"`
	// WaitsForGPUs: the step waits until earlier steps free GPUs on its host.
	// +optional
	WaitsForGPUs bool `json:"waitsForGPUs,omitempty"`
}

// TransitionResult says how a transition ended.
// +kubebuilder:validation:Enum=Completed;Aborted;Superseded
type TransitionResult string

const (
	// TransitionCompleted: the layout became active.
	TransitionCompleted TransitionResult = "Completed"
	// TransitionAborted: a drain timed out with drain.onTimeout: Abort.
	TransitionAborted TransitionResult = "Aborted"
	// TransitionSuperseded: another layout became wanted before it completed.
	TransitionSuperseded TransitionResult = "Superseded"
)

// TransitionRecord is one past transition.
type TransitionRecord struct {
	// ID is the transition's id, as in events.
	ID string `json:"id"`
	// From is the layout the pool had when the transition started.
	// +optional
	From string `json:"from,omitempty"`
	// To is the layout the transition made.
	To string `json:"to"`
	// FromCount and Count are, for layouts by count, how many GPUs were converted before
	// and after: a partial layout, or a step of its count.
	// +optional
	FromCount int32 `json:"fromCount,omitempty"`
	// +optional
	Count int32 `json:"count,omitempty"`
	// Reason says why To was wanted: Override, Schedule or Default.
	// +optional
	Reason DesiredReason `json:"reason,omitempty"`
	// StartTime is when the transition started.
	StartTime metav1.Time `json:"startTime"`
	// EndTime is when it completed, was aborted or was superseded.
	EndTime metav1.Time `json:"endTime"`
	// Result is Completed, Aborted or Superseded.
	Result TransitionResult `json:"result"`
	// SlowestWorker is the VM that held the transition last: a worker still busy on the
	// pass before the end.
	// +optional
	SlowestWorker string `json:"slowestWorker,omitempty"`
	// Message says more, such as why it was aborted.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// GPUPoolProfile reshapes a pool of vSphere vGPU worker VMs on a schedule.
//
// The name is the value of the gpupool.dev/pool label on the pool's nodes, so it must be
// a valid label value: at most 63 characters (the object-name rules do the rest).
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name is longer than 63 characters; gpupool writes the pool name into the node label gpupool.dev/pool, whose values are at most 63 characters: choose a shorter name",messageExpression=`'metadata.name is longer than 63 characters: ' + strings.quote(self.metadata.name.size() > 64 ? self.metadata.name.substring(0, 64) + '...' : self.metadata.name) + '; gpupool writes the pool name into the node label gpupool.dev/pool, whose values are at most 63 characters: choose a shorter name'`
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gpp,categories=gpupool
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.activeLayout`
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.status.desiredLayout`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextTransition.at`
// +kubebuilder:printcolumn:name="Workers",type=string,JSONPath=`.status.progress`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUPoolProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUPoolProfileSpec   `json:"spec,omitempty"`
	Status GPUPoolProfileStatus `json:"status,omitempty"`
}

// GPUPoolProfileList is a list of GPUPoolProfile.
//
// +kubebuilder:object:root=true
type GPUPoolProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUPoolProfile `json:"items"`
}
