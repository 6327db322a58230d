package webhook

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
)

// nsPool is pool with its Secret in the operator's namespace and the certificate
// verified, as the credentials-namespace tests want it.
func nsPool(name, server string, vms ...string) *gpupoolv1.GPUPoolProfile {
	p := pool(name, server, vms...)
	p.Spec.VCenter.Insecure = false
	p.Spec.VCenter.CredentialsSecretRef.Namespace = "gpupool-system"
	return p
}

func validator(t *testing.T, others ...*gpupoolv1.GPUPoolProfile) *Validator {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := gpupoolv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, o := range others {
		b = b.WithObjects(o)
	}
	return &Validator{Reader: b.Build(), Credentials: secretpolicy.Parse("gpupool-system", "team-a")}
}

func TestCredentialsNamespaceIsChecked(t *testing.T) {
	v := validator(t)
	for ns, ok := range map[string]bool{"gpupool-system": true, "team-a": true, "kube-system": false, "default": false} {
		p := nsPool("p", "vc01.example", "vm-1")
		p.Spec.VCenter.CredentialsSecretRef.Namespace = ns
		_, err := v.ValidateCreate(context.Background(), p)
		if ok != (err == nil) {
			t.Errorf("Secret in %s: got %v, want allowed=%v", ns, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "spec.vcenter.credentialsSecretRef.namespace") {
			t.Errorf("refusal does not name the field: %v", err)
		}
	}
	if _, err := (&Validator{Reader: v.Reader}).ValidateCreate(context.Background(), nsPool("p", "vc01.example", "vm-1")); err == nil {
		t.Error("a validator without a credentials policy must allow no namespace")
	}
}

func TestClaimsSeeThroughServerSpellings(t *testing.T) {
	for _, spelling := range []string{"https://vc01.example/sdk/", "vc01.example.", "VC01.example:443", "vc01.example"} {
		v := validator(t, nsPool("older", "vc01.example", "vm-1"))
		_, err := v.ValidateCreate(context.Background(), nsPool("newer", spelling, "vm-1"))
		if err == nil || !strings.Contains(err.Error(), `already claimed by GPUPoolProfile "older"`) {
			t.Errorf("server %q: got %v, want the claim refused", spelling, err)
		}
	}
}

// A pool whose claim conflicts (both got through at the same moment) can still be
// paused, have its finalizer removed, be deleted and be changed in ways that do not
// touch its claims; a change that adds a claimed VM is refused.
func TestUpdatesOfAConflictingPool(t *testing.T) {
	older := nsPool("older", "vc01.example", "vm-1", "vm-5")
	newer := nsPool("newer", "https://vc01.example/sdk", "vm-1", "vm-2")
	newer.Finalizers = []string{gpupoolv1.FinalizerName}
	v := validator(t, older, newer)
	ctx := context.Background()
	update := func(change func(p *gpupoolv1.GPUPoolProfile)) error {
		p := newer.DeepCopy()
		change(p)
		_, err := v.ValidateUpdate(ctx, newer, p)
		return err
	}
	for name, change := range map[string]func(p *gpupoolv1.GPUPoolProfile){
		"finalizer removed": func(p *gpupoolv1.GPUPoolProfile) { p.Finalizers = nil },
		"paused":            func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = true },
		"paused with an invalid spec": func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Paused = true
			p.Spec.DefaultLayout = "gone" // unchanged below: the old spec has it too
		},
		"being deleted": func(p *gpupoolv1.GPUPoolProfile) {
			now := metav1.Now()
			p.DeletionTimestamp = &now
			p.Finalizers = nil
		},
		"claims unchanged": func(p *gpupoolv1.GPUPoolProfile) { p.Spec.MaxParallel = 2 },
	} {
		if name == "paused with an invalid spec" {
			bad := newer.DeepCopy()
			bad.Spec.DefaultLayout = "gone"
			p := bad.DeepCopy()
			change(p)
			if _, err := v.ValidateUpdate(ctx, bad, p); err != nil {
				t.Errorf("%s: refused: %v", name, err)
			}
			continue
		}
		if err := update(change); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	// A VM added is checked against the other pools: one the older pool claims is
	// refused, a free one is not (the conflict the pool already had is the controller's
	// to hold).
	if err := update(func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Layouts[0].Workers = append(p.Spec.Layouts[0].Workers, gpupoolv1.Worker{VM: "vm-5", Profile: "grid_p100-4q"})
	}); err == nil {
		t.Error("adding a VM another pool claims must be refused")
	}
	if err := update(func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Layouts[0].Workers = append(p.Spec.Layouts[0].Workers, gpupoolv1.Worker{VM: "vm-3", Profile: "grid_p100-4q"})
	}); err != nil {
		t.Errorf("adding a free VM to a pool with an old conflict was refused: %v", err)
	}
}
