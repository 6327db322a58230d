package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/nodes"
)

// Cluster API annotations gpupool sets on a parked node's Machine and infrastructure
// machine, so that a MachineHealthCheck does not replace the parked (NotReady) node and
// the infrastructure provider does not power the VM back on or flag it as failed. Which of them gpupool added is recorded in annotationAddedCAPI.
const (
	capiMachineAnnotation   = clusterv1.MachineAnnotation          // on the Node: the Machine's name
	capiNamespaceAnnotation = clusterv1.ClusterNamespaceAnnotation // on the Node: the Machine's namespace
	capiSkipRemediation     = clusterv1.MachineSkipRemediationAnnotation
	capiPaused              = clusterv1.PausedAnnotation
)

// errMachineUnreadable: the node belongs to a Cluster API Machine that cannot be read
// (the Machine API is not served, not allowed, or of another version), so it cannot be
// protected and its VM must not be parked.
var errMachineUnreadable = errors.New("the node's Cluster API Machine cannot be read")

// machineOf returns the key of the Cluster API Machine a node belongs to.
func machineOf(n *corev1.Node) (client.ObjectKey, bool) {
	name := n.Annotations[capiMachineAnnotation]
	if name == "" {
		return client.ObjectKey{}, false
	}
	ns := n.Annotations[capiNamespaceAnnotation]
	if ns == "" {
		ns = "default"
	}
	return client.ObjectKey{Namespace: ns, Name: name}, true
}

// capiObjects returns the node's Machine and its infrastructure machine, as
// unstructured objects so that any infrastructure provider works.
func (r *GPUPoolProfileReconciler) capiObjects(ctx context.Context, n *corev1.Node) ([]*unstructured.Unstructured, error) {
	key, ok := machineOf(n)
	if !ok {
		return nil, nil
	}
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	if err := r.Client.Get(ctx, key, m); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil // the Machine is gone: nothing to protect
		case meta.IsNoMatchError(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err):
			return nil, fmt.Errorf("%w: node %s names Machine %s (annotation %s), but %s Machines cannot be read (%w); serve and allow that API for gpupool, or remove the annotation",
				errMachineUnreadable, n.Name, key, capiMachineAnnotation, clusterv1.GroupVersion, err)
		}
		return nil, fmt.Errorf("getting Machine %s: %w", key, err)
	}
	objs := []*unstructured.Unstructured{m}
	group, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "apiGroup")
	kind, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
	name, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
	if kind == "" || name == "" {
		return objs, nil
	}
	mapping, err := r.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: group, Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("%w: finding the API of infrastructure machine %s %s: %w", errMachineUnreadable, kind, name, err)
	}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, infra); err != nil {
		if apierrors.IsNotFound(err) {
			return objs, nil
		}
		return nil, fmt.Errorf("%w: getting %s %s: %w", errMachineUnreadable, kind, name, err)
	}
	objs = append(objs, infra)
	if kind != "VSphereMachine" {
		return objs, nil
	}
	// CAPV powers a VM on from its VSphereVM (owned by the VSphereMachine, same name),
	// whose controller honours only the VSphereVM's own pause: pausing the
	// VSphereMachine alone would let CAPV resume a parked VM.
	vm := &unstructured.Unstructured{}
	vm.SetGroupVersionKind(mapping.GroupVersionKind.GroupVersion().WithKind("VSphereVM"))
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, vm); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return objs, nil
		}
		return nil, fmt.Errorf("%w: getting VSphereVM %s: %w", errMachineUnreadable, name, err)
	}
	return append(objs, vm), nil
}

// protectMachine annotates the Machine with skip-remediation and pauses its
// infrastructure machine before gpupool parks the node's VM.
func (r *GPUPoolProfileReconciler) protectMachine(ctx context.Context, n *corev1.Node) error {
	return r.markMachine(ctx, n, true)
}

// releaseMachine removes what protectMachine added, once the node is back (or the pool
// is deleted).
func (r *GPUPoolProfileReconciler) releaseMachine(ctx context.Context, n *corev1.Node) error {
	return r.markMachine(ctx, n, false)
}

// markMachine sets (or removes) skip-remediation on the node's Machine and paused on its
// infrastructure machine (and, for CAPV, its VSphereVM).
func (r *GPUPoolProfileReconciler) markMachine(ctx context.Context, n *corev1.Node, set bool) error {
	objs, err := r.capiObjects(ctx, n)
	if err != nil {
		return err
	}
	for i, o := range objs {
		ann := capiSkipRemediation
		if i > 0 {
			ann = capiPaused
		}
		if err := r.patchAnnotation(ctx, o, ann, set); err != nil {
			return err
		}
	}
	return nil
}

// patchAnnotation adds (set) or removes an annotation, recording on the object whether
// gpupool added it: an annotation that was there before gpupool came is never removed.
func (r *GPUPoolProfileReconciler) patchAnnotation(ctx context.Context, o *unstructured.Unstructured, key string, set bool) error {
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	added := nodes.SplitList(ann[annotationAddedCAPI])
	_, present := ann[key]
	ours := slices.Contains(added, key)
	switch {
	case set && !present:
		ann[key] = ""
		added = append(added, key)
	case !set && ours:
		delete(ann, key)
		added = slices.DeleteFunc(added, func(s string) bool { return s == key })
	default:
		return nil
	}
	before := o.DeepCopy()
	nodes.SetOrDelete(ann, annotationAddedCAPI, strings.Join(added, ","))
	o.SetAnnotations(ann)
	if err := r.Client.Patch(ctx, o, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("annotating %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}
