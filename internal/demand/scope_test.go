package demand

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func namespaceMeta(name string, labels map[string]string) metav1.PartialObjectMetadata {
	l := map[string]string{"kubernetes.io/metadata.name": name}
	maps.Copy(l, labels)
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// TestScopeOfSelectsNamespaces: every kind of selector selects what Kubernetes' label
// selectors select; an unset selector selects nothing (demand is nobody's by default).
func TestScopeOfSelectsNamespaces(t *testing.T) {
	nss := []metav1.PartialObjectMetadata{
		namespaceMeta("ml", map[string]string{"gpupool.dev/demand": "lab"}),
		namespaceMeta("ml-dev", map[string]string{"gpupool.dev/demand": "lab", "stage": "dev"}),
		namespaceMeta("tenant-a", nil),
		namespaceMeta("kube-system", nil),
	}
	for _, tc := range []struct {
		name string
		sel  *metav1.LabelSelector
		want []string
	}{
		{"unset", nil, nil},
		{"empty selects every namespace", &metav1.LabelSelector{}, []string{"kube-system", "ml", "ml-dev", "tenant-a"}},
		{"matchLabels", &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "lab"}}, []string{"ml", "ml-dev"}},
		{"by name", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"tenant-a"}}}}, []string{"tenant-a"}},
		{"NotIn and DoesNotExist", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "gpupool.dev/demand", Operator: metav1.LabelSelectorOpExists},
			{Key: "stage", Operator: metav1.LabelSelectorOpDoesNotExist}}}, []string{"ml"}},
		{"matches nothing", &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "other"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool()
			pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: tc.sel}
			ds, err := ScopeOf(pool, nss)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ns := range nss {
				if ds.Selects(ns.Name) {
					got = append(got, ns.Name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("selected %v, want %v", got, tc.want)
			}
			if ds.Unset != (tc.sel == nil) {
				t.Fatalf("Unset = %v for selector %v", ds.Unset, tc.sel)
			}
		})
	}
}

// TestScopeClassesOfPods: a pod counts, wakes the pool and is named only when it is in a
// selected namespace, matches the pod selector and (to wake) asks for the pool's GPU
// resource; every other pod is named by its namespace only.
func TestScopeClassesOfPods(t *testing.T) {
	pool := testPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "lab"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"queue": "training"}},
	}
	ds, err := ScopeOf(pool, []metav1.PartialObjectMetadata{namespaceMeta("ml", map[string]string{"gpupool.dev/demand": "lab"}), namespaceMeta("tenant", nil)})
	if err != nil {
		t.Fatal(err)
	}
	labelled := func(p *corev1.Pod) { p.Labels = map[string]string{"queue": "training"} }
	otherResource := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}
	}
	for _, tc := range []struct {
		name                 string
		pod                  *corev1.Pod
		counts, wakes, named bool
	}{
		{"selected namespace, matching labels, GPU", testPod("a", 1, labelled), true, true, true},
		{"selected namespace, other labels", testPod("b", 1), false, false, true},
		{"selected namespace, no GPU", testPod("c", 0, labelled), true, false, true},
		{"selected namespace, another extended resource", testPod("d", 0, labelled, otherResource), true, false, true},
		{"other namespace, matching labels, GPU", testPod("e", 1, labelled, inNamespace("tenant")), false, false, false},
		{"unknown namespace", testPod("f", 1, labelled, inNamespace("new-ns")), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ds.Counts(tc.pod); got != tc.counts {
				t.Errorf("Counts = %v, want %v", got, tc.counts)
			}
			if got := ds.Wakes(tc.pod); got != tc.wakes {
				t.Errorf("Wakes = %v, want %v", got, tc.wakes)
			}
			name := ds.Named(tc.pod)
			if shown := strings.Contains(name, "/"+tc.pod.Name); shown != tc.named || !strings.Contains(name, tc.pod.Namespace) {
				t.Errorf("named %q; want the pod's name shown: %v, its namespace always", name, tc.named)
			}
		})
	}
}
