package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// Layouts by selector (spec.layouts[].select, docs/api.md#selected-workers). observe
// finds the VMs each selector matches before it reads the inventory, and makes them the
// layout's workers in the pass's copy of the spec (s.pool and s.persisted: no status
// patch carries a spec); the selection is remembered (selectionMemo) so that the next
// pass, and the demand watch, start from it (expandSpec). A selection that cannot be
// read is never taken for "no VMs", which would release every node of the layout: the
// pass keeps the last selection made with the same selector, or stops.

// resolveSelections makes each select layout of the pass's spec list the VMs its
// selector matches now, and each layout by count with convert.candidatesFrom list them
// as its candidates. It reports false, with when to look again, when a selection
// cannot be read and none was made before with the same selector.
func (r *GPUPoolProfileReconciler) resolveSelections(ctx context.Context, s *scope) (time.Duration, bool) {
	last := r.selections.last(s.pool)
	made := map[string]plan.Selected{}
	for i := range s.pool.Spec.Layouts {
		l := &s.pool.Spec.Layouts[i]
		sel, ok := plan.SelectorOf(l)
		if !ok {
			continue
		}
		vms, err := r.selectVMs(ctx, s.vc, &sel.VMSelector)
		if err != nil {
			prev, ok := last[l.Name]
			if !ok || !plan.SameSelector(&prev.Select, &sel) {
				s.facts.vcenter = fmt.Sprintf("selecting the VMs of layout %s: %v; no VM of the layout is released or changed until the selection can be read", l.Name, err)
				return requeueVCenter, false
			}
			log.FromContext(ctx).Info("Keeping the last selection: the selector cannot be read", "layout", l.Name, "error", err.Error())
			made[l.Name] = prev
		} else {
			made[l.Name] = plan.Selected{Select: sel, Workers: plan.SelectedWorkers(&sel, vms)}
		}
		plan.SetSelected(l, made[l.Name].Workers)
		if i < len(s.persisted.Spec.Layouts) && s.persisted.Spec.Layouts[i].Name == l.Name {
			plan.SetSelected(&s.persisted.Spec.Layouts[i], made[l.Name].Workers)
		}
	}
	r.selections.remember(s.pool, made)
	return 0, true
}

// selectVMs lists the VMs sel matches: the datacenter's VMs by name pattern, folder and tag,
// and, with a MachineDeployment, those of them that its Machines run.
func (r *GPUPoolProfileReconciler) selectVMs(ctx context.Context, vc vsphere.Client, sel *gpupoolv1.VMSelector) ([]plan.SelectedVM, error) {
	vsel := vsphere.VMSelector{NamePattern: sel.NamePattern, Folder: sel.Folder}
	if t := sel.Tag; t != nil {
		vsel.Tag = &vsphere.Tag{Category: t.Category, Name: t.Name}
	}
	names, err := vc.SelectVMs(ctx, vsel)
	if err != nil {
		return nil, fmt.Errorf("listing the VMs in vCenter: %w", err)
	}
	md := sel.MachineDeployment
	if md == nil {
		out := make([]plan.SelectedVM, len(names))
		for i, n := range names {
			out[i] = plan.SelectedVM{VM: n}
		}
		return out, nil
	}
	machines, err := r.deploymentVMs(ctx, md)
	if err != nil {
		return nil, err
	}
	// A Machine's VM that vCenter does not have (yet, or any more) is not selected: it
	// is being created or deleted.
	var out []plan.SelectedVM
	for _, m := range machines {
		if _, ok := slices.BinarySearch(names, m.VM); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// deploymentVMs lists the VMs of the MachineDeployment's Machines (label
// cluster.x-k8s.io/deployment-name), sorted by Machine name: each Machine's VM is the
// VSphereVM its VSphereMachine owns (infraMachine, vsphereVM: as capi.go reaches them,
// never by a name the Machine alone gives), its node the Machine's status.nodeRef. A
// Machine being deleted, or whose VSphereVM does not exist yet, runs no VM of the pool.
func (r *GPUPoolProfileReconciler) deploymentVMs(ctx context.Context, md *gpupoolv1.MachineDeploymentReference) ([]plan.SelectedVM, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineList"))
	if err := r.APIReader.List(ctx, &list, client.InNamespace(md.Namespace),
		client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
		return nil, fmt.Errorf("listing the Machines of MachineDeployment %s/%s: %w", md.Namespace, md.Name, err)
	}
	slices.SortFunc(list.Items, func(a, b unstructured.Unstructured) int { return cmp.Compare(a.GetName(), b.GetName()) })
	var out []plan.SelectedVM
	for i := range list.Items {
		m := &list.Items[i]
		if m.GetDeletionTimestamp() != nil {
			continue
		}
		infra, err := r.infraMachine(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("reading the VM of Machine %s/%s: %w", m.GetNamespace(), m.GetName(), err)
		}
		if infra == nil {
			continue
		}
		if infra.GetKind() != "VSphereMachine" {
			log.FromContext(ctx).Info("Not selecting a Machine whose infrastructure is not a VSphereMachine", "machine", m.GetName(), "kind", infra.GetKind())
			continue
		}
		vm, err := r.vsphereVM(ctx, m, infra)
		if err != nil {
			return nil, fmt.Errorf("reading the VM of Machine %s/%s: %w", m.GetNamespace(), m.GetName(), err)
		}
		if vm == nil {
			continue
		}
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		out = append(out, plan.SelectedVM{VM: vm.GetName(), Node: node})
	}
	return out, nil
}
