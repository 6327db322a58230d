package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
)

// fourByFour is vgpusim's 4 hosts x 4 16 GB P100s (performance policy): by day sixteen
// grid_p100-4q VMs per host running, four per GPU as vSphere spreads them; four
// grid_p100-16q night VMs per host powered off.
func fourByFour() string {
	var b strings.Builder
	b.WriteString("datacenter: dc1\nhosts:\n")
	for h := 1; h <= 4; h++ {
		fmt.Fprintf(&b, "  - name: %%[1]sesx-%02d\n    policy: performance\n    gpus:\n", h)
		for g := range 4 {
			fmt.Fprintf(&b, "      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:%02x:00.0\"}\n", 0x3b+g*0x20)
		}
		b.WriteString("    profiles:\n      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}\n      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}\n")
	}
	b.WriteString("vms:\n")
	for h := 1; h <= 4; h++ {
		for i := 1; i <= 16; i++ {
			fmt.Fprintf(&b, "  - {name: %%[1]sday-%d-%02d, host: %%[1]sesx-%02d, profile: grid_p100-4q, powerState: poweredOn}\n", h, i, h)
		}
		for i := 1; i <= 4; i++ {
			fmt.Fprintf(&b, "  - {name: %%[1]snight-%d-%d, host: %%[1]sesx-%02d, profile: grid_p100-16q, powerState: poweredOff}\n", h, i, h)
		}
	}
	return b.String()
}

// countPods are the GPU pods per GPU of the day VMs (host, GPU index in the host's
// list), spread over the GPU's VMs; the first VM of each GPU in countDND also runs a
// do-not-disrupt pod (counted in the total).
var (
	countPods = [4][4]int{
		{9, 5, 2, 8},
		{7, 1, 6, 4},
		{0, 8, 8, 3},
		{5, 6, 1, 10},
	}
	countDND = [][2]int{{0, 2}, {3, 2}}
)

// TestCountLayoutConvertsTheCheapestGPUs: night is day with 4 GPUs converted to
// grid_p100-16q, from the night VMs. On the 4 x 4 world with GPU pods on most day
// nodes, two of them do-not-disrupt, the switch converts the four GPUs with fewest GPU
// pods that hold no do-not-disrupt pod, evicts exactly the pods on them, parks exactly
// their day VMs and runs one night VM on each; every other day VM and pod stays.
// The day nodes that keep running keep day's labels (no taint of night's). status.plan
// shows the choice while the switch is under way. Back to day, every day VM
// runs again and the night VMs are parked.
// countWorld is the 4 x 4 world with night as day with 4 GPUs converted, the pool
// created and day made, and the GPU pods of countPods on the day nodes: by VM, its pods
// and its GPU (host, GPU index).
type countWorld struct {
	h      *harness
	pool   *gpupoolv1.GPUPoolProfile
	podsOf map[string][]*corev1.Pod
	gpuOf  map[string][2]int
}

