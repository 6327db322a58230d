// Package controllers holds the GPUPoolProfile reconciler: it observes nodes, pods and
// the vSphere inventory, asks the planner what is due, does one non-blocking step per
// worker and records progress in status.
//
// Where to look: the pass in gpupoolprofile_controller.go (observe.go, then the planner,
// then execute.go and tasks.go for the steps, drain.go for drains: the cordon, the
// concurrency and the timeout here, the drain of one node in internal/drain); a
// transition's start and end in transition.go (every end through endTransition); node
// release and pool deletion in lifecycle.go; when nodes are marked in nodestate.go and
// nodemarks.go, and what they carry (meta, cordon, state label, warning, readiness) in
// internal/nodes, under the keys of api/v1alpha1/keys.go (aliased in keys.go);
// conditions and phase in status.go.
package controllers

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/status,verbs=patch
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/finalizers,verbs=update
