package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testclock"
)

func pool(name, server string, vms ...string) *gpupoolv1.GPUPoolProfile {
	var ws []gpupoolv1.Worker
	for _, vm := range vms {
		ws = append(ws, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
	}
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{Server: server, Datacenter: "DC0", Insecure: true,
				CredentialsSecretRef: gpupoolv1.SecretReference{Name: "creds", Namespace: "default"}},
			Layouts:       []gpupoolv1.Layout{{Name: "day", Workers: ws}},
			DefaultLayout: "day",
		},
	}
}

// conflicted returns a validator whose other pool "b" lists vm-1 on the same vCenter
// (spelled differently), and pool "a", which also lists vm-1: a conflict that got
// stored before claims were compared normalized.
func conflicted(t *testing.T) (*Validator, *gpupoolv1.GPUPoolProfile) {
	scheme := runtime.NewScheme()
	if err := gpupoolv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := pool("b", "vc.example.", "vm-1", "vm-9")
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b).Build()
	now := testclock.Weekly(time.Monday, 12, 0, time.UTC)
	a := pool("a", "https://VC.example:443/sdk", "vm-1", "vm-2")
	a.Finalizers = []string{gpupoolv1.FinalizerName}
	return &Validator{Reader: r, Now: func() time.Time { return now }, Credentials: secretpolicy.Policy{Namespace: "default"}}, a
}

func TestUpdatesThatDoNotClaimAreAdmitted(t *testing.T) {
	ctx := context.Background()
	v, a := conflicted(t)
	if _, err := v.ValidateCreate(ctx, a); err == nil || !strings.Contains(err.Error(), `claimed by GPUPoolProfile "b"`) {
		t.Fatalf("create of a conflicting pool: %v, want refused (servers compared normalized)", err)
	}
	admitted := map[string]func(p *gpupoolv1.GPUPoolProfile){
		"finalizer removal": func(p *gpupoolv1.GPUPoolProfile) { p.Finalizers = nil },
		"label change":      func(p *gpupoolv1.GPUPoolProfile) { p.Labels = map[string]string{"team": "ml"} },
		"pause":             func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Paused = true },
		"drop a VM":         func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers = p.Spec.Layouts[0].Workers[:1] },
		"change a profile":  func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers[1].Profile = "grid_p100-8q" },
		// Only the VMs an update adds are checked: the old conflict on vm-1 stays
		// to be resolved, but it does not block other work on the pool.
		"add a free VM": func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers = append(p.Spec.Layouts[0].Workers, gpupoolv1.Worker{VM: "vm-3", Profile: "grid_p100-4q"})
		},
		"same server, other spelling": func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.VCenter.Server = "vc.example"
		},
	}
	for name, mutate := range admitted {
		t.Run(name, func(t *testing.T) {
			cur := a.DeepCopy()
			mutate(cur)
			if _, err := v.ValidateUpdate(ctx, a, cur); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	refused := map[string]func(p *gpupoolv1.GPUPoolProfile){
		"add a claimed VM": func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers = append(p.Spec.Layouts[0].Workers, gpupoolv1.Worker{VM: "vm-9", Profile: "grid_p100-4q"})
		},
	}
	t.Run("move onto the other pool's vCenter", func(t *testing.T) {
		elsewhere := a.DeepCopy()
		elsewhere.Spec.VCenter.Server = "other.example"
		moved := elsewhere.DeepCopy()
		moved.Spec.VCenter.Server = "VC.EXAMPLE"
		moved.Spec.VCenter.Datacenter = "/DC0"
		if _, err := v.ValidateUpdate(ctx, elsewhere, moved); err == nil {
			t.Error("admitted, want the claims checked")
		}
	})
	for name, mutate := range refused {
		t.Run(name, func(t *testing.T) {
			cur := a.DeepCopy()
			mutate(cur)
			if _, err := v.ValidateUpdate(ctx, a, cur); err == nil {
				t.Error("admitted, want the claims checked")
			}
		})
	}
}

func TestPauseAndDeletionAreNeverBlocked(t *testing.T) {
	ctx := context.Background()
	v, a := conflicted(t)
	// A pool stored before a rule got stricter: its label key is now refused.
	a.Spec.VCenter.Server = "other.example"
	a.Spec.Layouts[0].NodeLabels = map[string]string{"gpupool.dev/workload": "x"}
	if _, err := v.ValidateCreate(ctx, a); err == nil {
		t.Fatal("the stored spec should no longer pass")
	}
	pause := a.DeepCopy()
	pause.Spec.Paused = true
	if _, err := v.ValidateUpdate(ctx, a, pause); err != nil {
		t.Errorf("pausing refused: %v", err)
	}
	unpause := pause.DeepCopy()
	unpause.Spec.Paused = false
	if _, err := v.ValidateUpdate(ctx, pause, unpause); err == nil {
		t.Error("unpausing a spec that no longer passes was admitted")
	}
	pauseAndEdit := pause.DeepCopy()
	pauseAndEdit.Spec.DefaultLayout = "nope"
	if _, err := v.ValidateUpdate(ctx, a, pauseAndEdit); err == nil {
		t.Error("pausing together with a bad edit was admitted")
	}
	deleting := a.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	edited := deleting.DeepCopy()
	edited.Finalizers = nil
	edited.Spec.DefaultLayout = "nope"
	if _, err := v.ValidateUpdate(ctx, deleting, edited); err != nil {
		t.Errorf("update of an object being deleted refused: %v", err)
	}
}
