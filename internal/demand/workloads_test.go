package demand

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestWorkloadsObserve: the Workloads gpupool holds are demand for the layouts of their
// flavors other than the active one, only in the namespaces demand selects; a Kueue that
// is not served or cannot be read answers zero with a note, not an error.
func TestWorkloadsObserve(t *testing.T) {
	held := []Held{
		{Namespace: "ml", Name: "train-b", Layouts: []string{"night"}, GPUs: 4},
		{Namespace: "ml", Name: "train-a", Layouts: []string{"night"}, GPUs: 1},
		{Namespace: "ml", Name: "serve", Layouts: []string{"day"}, GPUs: 1},
		{Namespace: "tenant", Name: "train", Layouts: []string{"night"}, GPUs: 8},
	}
	who, err := ScopeOf(kueuePool(), []metav1.PartialObjectMetadata{namespaceMeta("ml", map[string]string{"gpupool.dev/demand": "lab"}), namespaceMeta("tenant", nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		pool        *gpupoolv1.GPUPoolProfile
		list        HeldLister
		wantNight   int64
		wantPending []string
		wantNote    string
	}{
		{name: "held", pool: kueuePool(), list: func(context.Context, *gpupoolv1.GPUPoolProfile) ([]Held, error) { return held, nil },
			wantNight: 5, wantPending: []string{"workload ml/train-a", "workload ml/train-b"}},
		{name: "not served", pool: kueuePool(), list: func(context.Context, *gpupoolv1.GPUPoolProfile) ([]Held, error) {
			return held, errors.New("the API server does not serve kueue.x-k8s.io/v1beta1")
		}, wantNote: WorkloadsNotObserved + ", counted as none: the API server does not serve kueue.x-k8s.io/v1beta1"},
		{name: "no spec.kueue", pool: testPool(), list: func(context.Context, *gpupoolv1.GPUPoolProfile) ([]Held, error) {
			t.Fatal("Kueue read without spec.kueue")
			return nil, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, err := Workloads{Held: tc.list}.Observe(context.Background(), tc.pool, ShapesOf(tc.pool), who)
			if err != nil {
				t.Fatalf("error %v: a source that is not served answers zero", err)
			}
			night := obs.Layouts["night"]
			if night.PendingGPUs != tc.wantNight || !slices.Equal(night.Pending, tc.wantPending) {
				t.Errorf("night pending %d %v, want %d %v", night.PendingGPUs, night.Pending, tc.wantNight, tc.wantPending)
			}
			if d := obs.Layouts["day"]; d.PendingGPUs != 0 {
				t.Errorf("day (active) pending %d: a Workload of the active layout is no demand", d.PendingGPUs)
			}
			if obs.NotObserved != tc.wantNote {
				t.Errorf("note %q, want %q", obs.NotObserved, tc.wantNote)
			}
		})
	}
}

func kueuePool() *gpupoolv1.GPUPoolProfile {
	pool := testPool()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: "night", Layout: "night"}, {Name: "day", Layout: "day"}}}
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "lab"}}}
	return pool
}

// failing is a source whose reads fail.
type failing struct{}

func (failing) Observe(context.Context, *gpupoolv1.GPUPoolProfile, Shapes, Scope) (Observed, error) {
	return Observed{}, errors.New("the cache is not synced")
}

// TestViewSumsSourcesAndCountsTheMissingAsNone: the pods' and the Workloads' demand add
// up per layout; a Kueue that is not served leaves the pods' demand deciding, and the
// message says so first; a source that fails leaves the demand unobserved.
func TestViewSumsSourcesAndCountsTheMissingAsNone(t *testing.T) {
	pool := kueuePool()
	pool.Spec.Demand.NamespaceSelector = &metav1.LabelSelector{}
	pool.Spec.Demand.Rules = []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn, For: &metav1.Duration{}}}
	c := fakeClient(testPod("train", 2, pendingUnschedulable, selecting("workload", "training"), tolerating("training")))
	wl := func(err error) Source {
		return Workloads{Held: func(context.Context, *gpupoolv1.GPUPoolProfile) ([]Held, error) {
			return []Held{{Namespace: "ml", Name: "big", Layouts: []string{"night"}, GPUs: 3}}, err
		}}
	}
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	v, err := Observer{Namespaces: c, Sources: []Source{podsOf(c), wl(nil)}}.View(context.Background(), pool, now)
	if err != nil || v.Unobserved != nil {
		t.Fatal(err, v.Unobserved)
	}
	if n := v.In.Observed["night"]; n.PendingGPUs != 5 || len(n.Pending) != 2 {
		t.Errorf("night pending %d %v, want the pod's 2 and the Workload's 3 GPUs", n.PendingGPUs, n.Pending)
	}
	v, err = Observer{Namespaces: c, Sources: []Source{podsOf(c), wl(errors.New("no kueue"))}}.View(context.Background(), pool, now)
	if err != nil || v.Unobserved != nil {
		t.Fatal(err, v.Unobserved)
	}
	if n := v.In.Observed["night"]; n.PendingGPUs != 2 || !strings.HasPrefix(v.Status.Message, WorkloadsNotObserved) || len(v.Missing) != 1 {
		t.Errorf("night pending %d, message %q, missing %v; want the pods' demand and Kueue counted as none", n.PendingGPUs, v.Status.Message, v.Missing)
	}
	if v.Decision.Layout != "night" || v.Decision.Reason != gpupoolv1.DesiredByDemand {
		t.Errorf("decision %s (%s), want night by demand from the pod alone", v.Decision.Layout, v.Decision.Reason)
	}
	v, err = Observer{Namespaces: c, Sources: []Source{failing{}, wl(nil)}}.View(context.Background(), pool, now)
	if err != nil || v.Unobserved == nil {
		t.Errorf("a failing pod read: err %v, unobserved %v; want the demand unobserved", err, v.Unobserved)
	}
}
