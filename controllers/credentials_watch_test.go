package controllers

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
)

// TestPoolsOfSecret: a credentials Secret's event wakes the pools that name it, and no
// other: not a pool naming another Secret, nor one naming the same name elsewhere.
func TestPoolsOfSecret(t *testing.T) {
	s := runtime.NewScheme()
	_ = gpupoolv1.AddToScheme(s)
	pool := func(name, ns, secret string) *gpupoolv1.GPUPoolProfile {
		p := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: name}}
		p.Spec.VCenter.CredentialsSecretRef = gpupoolv1.SecretReference{Namespace: ns, Name: secret}
		return p
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		pool("a", "gpupool-system", "vc1"), pool("b", "gpupool-system", "vc2"),
		pool("c", "team-a", "vc1"), pool("d", "gpupool-system", "vc1")).Build()
	r := &GPUPoolProfileReconciler{Client: c, Credentials: secretpolicy.Policy{Namespace: "gpupool-system"}}
	secret := credentialsSecret()
	secret.Namespace, secret.Name = "gpupool-system", "vc1"
	var got []string
	for _, req := range r.poolsOfSecret(context.Background(), secret) {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"a", "d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Secret gpupool-system/vc1 wakes %v, want %v", got, want)
	}
	secret.Name = "unused"
	if reqs := r.poolsOfSecret(context.Background(), secret); len(reqs) != 0 {
		t.Errorf("a Secret no pool names wakes %v", reqs)
	}
}

// TestCredentialsWatchScope: the watch holds Secrets' metadata only, of the credentials
// namespace only: its cache lists no other namespace, and no Secret's data is cached.
func TestCredentialsWatchScope(t *testing.T) {
	opts := credentialsCacheOptions("gpupool-system")
	var nss []string
	for ns := range opts.DefaultNamespaces {
		nss = append(nss, ns)
	}
	if !reflect.DeepEqual(nss, []string{"gpupool-system"}) || len(opts.ByObject) != 0 {
		t.Errorf("the credentials cache watches namespaces %v (by object %v), want gpupool-system only", nss, opts.ByObject)
	}
	if gvk := credentialsSecret().GroupVersionKind(); gvk.Kind != "Secret" || gvk.Group != "" {
		t.Errorf("the watch is of %v, want the metadata of core Secrets", gvk)
	}
}

// TestRefusedMessageSaysWhenTriedAgain: "unless the Secret changes" only where a changed
// Secret wakes the pool (the watched credentials namespace).
func TestRefusedMessageSaysWhenTriedAgain(t *testing.T) {
	r := &GPUPoolProfileReconciler{Credentials: secretpolicy.Parse("gpupool-system", "team-a"), secretsWatched: true}
	got := r.refusedMessage("vc.example.com", types.NamespacedName{Namespace: "gpupool-system", Name: "vc"}, 10*time.Minute)
	if !strings.Contains(got, "not tried again for 10m0s unless the Secret changes") {
		t.Errorf("watched namespace: %s", got)
	}
	got = r.refusedMessage("vc.example.com", types.NamespacedName{Namespace: "team-a", Name: "vc"}, 10*time.Minute)
	if strings.Contains(got, "unless the Secret changes") || !strings.Contains(got, `only Secrets in namespace "gpupool-system" are watched`) {
		t.Errorf("unwatched namespace: %s", got)
	}
	// Without the permission to watch, the watch was left out: no namespace is watched.
	r.secretsWatched = false
	got = r.refusedMessage("vc.example.com", types.NamespacedName{Namespace: "gpupool-system", Name: "vc"}, 10*time.Minute)
	if strings.Contains(got, "unless the Secret changes") || !strings.Contains(got, "Secrets are not watched") {
		t.Errorf("watch left out: %s", got)
	}
}
