package controllers

// The field managers gpupool's writes go under (docs/gitops.md). A GitOps tool that
// owns an object the operator writes to (a Node's labels and taints, a ClusterQueue's
// quota, a Machine's annotations) leaves the fields these managers own alone when told
// to (Argo CD's ignoreDifferences.managedFieldsManagers; Flux's server-side apply does
// so by itself for fields it does not apply).
const (
	// FieldOwner is the pool controller's: nodes, Machines, the pool's status and
	// finalizer, the requests' status. The manager wraps its client with it.
	FieldOwner = "gpupool"
	// FieldOwnerKueue is the Kueue controller's: ClusterQueues' nominalQuota,
	// AdmissionChecks, Workloads' admission check states, the pool's status.kueue.
	FieldOwnerKueue = "gpupool-kueue"
)
