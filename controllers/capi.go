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
	"sigs.k8s.io/controller-runtime/pkg/log"

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

// errMachineNotTrusted: the node's annotations name a Machine whose status.nodeRef does
// not name the node. A node's own kubelet can write the node's annotations, so they are
// only a hint: gpupool never writes to a Machine that does not say it is this node's.
// The VM is held rather than parked unprotected: the node may well be a Cluster API node
// whose annotation was changed, and a MachineHealthCheck would then replace its parked VM.
var errMachineNotTrusted = errors.New("the Machine the node's annotations name is not the node's")

// machineOf returns the key of the Cluster API Machine a node's annotations name. It is
// a hint to be checked against the Machine's status.nodeRef (trustMachine), never a
// reference on its own.
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

// trustMachine says whether the Machine records the node as its own: status.nodeRef
// names it, and carries its uid when it records one (Cluster API v1beta1 did, v1beta2
// records the name only). The error says what does not match.
func trustMachine(m *unstructured.Unstructured, n *corev1.Node) error {
	name, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	uid, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "uid")
	key := client.ObjectKeyFromObject(m)
	switch {
	case name == "":
		return fmt.Errorf("%w: node %s names Machine %s (annotation %s), whose status.nodeRef names no node yet; the VM is parked once Cluster API records the node",
			errMachineNotTrusted, n.Name, key, capiMachineAnnotation)
	case name != n.Name:
		return fmt.Errorf("%w: node %s names Machine %s (annotation %s), whose status.nodeRef names node %s; gpupool neither parks the VM nor touches that Machine: correct the node's annotations %s and %s",
			errMachineNotTrusted, n.Name, key, capiMachineAnnotation, name, capiMachineAnnotation, capiNamespaceAnnotation)
	case uid != "" && n.UID != "" && uid != string(n.UID):
		return fmt.Errorf("%w: node %s names Machine %s (annotation %s), whose status.nodeRef names node %s with uid %s, not this node's %s (the node was re-created); the VM is parked once Cluster API records the node",
			errMachineNotTrusted, n.Name, key, capiMachineAnnotation, name, uid, n.UID)
	}
	return nil
}

// capiObjects returns the node's Machine and its infrastructure machine, as
// unstructured objects so that any infrastructure provider works. The Machine is the
// one the node's annotations name only if its status.nodeRef names the node; the
// infrastructure machine is the Machine's spec.infrastructureRef, in the Machine's
// namespace; CAPV's VSphereVM is the one its VSphereMachine owns. Nothing is reached by a
// name the node alone gives.
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
	if err := trustMachine(m, n); err != nil {
		return nil, err
	}
	objs := []*unstructured.Unstructured{m}
	infra, err := r.infraMachine(ctx, m)
	if infra == nil || err != nil {
		return objs, err
	}
	objs = append(objs, infra)
	if infra.GetKind() != "VSphereMachine" {
		return objs, nil
	}
	vm, err := r.vsphereVM(ctx, m, infra)
	if vm == nil || err != nil {
		return objs, err
	}
	return append(objs, vm), nil
}

// infraMachine reads the Machine's spec.infrastructureRef, in the Machine's namespace
// (nil when the Machine has none yet, or it is gone).
func (r *GPUPoolProfileReconciler) infraMachine(ctx context.Context, m *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	group, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "apiGroup")
	kind, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
	name, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
	if kind == "" || name == "" {
		return nil, nil
	}
	mapping, err := r.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: group, Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("%w: finding the API of infrastructure machine %s %s: %w", errMachineUnreadable, kind, name, err)
	}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: name}, infra); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: getting %s %s: %w", errMachineUnreadable, kind, name, err)
	}
	return infra, nil
}

// vsphereVM finds the VSphereVM the VSphereMachine owns (nil when there is none). CAPV
// powers a VM on from its VSphereVM, whose controller honours only the VSphereVM's own
// pause: pausing the VSphereMachine alone would let CAPV resume a parked VM. CAPV names
// the VSphereVM after the Machine (its default naming strategy) or, in older releases,
// after the VSphereMachine, and always sets the VSphereMachine as its owner: a candidate
// the VSphereMachine does not own (by uid) is not touched.
func (r *GPUPoolProfileReconciler) vsphereVM(ctx context.Context, m, infra *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	names := []string{m.GetName()}
	if infra.GetName() != m.GetName() {
		names = append(names, infra.GetName())
	}
	for _, name := range names {
		vm := &unstructured.Unstructured{}
		vm.SetGroupVersionKind(infra.GroupVersionKind().GroupVersion().WithKind("VSphereVM"))
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: infra.GetNamespace(), Name: name}, vm); err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				continue
			}
			return nil, fmt.Errorf("%w: getting VSphereVM %s: %w", errMachineUnreadable, name, err)
		}
		if ownedByObject(vm, infra) {
			return vm, nil
		}
	}
	return nil, nil
}

// ownedByObject says whether o has owner among its ownerReferences (same kind and uid).
func ownedByObject(o, owner *unstructured.Unstructured) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == owner.GetKind() && ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
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
	if !set && errors.Is(err, errMachineNotTrusted) {
		// Note: releasing must not touch that Machine either, or a node could lift
		// gpupool's protection from another parked node's Machine by naming it.
		log.FromContext(ctx).Info("Not releasing a Machine that is not the node's", "node", n.Name, "reason", err.Error())
		return nil
	}
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
