// Package controllers holds the GPUPoolProfile reconciler: it observes nodes, pods and
// the vSphere inventory, asks the planner what is due, does one non-blocking step per
// worker and records progress in status.
//
// Where to look: Reconcile (gpupoolprofile_controller.go) fetches the pool, keeps the
// finalizer, runs the pass and patches the status once; the pass is the list of phases
// in phases.go (desire, paused, connect, tasks, observe, keep-aborted, decide, settled,
// act), each returning when to come back and whether the pass ends there. Observation is in
// observe.go (and demand.go for what a layout's demand is); the steps in act.go,
// execute.go and tasks.go; drains in drain.go (the cordon, the concurrency and the
// timeout here, the drain of one node in internal/drain); a transition's start and end
// in transition.go (every end through endTransition); node release and pool deletion in
// lifecycle.go; when nodes are marked in nodestate.go and nodemarks.go, and what they
// carry (meta, cordon, state label, warning, readiness) in internal/nodes, under the
// keys of api/v1alpha1/keys.go (aliased in keys.go); conditions and phase in status.go
// (summarize, the only place that sets them).
//
// Beside the pool reconciler, SetupWithManager registers two controllers of their own,
// keyed by pool, that never slow its pass: the demand watch (demandwatch.go), which wakes
// the pass when demand's decision changes, and the Kueue controller (KueueReconciler,
// kueuecontroller.go; the quota in kueue.go, the admission checks in kueuechecks.go),
// which reads the pool's persisted status and the clock and writes only Kueue's objects
// and status.kueue. Kueue's events wake those two, never the pool pass; the pool's
// deletion pass calls the Kueue controller's release before its finalizer goes.
package controllers

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/status,verbs=patch
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/finalizers,verbs=update
