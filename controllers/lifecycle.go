package controllers

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// releaseRemoved gives back the nodes of VMs that were removed from the spec: once their
// last task has finished, everything gpupool put on the node (cordon, labels, taints)
// and on its Cluster API objects is removed, and the worker's status entry is dropped.
func (r *GPUPoolProfileReconciler) releaseRemoved(ctx context.Context, s *scope) {
	inSpec := map[string]bool{}
	for _, id := range poolVMs(&s.pool.Spec) {
		inSpec[id] = true
	}
	for i := range s.pool.Status.Workers {
		ws := &s.pool.Status.Workers[i]
		if inSpec[ws.VM] || ws.Task != nil || ws.Node == "" {
			continue
		}
		var n corev1.Node
		err := r.Client.Get(ctx, client.ObjectKey{Name: ws.Node}, &n)
		if apierrors.IsNotFound(err) {
			ws.Node = ""
			continue
		}
		if err == nil {
			err = r.releaseNode(ctx, &n)
		}
		if err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, fmt.Sprintf("releasing node %s of VM %s, removed from the spec: %v", ws.Node, ws.VM, err))
			continue
		}
		r.event(s, corev1.EventTypeNormal, "NodeReleased", "VM %s was removed from the spec: released node %s", ws.VM, ws.Node)
		ws.Node = ""
	}
}

// releaseNode removes what gpupool put on a node and on its Cluster API objects.
func (r *GPUPoolProfileReconciler) releaseNode(ctx context.Context, n *corev1.Node) error {
	if err := r.releaseMachine(ctx, n); err != nil {
		return err
	}
	if n.Labels[LabelPool] == "" && !hasMarks(n) && n.Annotations[AnnotationCordoned] == "" && n.Annotations[AnnotationManagedLabels] == "" && n.Annotations[AnnotationManagedTaints] == "" {
		return nil
	}
	return r.patchNode(ctx, n, removeMeta)
}

// finalize removes what gpupool added to the nodes of running VMs, then the finalizer.
// VMs are left as they are. Nodes of parked VMs keep the parked label and taint, their
// cordon and their Cluster API protection: lifting skip-remediation from a NotReady node
// would let a MachineHealthCheck delete the parked VM. Every node whose marks are the
// pool's (marksOf: the nodes it marked, labelled, or that its status names as workers'
// nodes, parked or not, relabelled or not) loses the state label and the
// draining-soon warning.
func (r *GPUPoolProfileReconciler) finalize(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, FinalizerName) {
		return ctrl.Result{}, nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pool's nodes: %w", err)
	}
	workerNodes := statusNodes(pool)
	for i := range nodes.Items {
		n := &nodes.Items[i]
		var err error
		switch {
		case n.Labels[LabelPool] == pool.Name && n.Labels[LabelParked] != "true":
			err = r.releaseNode(ctx, n)
		case marksOf(n, pool.Name, workerNodes) && hasMarks(n):
			err = r.patchNode(ctx, n, stripMarks)
		}
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("cleaning node %s: %w", n.Name, err)
		}
	}
	workersByStep.DeletePartialMatch(prometheus.Labels{"pool": pool.Name})
	r.releaseSession(pool)
	controllerutil.RemoveFinalizer(pool, FinalizerName)
	if err := r.Client.Update(ctx, pool); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}
