// Package controllers holds the GPUPoolProfile reconciler: it observes nodes, pods and
// the vSphere inventory, asks the planner what is due, does one non-blocking step per
// worker and records progress in status.
package controllers

// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/status,verbs=patch
// +kubebuilder:rbac:groups=gpupool.dev,resources=gpupoolprofiles/finalizers,verbs=update
