// Command fluxapply applies Kubernetes manifests the way Flux's kustomize-controller
// does: with Flux's own server-side apply engine (github.com/fluxcd/pkg/ssa), under the
// field manager kustomize-controller, with the controller's apply options (drift
// detection by dry run, forced ownership, and the clean-up that takes over the fields of
// kubectl's managers).
//
// It is a module of its own because fluxcd/pkg/ssa needs newer k8s.io libraries and
// controller-runtime than gpupool's module pins; gpupool's GitOps test builds it and runs
// it against its API server (controllers/gitops_envtest_test.go, docs/gitops.md).
//
// Usage: fluxapply -kubeconfig FILE MANIFEST.yaml...
// It prints one line per object (its change: created, configured, unchanged) and exits 1
// on the first error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fluxcd/pkg/ssa"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Owner is kustomize-controller's: its field manager and its label group.
var owner = ssa.Owner{Field: "kustomize-controller", Group: "kustomize.toolkit.fluxcd.io"}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster to apply to")
	flag.Parse()
	if err := run(*kubeconfig, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fluxapply:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, files []string) error {
	if kubeconfig == "" || len(files) == 0 {
		return fmt.Errorf("usage: fluxapply -kubeconfig FILE MANIFEST.yaml")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	var objects []*unstructured.Unstructured
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		objs, err := ssautil.ReadObjects(r)
		_ = r.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		objects = append(objects, objs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rm := ssa.NewResourceManager(c, nil, owner)
	changes, err := rm.ApplyAllStaged(ctx, objects, applyOptions())
	if changes != nil {
		for _, e := range changes.Entries {
			fmt.Println(e.String())
		}
	}
	return err
}

// applyOptions are kustomize-controller's (internal/controller/kustomization_controller.go,
// apply): no forced re-creation, and before applying, the fields owned by kubectl's
// managers (a name prefix: kubectl, kubectl-edit, kubectl-annotate, ...) and by
// before-first-apply become kustomize-controller's, so that Git's next apply removes what
// Git does not hold.
func applyOptions() ssa.ApplyOptions {
	o := ssa.DefaultApplyOptions()
	o.ExclusionSelector = map[string]string{
		"kustomize.toolkit.fluxcd.io/reconcile": "disabled",
		"kustomize.toolkit.fluxcd.io/ssa":       "Ignore",
	}
	o.IfNotPresentSelector = map[string]string{"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"}
	o.ForceSelector = map[string]string{"kustomize.toolkit.fluxcd.io/force": "Enabled"}
	o.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: owner.Field, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{"kustomize.toolkit.fluxcd.io/ssa": "Ignore"},
	}
	return o
}
