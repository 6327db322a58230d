package v1alpha1

// The gpupool.dev keys: every label, taint and annotation gpupool writes or reads on
// Nodes, Pods and Kueue objects, and the values of the node state label, in one place
// (as NVIDIA's gpu-operator keeps its keys in consts.go), so that the controllers, the
// webhook, the kubectl plugin, the local environment and the tests spell each key once.
//
// Kubebuilder markers and comments in the API types spell some of these keys as
// literals, because the generated CRD needs them verbatim.
//
// Not here: the simulator's own keys (gpupool.dev/sim-*), which only the test world sets
// and reads; they live in test/cluster next to the kwok stages that spell them.

// KeyPrefix is the DNS prefix of gpupool's own keys. The webhook refuses layout
// nodeLabels, taints and readiness labels under it: gpupool manages them itself.
const KeyPrefix = "gpupool.dev"

// Node labels.
const (
	// LabelPool names the pool a node serves. The controller sets it on a node when it
	// relabels it for its layout (and on a parked node) and removes it when the node
	// leaves the pool; the controller reads it to find the pool's nodes (demand, events,
	// node marks), and workloads select on it.
	LabelPool = KeyPrefix + "/pool"
	// LabelLayout names the layout a node serves. Set by the controller at the relabel
	// step, read by the controller's demand reader and by workloads' node selectors.
	LabelLayout = KeyPrefix + "/layout"
	// LabelProfile is the vGPU profile of the node's VM (for example grid_p100-4q). Set
	// by the controller at the relabel step, read by workloads' node selectors.
	LabelProfile = KeyPrefix + "/vgpu-profile"
	// LabelMemoryMiB is the frame buffer of one vGPU of the node's VM, in MiB. Set by the
	// controller at the relabel step, read by workloads' node selectors.
	LabelMemoryMiB = KeyPrefix + "/vgpu-memory-mib"
	// LabelParked is "true" on the node of a parked VM. Set by the controller when it
	// parks a worker, read by the controller (demand, events, finalize) and the tests.
	LabelParked = KeyPrefix + "/parked"
	// LabelState publishes where each node of a pool is in a switch, as NVIDIA's
	// mig-manager publishes nvidia.com/mig.config.state, so that other tools
	// (schedulers, dashboards, a GPU operator) can react. Its values are the State*
	// constants. Set and removed by the controller (node marks); read by other tools,
	// the local environment and the tests.
	LabelState = KeyPrefix + "/state"
)

// Values of LabelState.
const (
	// StatePending: the VM runs its profile for the layout being made, but its node is
	// not serving it yet: it waits to be ready for work (Ready, GPUs advertised,
	// spec.readiness), to be relabelled or to be uncordoned.
	StatePending = "pending"
	// StateDraining: the node is being drained (step DrainRequired).
	StateDraining = "draining"
	// StateParked: the VM is not in the layout being made and is parked or being parked
	// (no step, or ParkRequired/PowerOffRequired, and not powered on or on its way off).
	StateParked = "parked"
	// StateReconfiguring: the VM is in the layout being made and is being powered off,
	// given its new vGPU profile or powered on (PowerOffRequired, ReconfigureRequired,
	// PowerOnRequired).
	StateReconfiguring = "reconfiguring"
	// StateReady: the VM runs in the layout being made and its node serves it: no step.
	StateReady = "ready"
	// StateFailed: the worker's last attempt failed and waits for a retry, its node was
	// not ready for work within nodeReadyTimeout, or gpupool may not act on the VM (held).
	StateFailed = "failed"
)

// Node taints.
const (
	// TaintParked (NoSchedule) keeps pods off the node of a parked VM. Set by the
	// controller when it parks a worker and removed when the worker runs again; the
	// scheduler reads it.
	TaintParked = KeyPrefix + "/parked"
	// TaintDrainingSoon (PreferNoSchedule) asks the scheduler to place new pods
	// elsewhere: the node will be drained at AnnotationDrainAt. Set by the controller
	// within warnAhead of a switch (node marks) and removed with the other marks.
	TaintDrainingSoon = KeyPrefix + "/draining-soon"
)