func newCountWorld(t *testing.T, prefix string, restart bool) countWorld {
	t.Helper()
	h := newHarnessWith(t, prefix, fourByFour())
	h.restart = restart
	pool := h.dayNight()
	day := gpupoolv1.Layout{Name: "day", NodeLabels: map[string]string{"lab.example/workload": "inference"}}
	conv := &gpupoolv1.Conversion{Base: "day", Count: 4, Profile: "grid_p100-16q"}
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 16; i++ {
			day.Workers = append(day.Workers, gpupoolv1.Worker{VM: fmt.Sprintf("%sday-%d-%02d", h.prefix, hst, i), Profile: "grid_p100-4q"})
		}
		for i := 1; i <= 4; i++ {
			conv.Candidates = append(conv.Candidates, gpupoolv1.Candidate{VM: fmt.Sprintf("%snight-%d-%d", h.prefix, hst, i)})
		}
	}
	pool.Spec.Layouts = []gpupoolv1.Layout{day, {Name: "night", Convert: conv, NodeLabels: map[string]string{"lab.example/workload": "training"},
		NodeTaints: []corev1.Taint{{Key: "lab.example/training", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 20)

	// The GPU pods, by the GPU vSphere placed each day VM on.
	inv, err := h.vsphereClient().Inventory(h.ctx)
	h.must(err)
	podsOf := map[string][]*corev1.Pod{} // VM -> its GPU pods
	gpuOf := map[string][2]int{}         // VM -> (host, GPU)
	for hst := range 4 {
		host, ok := inv.FindHost(fmt.Sprintf("%sesx-%02d", h.prefix, hst+1))
		if !ok {
			t.Fatalf("no host esx-%02d", hst+1)
		}
		for g, gpu := range host.GPUs {
			if len(gpu.VMs) != 4 {
				t.Fatalf("%s GPU %d runs %v, want four day VMs", host.Name, g, gpu.VMs)
			}
			total := countPods[hst][g]
			for j, vm := range gpu.VMs {
				gpuOf[vm] = [2]int{hst, g}
				n := total / 4
				if j < total%4 {
					n++
				}
				for k := range n {
					var ann map[string]string
					if j == 0 && k == 0 && slices.Contains(countDND, [2]int{hst, g}) {
						ann = map[string]string{gpupoolv1.AnnotationDoNotDisrupt: "true"}
					}
					podsOf[vm] = append(podsOf[vm], h.replicaGPUPod(fmt.Sprintf("%s-p%d", vm, k), vm, ann))
				}
			}
		}
	}

	return countWorld{h: h, pool: pool, podsOf: podsOf, gpuOf: gpuOf}
}

func TestCountLayoutConvertsTheCheapestGPUs(t *testing.T) {
	cw := newCountWorld(t, "cnt-", false)
	h, pool, podsOf, gpuOf := cw.h, cw.pool, cw.podsOf, cw.gpuOf
	// Night by its window: the choice is the four cheapest GPUs that spare the
	// do-not-disrupt pods (esx-03's 0 and 3, esx-02's 1 and 3: 0+3+1+4 = 8 pods; the
	// do-not-disrupt GPUs esx-01's 2 and esx-04's 2 are cheaper but forbidden).
	want := map[[2]int]bool{{2, 0}: true, {2, 3}: true, {1, 1}: true, {1, 3}: true}
	h.clock.SetTime(monday1950)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if p.Status.Plan == nil || p.Status.Plan.Conversion == nil {
		t.Fatalf("status.plan %+v: want the conversion's choice while the switch is under way", p.Status.Plan)
	}
	cv := p.Status.Plan.Conversion
	var chosen []string
	for _, g := range cv.Chosen {
		chosen = append(chosen, strings.TrimPrefix(g.Host, h.prefix)+" "+g.GPU)
	}
	slices.Sort(chosen)
	if got := strings.Join(chosen, ", "); got != "esx-02 0000:5b:00.0, esx-02 0000:9b:00.0, esx-03 0000:3b:00.0, esx-03 0000:9b:00.0" || cv.Evicted != 8 || cv.Count != 4 {
		t.Fatalf("status.plan.conversion chose %s (evicting %d, count %d), want esx-02's GPUs 1 and 3 and esx-03's 0 and 3, evicting 8", got, cv.Evicted, cv.Count)
	}
	if len(cv.NotChosen) == 0 || !slices.ContainsFunc(cv.NotChosen, func(g gpupoolv1.GPUChoicePreview) bool { return strings.Contains(g.Why, "do-not-disrupt") }) {
		t.Errorf("status.plan.conversion.notChosen %+v: want the do-not-disrupt GPUs named with why", cv.NotChosen)
	}

	p = h.converge(pool.Name, "night", 80)
	if p.Status.Phase != gpupoolv1.PhaseSteady {
		t.Fatalf("phase %s after the switch, want Steady", p.Status.Phase)
	}
	for vm, g := range gpuOf {
		st := h.vm(strings.TrimPrefix(vm, h.prefix))
		converted := want[g]
		if running := st.PowerState == string(inventory.PoweredOn); running == converted {
			t.Errorf("day VM %s on GPU %v: power %s, want it parked exactly when its GPU is converted (%v)", vm, g, st.PowerState, converted)
		}
		if !converted {
			// A day node that keeps running serves day's work: day's labels, no taint
			// of night's.
			n := h.node(strings.TrimPrefix(vm, h.prefix))
			if n.Labels["lab.example/workload"] != "inference" || n.Labels[gpupoolv1.LabelLayout] != "day" || hasTaint(n, "lab.example/training") || n.Spec.Unschedulable {
				t.Errorf("day node %s kept in night: labels %v, taints %v, unschedulable %v; want day's labels, no taint, schedulable", n.Name, n.Labels, n.Spec.Taints, n.Spec.Unschedulable)
			}
		}
		for _, pod := range podsOf[vm] {
			err := k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			if gone := apierrors.IsNotFound(err); gone != converted {
				t.Errorf("pod %s on %s (GPU %v): gone %v, want evicted exactly when its GPU is converted", pod.Name, vm, g, gone)
			}
		}
	}
	running := 0
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("night-%d-%d", hst, i)
			if h.vm(name).PowerState != string(inventory.PoweredOn) {
				continue
			}
			running++
			if hst != 2 && hst != 3 {
				t.Errorf("night VM %s runs on a host with no converted GPU", name)
			}
			if n := h.node(name); n.Labels["lab.example/workload"] != "training" || n.Labels[gpupoolv1.LabelLayout] != "night" || !hasTaint(n, "lab.example/training") || n.Spec.Unschedulable {
				t.Errorf("night node %s: labels %v, taints %v, unschedulable %v; want night's labels and taint, schedulable", n.Name, n.Labels, n.Spec.Taints, n.Spec.Unschedulable)
			}
		}
	}
	if running != 4 {
		t.Errorf("%d night VMs run, want 4 (one per converted GPU)", running)
	}

	// Day again: the night VMs are parked and every day VM runs.
	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 80)
	for vm := range gpuOf {
		if st := h.vm(strings.TrimPrefix(vm, h.prefix)); st.PowerState != string(inventory.PoweredOn) {
			t.Errorf("day VM %s is %s after the switch back to day, want running", vm, st.PowerState)
		}
	}
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			if st := h.vm(fmt.Sprintf("night-%d-%d", hst, i)); st.PowerState == string(inventory.PoweredOn) {
				t.Errorf("night VM night-%d-%d runs by day", hst, i)
			}
		}
	}
}

