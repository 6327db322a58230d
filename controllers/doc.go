// Package controllers holds the GPUPoolProfile reconciler: one pass observes the pool's
// world, decides, hands the due steps to the executor and records what happened in the
// status.
//
// A pass, and what each part hands to the next:
//
//	desire ──► plan.Decision (the wanted layout; demand through internal/demand)
//	   │
//	tasks ───► the tasks in flight (execute.Follower), before anything they change is read
//	   │
//	observe ─► world.World (inventory, VMs by spec id, nodes, gaps, drained): nothing
//	   │       changes it afterwards
//	decide ──► plan.Plan and the layout it makes (pure: plan.Build over the World)
//	   │
//	act ─────► execute.Executor.Run(Input) ──► execute.Outcome (requeue, step errors,
//	   │       blocked drains, node waits, holds, an abort request)
//	summarize ► conditions and phase, once, from the facts; one status patch
//
// Where to look: Reconcile (gpupoolprofile_controller.go) fetches the pool, keeps the
// finalizer, runs the pass and patches the status once; the pass is the list of phases
// in phases.go (desire, paused, connect, tasks, observe, keep-aborted, decide, settled,
// act), each returning when to come back and whether the pass ends there; scope.go says
// which phase sets which field of the pass's scope. Observation is in observe.go (the
// World and the matching of VMs to nodes in internal/world; what a layout's demand is
// in internal/demand); the steps in internal/execute (act.go hands them over and
// takes the Outcome: the executor is the only writer of the workers' status); drains of
// one node in internal/drain; a transition's start and end in transition.go (every end
// through endTransition, an abort when the Outcome asks); node release and pool deletion in lifecycle.go; when
// nodes are marked in nodestate.go and nodemarks.go, and what they carry (meta, cordon,
// state label, warning, readiness) in internal/nodes, under the keys of
// api/v1alpha1/keys.go (aliased in keys.go); conditions and phase in status.go
// (summarize, the only place that sets them). `make structure` measures the package's
// file graph (hack/structure).
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
