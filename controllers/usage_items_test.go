package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/world"
)

// usageWorld is one host with two 16 GB GPUs: a, b and c run grid_p100-4q (0.25 each),
// d runs two grid_p100-8q vGPUs (1.0), e is suspended.
func usageWorld() *world.World {
	// g2 runs a VM of another pool: not the pool's to offer, nor switching.
	host := inventory.Host{Name: "esx", GPUs: []inventory.GPU{{PCIID: "g0", MemoryMiB: 16384, VMs: []string{"a", "d"}}, {PCIID: "g1", MemoryMiB: 16384},
		{PCIID: "g2", MemoryMiB: 16384, VMs: []string{"someone-else"}}}}
	vm := func(name, profile string, n int, on bool) *inventory.VM {
		v := &inventory.VM{Name: name, Host: "esx", Profile: profile, VGPUs: n, PowerState: inventory.Suspended}
		if on {
			v.PowerState, v.GPUs = inventory.PoweredOn, []string{"g0"}
		}
		return v
	}
	vms := map[string]*inventory.VM{"a": vm("a", "grid_p100-4q", 1, true), "b": vm("b", "grid_p100-4q", 1, true),
		"c": vm("c", "grid_p100-4q", 1, true), "d": vm("d", "grid_p100-8q", 2, true), "e": vm("e", "grid_p100-16q", 1, false)}
	w := &world.World{Inventory: &inventory.Inventory{Hosts: []inventory.Host{host}}, VMs: vms, SpecID: map[string]string{}, Nodes: map[string]*corev1.Node{}}
	for name := range vms {
		w.SpecID[name] = name
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-" + name, Labels: map[string]string{gpupoolv1.LabelLayout: "day"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		w.Nodes[name] = n
	}
	w.Nodes["b"].Spec.Unschedulable = true                             // cordoned: offers nothing
	w.Nodes["c"].Status.Conditions[0].Status = corev1.ConditionFalse   // NotReady: offers nothing
	delete(w.Nodes["d"].Labels, gpupoolv1.LabelLayout)                 // not labelled yet
	w.Nodes["e"].Status.Conditions[0].Status = corev1.ConditionUnknown // parked
	return w
}

func gpuPodOn(name, ns, node string, gpus int64, phase corev1.PodPhase, start *time.Time) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}}, Status: corev1.PodStatus{Phase: phase}}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	if start != nil {
		p.Status.StartTime = &metav1.Time{Time: *start}
	}
	return p
}

// TestPoolUsageItems: what one pass's world counts, for each kind of node and pod.
func TestPoolUsageItems(t *testing.T) {
	start := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)
	pool := &gpupoolv1.GPUPoolProfile{Spec: gpupoolv1.GPUPoolProfileSpec{
		Layouts: []gpupoolv1.Layout{{Name: "day"}, {Name: "big", Workers: []gpupoolv1.Worker{{VM: "d", Profile: "grid_p100-8q"}}}}},
		Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day"}}
	pods := map[string][]corev1.Pod{
		"n-a": {gpuPodOn("one", "red", "n-a", 1, corev1.PodRunning, &start), gpuPodOn("cpu", "red", "n-a", 0, corev1.PodRunning, &start),
			gpuPodOn("done", "red", "n-a", 1, corev1.PodSucceeded, &start), gpuPodOn("elsewhere", "red", "n-x", 1, corev1.PodRunning, nil)},
		"n-b": {gpuPodOn("draining", "blue", "n-b", 1, corev1.PodRunning, nil)},
		"n-d": {gpuPodOn("greedy", "blue", "n-d", 5, corev1.PodRunning, nil), gpuPodOn("claims", "blue", "n-d", 0, corev1.PodRunning, nil),
			gpuPodOn("both", "blue", "n-d", 1, corev1.PodRunning, nil)},
	}
	// A claim pod's devices come from its claims; a pod that also asks for the resource
	// counts what it asks for the resource, once.
	claims := map[types.UID]int64{"uid-claims": 1, "uid-both": 2}
	tenantOf := func(ns string) string { return "team-" + ns }
	got := map[string]accounting.Item{}
	for _, it := range poolUsageItems(pool, usageWorld(), pods, claims, tenantOf) {
		got[it.Key] = it
	}
	want := map[string]accounting.Item{
		"node/n-a": {Key: "node/n-a", Kind: accounting.Offered, Layout: "day", Profile: "grid_p100-4q", GPUs: 0.25},
		// d is not labelled and no transition is under way: the active layout's.
		"node/n-d":    {Key: "node/n-d", Kind: accounting.Offered, Layout: "day", Profile: "grid_p100-8q", GPUs: 1},
		"pod/uid-one": {Key: "pod/uid-one", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-4q", Tenant: "team-red", GPUs: 0.25, Since: start},
		// A cordoned node's pods still hold their GPUs.
		"pod/uid-draining": {Key: "pod/uid-draining", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-4q", Tenant: "team-blue", GPUs: 0.25},
		// Five GPUs asked of a node with two vGPUs: at most the node's.
		"pod/uid-greedy": {Key: "pod/uid-greedy", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-8q", Tenant: "team-blue", GPUs: 1},
		"pod/uid-claims": {Key: "pod/uid-claims", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-8q", Tenant: "team-blue", GPUs: 0.5},
		"pod/uid-both":   {Key: "pod/uid-both", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-8q", Tenant: "team-blue", GPUs: 0.5},
	}
	if len(got) != len(want) {
		t.Errorf("items %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %+v, want %+v", k, g, w)
		}
	}

	// During a switch to big, the two GPUs minus what is offered (1.25) are switching,
	// from the transition's start, under big; d's node, not labelled, serves big.
	pool.Status.Transition = &gpupoolv1.TransitionStatus{ID: "t1", To: "big", StartTime: metav1.NewTime(start)}
	got = map[string]accounting.Item{}
	for _, it := range poolUsageItems(pool, usageWorld(), pods, claims, tenantOf) {
		got[it.Key] = it
	}
	if sw := got["switch/t1"]; sw.Kind != accounting.Switching || sw.Layout != "big" || sw.GPUs != 0.75 || !sw.Since.Equal(start) {
		t.Errorf("switching %+v, want 0.75 GPU under big since %s", sw, start)
	}
	if d := got["node/n-d"]; d.Layout != "big" {
		t.Errorf("d's node during the switch to big: layout %q, want big", d.Layout)
	}
}