// replicaGPUPod is a GPU pod of a ReplicaSet on node: a drain evicts it (a bare pod
// would hold the drain).
func (h *harness) replicaGPUPod(name, node string, annotations map[string]string) *corev1.Pod {
	h.t.Helper()
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps", Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "infer", UID: "d9d2b2f6-3c1e-4c54-9d59-5d4c1c7e0002", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "infer",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("1")}}}}},
	}
	h.must(k8s.Create(h.ctx, pod))
	h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	return pod
}

// running reports whether the harness's VM (without prefix) is powered on.
func (cw countWorld) running(vm string) bool {
	return cw.h.vm(strings.TrimPrefix(vm, cw.h.prefix)).PowerState == string(inventory.PoweredOn)
}

// checkConverted fails unless exactly the day VMs on the GPUs of converted are parked
// and exactly their pods gone (those of evicted GPUs: converted now or before), and
// nights night VMs run, on hosts of converted GPUs.
func (cw countWorld) checkConverted(when string, converted, evicted map[[2]int]bool, nights int) {
	t := cw.h.t
	t.Helper()
	for vm, g := range cw.gpuOf {
		if cw.running(vm) == converted[g] {
			t.Errorf("%s: day VM %s on GPU %v running %v, want parked exactly when its GPU is converted (%v)", when, vm, g, cw.running(vm), converted[g])
		}
		for _, pod := range cw.podsOf[vm] {
			err := k8s.Get(cw.h.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			if gone := apierrors.IsNotFound(err); gone != evicted[g] {
				t.Errorf("%s: pod %s on %s (GPU %v): gone %v, want %v", when, pod.Name, vm, g, gone, evicted[g])
			}
		}
	}
	hosts := map[int]bool{}
	for g := range converted {
		hosts[g[0]+1] = true
	}
	n := 0
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("%snight-%d-%d", cw.h.prefix, hst, i)
			if !cw.running(name) {
				continue
			}
			n++
			if !hosts[hst] {
				t.Errorf("%s: night VM %s runs on a host with no converted GPU", when, name)
			}
		}
	}
	if n != nights {
		t.Errorf("%s: %d night VMs run, want %d", when, n, nights)
	}
}

