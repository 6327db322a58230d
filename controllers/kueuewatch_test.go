package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestKueueWatchStartsOnceKueueIsServed: no watch while Kueue's API is not served (and
// discovery asked at most once per kueueRecheck), the watch started once it is, exactly
// once, and a failure to start retried on a later pass.
func TestKueueWatchStartsOnceKueueIsServed(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	asked := 0
	counting := &countingMapper{RESTMapper: mapper, asked: &asked}
	starts := 0
	var failStart error
	w := &kueueWatch{mapper: counting, start: func() error { starts++; return failStart }}
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

	for i, at := range []time.Duration{0, time.Second, 59 * time.Second} {
		if ok, err := w.ensure(t0.Add(at)); ok || err != nil {
			t.Fatalf("pass %d without Kueue: watching %v, err %v", i, ok, err)
		}
	}
	if asked != 1 || starts != 0 {
		t.Fatalf("without Kueue, within a minute: discovery asked %d times, watch started %d times; want 1, 0", asked, starts)
	}

	// Kueue is installed; the next check (a minute later) starts the watch, but it fails.
	mapper.Add(kueueWorkload, meta.RESTScopeNamespace)
	failStart = errors.New("informer refused")
	if ok, err := w.ensure(t0.Add(time.Minute)); ok || err == nil {
		t.Fatalf("failed start: watching %v, err %v; want not watching and the error", ok, err)
	}
	failStart = nil
	if ok, err := w.ensure(t0.Add(2 * time.Minute)); !ok || err != nil {
		t.Fatalf("Kueue served: watching %v, err %v", ok, err)
	}
	for i := range 3 {
		if ok, _ := w.ensure(t0.Add(time.Duration(3+i) * time.Minute)); !ok {
			t.Fatalf("pass %d after the start: not watching", i)
		}
	}
	if starts != 2 || asked != 3 {
		t.Fatalf("watch started %d times (want 2: one failed, one ran), discovery asked %d times (want 3)", starts, asked)
	}

	// A clock that went back does not stop the checks.
	asked = 0
	w2 := &kueueWatch{mapper: &countingMapper{RESTMapper: meta.NewDefaultRESTMapper(nil), asked: &asked}, start: func() error { return nil }}
	_, _ = w2.ensure(t0)
	_, _ = w2.ensure(t0.Add(-time.Hour))
	if asked != 2 {
		t.Fatalf("clock stepped back: %d discovery calls, want a fresh check (2)", asked)
	}

	// Whatever the mapper answers for a group it cannot find, Kueue is not served and the
	// manager starts.
	w3 := &kueueWatch{mapper: failingMapper{RESTMapper: meta.NewDefaultRESTMapper(nil)}, start: func() error { t.Fatal("started"); return nil }}
	if ok, err := w3.ensure(t0); ok || err != nil {
		t.Fatalf("discovery failed: watching %v, err %v; want not watching, no error", ok, err)
	}

	var none *kueueWatch
	if ok, err := none.ensure(t0); !ok || err != nil {
		t.Fatalf("nil watch (tests calling Reconcile): %v %v, want served", ok, err)
	}
}

type countingMapper struct {
	meta.RESTMapper
	asked *int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	*m.asked++
	return m.RESTMapper.RESTMapping(gk, versions...)
}

type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("failed to get API group resources: the server could not find the requested resource")
}

// TestKueueWatchSeesAnAPIInstalledLater, against the suite's API server and
// controller-runtime's own RESTMapper (what the manager uses): a group the server does
// not serve reads as not served, without an error, and is found once its CRD is
// installed, without a restart. A made-up group stands in for Kueue's, which other tests
// of the suite install.
func TestKueueWatchSeesAnAPIInstalledLater(t *testing.T) {
	httpClient, err := rest.HTTPClientFor(suiteEnv.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(suiteEnv.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Group: "latekueue.test.gpupool.dev", Version: "v1beta2", Kind: "Workload"}
	started := 0
	w := &kueueWatch{mapper: mapper, gvk: gvk, start: func() error { started++; return nil }}
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	if ok, err := w.ensure(t0); ok || err != nil || started != 0 {
		t.Fatalf("before the CRD: watching %v, err %v, started %d", ok, err, started)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "workloads." + gvk.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: gvk.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "workloads", Singular: "workload", Kind: "Workload", ListKind: "WorkloadList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: gvk.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					XPreserveUnknownFields: ptr.To(true)}}}}}}
	if _, err := envtest.InstallCRDs(suiteEnv.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), crd) })
	if ok, _ := w.ensure(t0.Add(30 * time.Second)); ok {
		t.Fatalf("checked again within kueueRecheck")
	}
	if ok, err := w.ensure(t0.Add(kueueRecheck)); !ok || err != nil || started != 1 {
		t.Fatalf("after the CRD: watching %v, err %v, started %d; want the watch started once", ok, err, started)
	}
}

// TestSyncKueueWithoutKueue: a pool with spec.kueue on a cluster without Kueue reads and
// writes nothing of Kueue, warns once per look, and looks again after kueueRecheck.
func TestSyncKueueWithoutKueue(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	calls := 0
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			calls++
			return errors.New("no Kueue")
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			calls++
			return errors.New("no Kueue")
		},
	}).Build()
	rec := events.NewFakeRecorder(10)
	k := &KueueReconciler{Client: c, Recorder: rec,
		watch: &kueueWatch{mapper: meta.NewDefaultRESTMapper(nil), start: func() error { t.Fatal("watch started"); return nil }}}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: gpupoolv1.GPUPoolProfileSpec{
		Kueue: &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: "night", Layout: "night", Quota: gpuList("1")}}}}}
	if again := k.syncKueue(context.Background(), pool, time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)); again != kueueRecheck {
		t.Errorf("looks again in %s, want %s", again, kueueRecheck)
	}
	if calls != 0 {
		t.Errorf("%d reads or writes of Kueue's objects without Kueue", calls)
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, "KueueNotServed") || !strings.Contains(ev, "install Kueue") {
			t.Errorf("event %q, want KueueNotServed saying to install Kueue", ev)
		}
	default:
		t.Error("no event says Kueue is not served")
	}
}
