package webhook

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// validateWorkerNodes checks workers[].node and workers[].noNode: a node name must be a
// valid Node name, and a VM that several layouts list must be given the same node (or
// none) and the same noNode everywhere, since it is one VM with one node. Two VMs may not
// name the same node: the controller would give it to neither.
func validateWorkerNodes(specPath *field.Path, spec *gpupoolv1.GPUPoolProfileSpec) field.ErrorList {
	var errs field.ErrorList
	type first struct {
		path   *field.Path
		node   string
		noNode bool
	}
	byVM := map[string]first{}
	nodeOwner := map[string]string{}
	for i := range spec.Layouts {
		for j, w := range spec.Layouts[i].Workers {
			wp := specPath.Child("layouts").Index(i).Child("workers").Index(j)
			if w.Node != "" {
				for _, msg := range validation.IsDNS1123Subdomain(w.Node) {
					errs = append(errs, field.Invalid(wp.Child("node"), shown(w.Node), msg+"; write the Node's name as kubectl get nodes shows it"))
				}
				if w.NoNode {
					errs = append(errs, field.Invalid(wp.Child("noNode"), true, "a worker with noNode: true has no node; remove node or noNode"))
				}
				if vm, taken := nodeOwner[w.Node]; taken && vmKey(vm) != vmKey(w.VM) {
					errs = append(errs, field.Invalid(wp.Child("node"), shown(w.Node), fmt.Sprintf("is already the node of VM %q; every VM has its own node", shown(vm))))
				}
				nodeOwner[w.Node] = w.VM
			}
			key := strings.ToLower(vmKey(w.VM))
			f, seen := byVM[key]
			if !seen {
				byVM[key] = first{path: wp, node: w.Node, noNode: w.NoNode}
				continue
			}
			if w.Node != "" && f.node != "" && w.Node != f.node {
				errs = append(errs, field.Invalid(wp.Child("node"), shown(w.Node), fmt.Sprintf("%s gives VM %q the node %q; a VM has one node: write the same name in every layout, or name it in one only", f.path, shown(w.VM), shown(f.node))))
			}
			if w.NoNode != f.noNode {
				errs = append(errs, field.Invalid(wp.Child("noNode"), w.NoNode, fmt.Sprintf("%s says noNode: %v for VM %q; a VM is a Kubernetes worker or not in every layout", f.path, f.noNode, shown(w.VM))))
			}
		}
	}
	return errs
}