// cheapestFour are the GPUs night by count 4 converts on countPods: the four with fewest
// GPU pods that hold no do-not-disrupt pod.
var cheapestFour = map[[2]int]bool{{2, 0}: true, {2, 3}: true, {1, 1}: true, {1, 3}: true}

// TestCountLayoutExactlyOnceAcrossRestarts: the switch to a layout by count with the
// manager restarted before every pass (its memory of the last choice lost each time)
// makes the same choice throughout, and every VM gets each vSphere operation and every
// node its cordon at most once.
func TestCountLayoutExactlyOnceAcrossRestarts(t *testing.T) {
	cw := newCountWorld(t, "cnr-", true)
	h := cw.h
	var vms []string
	for vm := range cw.gpuOf {
		vms = append(vms, strings.TrimPrefix(vm, h.prefix))
	}
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			vms = append(vms, fmt.Sprintf("night-%d-%d", hst, i))
		}
	}
	l := h.ledger(vms...)
	h.clock.SetTime(monday1950)
	h.untilLayout(cw.pool.Name, "night", 150, l)
	l.once("day -> night by count, restarted before every pass")
	if h.restarts < 10 {
		t.Fatalf("%d restarts, want one before every pass", h.restarts)
	}
	cw.checkConverted("after the switch", cheapestFour, cheapestFour, 4)
}

// TestCountLayoutFollowsACountChange: with night active at count 4, the count lowered to
// 2 keeps two of the converted GPUs (evicting nothing more), parks the other two night
// VMs and brings the day VMs of their GPUs back; raised to 4 again it converts the
// cheapest GPUs again (those two: their day VMs have no pods left).
func TestCountLayoutFollowsACountChange(t *testing.T) {
	cw := newCountWorld(t, "cnc-", false)
	h := cw.h
	h.clock.SetTime(monday1950)
	h.converge(cw.pool.Name, "night", 80)
	cw.checkConverted("count 4", cheapestFour, cheapestFour, 4)

	setCount := func(n int32) {
		h.patchPool(cw.pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].Convert.Count = n })
		for range 80 {
			res := h.reconcile(cw.pool.Name)
			h.settle()
			p := h.get(cw.pool.Name)
			// Steady with no plan for the current layout: the repair of the active layout
			// to the new count is done (a repair is no transition).
			current := p.Status.Plan != nil && p.Status.Plan.For == gpupoolv1.PlanForCurrent
			if p.Status.ObservedGeneration == p.Generation && p.Status.Phase == gpupoolv1.PhaseSteady && !current && len(inFlight(p)) == 0 {
				return
			}
			h.clock.Step(min(max(res.RequeueAfter, time.Second), 10*time.Second))
		}
		t.Fatalf("count %d: the pool did not settle", n)
	}
	setCount(2)
	kept := map[[2]int]bool{}
	for g := range cheapestFour {
		if cw.anyNightOn(g) {
			kept[g] = true
		}
	}
	if len(kept) != 2 {
		t.Fatalf("count 2 keeps %d converted GPUs (%v), want 2 of %v", len(kept), kept, cheapestFour)
	}
	cw.checkConverted("count 2", kept, cheapestFour, 2)

	setCount(4)
	cw.checkConverted("count 4 again", cheapestFour, cheapestFour, 4)
}

// anyNightOn tells whether a night VM runs on the GPU.
func (cw countWorld) anyNightOn(g [2]int) bool {
	inv, err := cw.h.vsphereClient().Inventory(cw.h.ctx)
	cw.h.must(err)
	host, ok := inv.FindHost(fmt.Sprintf("%sesx-%02d", cw.h.prefix, g[0]+1))
	if !ok {
		return false
	}
	return slices.ContainsFunc(host.GPUs[g[1]].VMs, func(vm string) bool { return strings.Contains(vm, "night-") })
}
