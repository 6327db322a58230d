// Package nodes is what gpupool writes on a Kubernetes Node and reads from one: the
// labels and taints of a worker (Meta), its cordon, its state label and draining-soon
// warning (the marks), whether it is ready for work, and which node updates a pool must
// react to.
//
// Everything here is a pure function of a node, a spec or both: no client, no clock.
// The reconciler (package controllers) observes nodes, calls in here to decide what they
// should carry, and patches them. Every key is defined once, in api/v1alpha1/keys.go.
package nodes