// Node annotations.
const (
	// AnnotationCordoned marks a node that gpupool cordoned; only such nodes are
	// uncordoned by gpupool. A node someone else cordoned stays cordoned. Set by the
	// controller's drain, read by the controller when it uncordons or finalizes.
	AnnotationCordoned = KeyPrefix + "/cordoned"
	// AnnotationManagedLabels lists the label keys gpupool set, so that it can remove
	// exactly those when the layout changes or the pool is deleted, and never an
	// admin's. Written and read by the controller only.
	AnnotationManagedLabels = KeyPrefix + "/managed-labels"
	// AnnotationManagedTaints lists the taints (key:effect) gpupool set. Written and
	// read by the controller only.
	AnnotationManagedTaints = KeyPrefix + "/managed-taints"
	// AnnotationDrainAt is when the node's drain starts (RFC 3339, UTC): the start of
	// the switch that drains it. Set by the controller with TaintDrainingSoon; a job on
	// the node can read how long it has, and the local environment reads it.
	AnnotationDrainAt = KeyPrefix + "/drain-at"
	// AnnotationMarkedBy names the pool that put its marks (LabelState, TaintDrainingSoon,
	// AnnotationDrainAt) on the node. Those marks go on every node a pool matches to a
	// worker, also on nodes that never get LabelPool (a VM parked before its first
	// relabel, a first power-on that never becomes ready for work), so the pool needs
	// its own record of where it put them to take them off again: when the node stops
	// being a worker's node (workers[].node edited, the VM removed) and when the pool is
	// deleted. Written and read by the controller only.
	AnnotationMarkedBy = KeyPrefix + "/marked-by"
)

// Pod annotations.
const (
	// AnnotationDoNotDisrupt on a pod, with the value "true", holds the drain of its node
	// until the pod finishes (as Karpenter's karpenter.sh/do-not-disrupt), within
	// drain.timeout; then drain.onTimeout applies. Set by users on their pods; read by
	// the controller's drain, its pod watch and its demand reader.
	AnnotationDoNotDisrupt = KeyPrefix + "/do-not-disrupt"

	// AnnotationResetDemandBudget on a pool resets demand's switch budget: when its value
	// changes (any value, such as the time it was set; it is never read as a time),
	// switches that started before gpupool saw the change no longer count toward
	// maxSwitchesPerDay. kubectl gpupool reset-budget sets it.
	AnnotationResetDemandBudget = KeyPrefix + "/reset-demand-budget"
)

// Keys on gpupool's own objects, Cluster API machines and Kueue objects.
const (
	// AnnotationAddedCAPI lists which Cluster API annotations (skip-remediation,
	// paused) gpupool added to a parked node's Machine or infrastructure machine, so
	// that it removes exactly those and never an admin's own. Written and read by the
	// controller only.
	AnnotationAddedCAPI = KeyPrefix + "/added-annotations"
	// FinalizerName is the finalizer on a GPUPoolProfile. Added by the controller on the
	// pool's first pass, removed by its finalize once the pool's nodes are released; the
	// API server holds the pool's deletion until then.
	FinalizerName = KeyPrefix + "/finalizer"
	// LabelKueuePool opts a Kueue ClusterQueue in to the pool named by its value: gpupool
	// sets the nominalQuota of the pool's flavors (spec.kueue.flavors) in that
	// ClusterQueue only, so that a pool cannot grant quota to a queue that did not ask for
	// it, and its AdmissionCheck acts only on the Workloads admitted to such a
	// ClusterQueue, so that two pools never answer one Workload. Set by the cluster admin, read by the controller's Kueue code. The same key as
	// LabelPool, on another kind of object.
	LabelKueuePool = LabelPool
	// KueueAdmissionCheckController is the spec.controllerName of the Kueue
	// AdmissionChecks gpupool answers: a Workload whose flavor maps to a layout that is
	// not ready for work is held with the time its layout comes, and released when the
	// layout's nodes are ready. Set by the cluster admin, read by the controller.
	KueueAdmissionCheckController = KeyPrefix + "/layout"
)

// FieldManagerCLI is the field manager of kubectl gpupool's writes (requests, the
// reset-budget annotation). Its name does not start with "kubectl": Flux's
// kustomize-controller takes over the fields of every manager whose name does, and
// removes them at its next apply when Git does not hold them (docs/gitops.md).
const FieldManagerCLI = "gpupool-cli"
