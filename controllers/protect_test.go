package controllers

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

// TestMatchNodes (5): how a VM finds its node, and that a node is never shared.
func TestMatchNodes(t *testing.T) {
	node := func(name, provider string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: provider}}
	}
	nodes := []corev1.Node{
		node("worker-a", "vsphere://4215AAAA-0000-0000-0000-000000000001"),
		node("gpu-day-1.lab.example.com", ""),
		node("gpu-day-2", ""),
		node("named-by-admin", ""),
		node("twin.a.example", ""), node("twin.b.example", ""),
	}
	vms := map[string]*inventory.VM{
		"by-uuid":   {Name: "by-uuid", UUID: "4215aaaa-0000-0000-0000-000000000001"},
		"GPU-Day-1": {Name: "GPU-Day-1"},
		"GPU-DAY-2": {Name: "GPU-DAY-2"},
		"explicit":  {Name: "explicit"},
		"twin":      {Name: "twin"},
		"headless":  {Name: "worker-a"},
		"missing":   {Name: "missing"},
	}
	workers := []gpupoolv1.Worker{
		{VM: "by-uuid"}, {VM: "GPU-Day-1"}, {VM: "GPU-DAY-2"}, {VM: "explicit", Node: "named-by-admin"},
		{VM: "twin"}, {VM: "headless", NoNode: true}, {VM: "missing"},
	}
	got := map[string]string{}
	matched, _ := world.MatchNodes(workers, vms, nodes)
	for vm, n := range matched {
		got[vm] = n.Name
	}
	want := map[string]string{
		"by-uuid":   "worker-a",                  // providerID, case-insensitively
		"GPU-Day-1": "gpu-day-1.lab.example.com", // short name of an FQDN
		"GPU-DAY-2": "gpu-day-2",                 // name, case-insensitively
		"explicit":  "named-by-admin",            // workers[].node
		// twin: two FQDN nodes share the short name: neither is taken.
		// headless: noNode, although a node carries its name.
	}
	if len(got) != len(want) {
		t.Errorf("matched %v, want %v", got, want)
	}
	for vm, n := range want {
		if got[vm] != n {
			t.Errorf("VM %s: node %q, want %q", vm, got[vm], n)
		}
	}

	// One VM named two ways (by name in one layout, by path in another) keeps its node.
	vm := &inventory.VM{Name: "gpu-day-2", Path: "/dc1/vm/gpu-day-2"}
	same, _ := world.MatchNodes([]gpupoolv1.Worker{{VM: "gpu-day-2"}, {VM: "/dc1/vm/gpu-day-2"}},
		map[string]*inventory.VM{"gpu-day-2": vm, "/dc1/vm/gpu-day-2": vm}, nodes)
	if same["gpu-day-2"] == nil {
		t.Error("a VM named by name and by path lost its node")
	}

	// Two VMs that would take the same node get none.
	shared, _ := world.MatchNodes([]gpupoolv1.Worker{{VM: "a", Node: "gpu-day-2"}, {VM: "GPU-DAY-2"}},
		map[string]*inventory.VM{"a": {Name: "a"}, "GPU-DAY-2": {Name: "GPU-DAY-2"}}, nodes)
	if len(shared) != 0 {
		t.Errorf("a node claimed twice was given out: %v", shared)
	}
}

// machineFor makes a Cluster API Machine for the VM's node, whose infrastructure machine
// is of the given group and kind, records the node in its status.nodeRef and annotates
// the node with it, as Cluster API does.
func (h *harness) machineFor(vm, infraGroup, infraKind string) *clusterv1.Machine {
	h.t.Helper()
	m := h.machine(vm, h.prefix+vm, infraGroup, infraKind)
	h.annotateMachine(vm, m)
	return m
}

// machine makes a Cluster API Machine named name whose status.nodeRef names node.
func (h *harness) machine(name, node, infraGroup, infraKind string) *clusterv1.Machine {
	h.t.Helper()
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps"},
		Spec: clusterv1.MachineSpec{
			ClusterName: "lab",
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptrTo("bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infraGroup, Kind: infraKind, Name: name},
		},
	}
	h.must(k8s.Create(h.ctx, m))
	before := m.DeepCopy()
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	h.must(k8s.Status().Patch(h.ctx, m, client.MergeFrom(before)))
	return m
}

// annotateMachine names the Machine on the VM's node, as Cluster API (or anyone who can
// write the node, its kubelet included) does.
func (h *harness) annotateMachine(vm string, m *clusterv1.Machine) {
	h.t.Helper()
	n := h.node(vm)
	before := n.DeepCopy()
	n.Annotations[clusterv1.MachineAnnotation] = m.Name
	n.Annotations[clusterv1.ClusterNamespaceAnnotation] = m.Namespace
	h.must(k8s.Patch(h.ctx, n, client.MergeFrom(before)))
}

// capvObjects makes a VSphereMachine named name and the VSphereVM it owns, as CAPV does.
func (h *harness) capvObjects(name string) map[string]*unstructured.Unstructured {
	h.t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	for _, kind := range []string{"VSphereMachine", "VSphereVM"} {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta1")
		o.SetKind(kind)
		o.SetNamespace(h.prefix + "apps")
		o.SetName(name)
		if owner := objs["VSphereMachine"]; owner != nil {
			o.SetOwnerReferences([]metav1.OwnerReference{{
				APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID()}})
		}
		h.must(k8s.Create(h.ctx, o))
		objs[kind] = o
	}
	return objs
}

// TestUnreadableMachineHoldsThePark (9): a node that names a Cluster API Machine whose
// infrastructure machine cannot be read is never parked unprotected.
func TestUnreadableMachineHoldsThePark(t *testing.T) {
	h := newHarness(t, "unr-")
	h.machineFor("day-1", "infrastructure.example.com", "UnknownMachine")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	p := h.passes(pool.Name, 25, 10*time.Second)
	if st := h.vm("day-1"); st.PowerState != "poweredOn" {
		t.Fatalf("day-1 is %s: parked although its Machine could not be protected", st.PowerState)
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonMachineUnreadable, h.prefix+"day-1", "UnknownMachine")
}

// TestCAPVVSphereVMIsPaused (9): CAPV powers VMs on from VSphereVMs, so a parked VM's
// VSphereVM is paused too, and released when the VM is back.
func TestCAPVVSphereVMIsPaused(t *testing.T) {
	h := newHarness(t, "cpv-")
	objs := h.capvObjects("day-2")
	h.machineFor("day-2", "infrastructure.cluster.x-k8s.io", "VSphereMachine")
	paused := func() bool {
		o := objs["VSphereVM"].DeepCopy()
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(o), o))
		return hasKey(o.GetAnnotations(), clusterv1.PausedAnnotation)
	}

	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	if !paused() {
		t.Error("the parked VM's VSphereVM is not paused: CAPV could power it back on")
	}
	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 60)
	if paused() {
		t.Error("the VSphereVM stays paused after its VM came back")
	}
}

// TestCAPVVSphereVMOfAnotherOwnerIsNotPaused (issue 35): the VSphereVM is reached through
// the VSphereMachine's ownership, not by name: a VSphereVM of the expected name that the
// VSphereMachine does not own is not touched, while the Machine and VSphereMachine are
// protected as before.
func TestCAPVVSphereVMOfAnotherOwnerIsNotPaused(t *testing.T) {
	h := newHarness(t, "cpo-")
	ns := h.prefix + "apps"
	vsm := &unstructured.Unstructured{}
	vsm.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta1")
	vsm.SetKind("VSphereMachine")
	vsm.SetNamespace(ns)
	vsm.SetName("day-3")
	h.must(k8s.Create(h.ctx, vsm))
	stranger := vsm.DeepCopy()
	stranger.SetKind("VSphereVM")
	stranger.SetResourceVersion("")
	stranger.SetUID("")
	h.must(k8s.Create(h.ctx, stranger))
	m := h.machineFor("day-3", "infrastructure.cluster.x-k8s.io", "VSphereMachine")

	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	var gm clusterv1.Machine
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(m), &gm))
	got := vsm.DeepCopy()
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(vsm), got))
	if !hasKey(gm.Annotations, clusterv1.MachineSkipRemediationAnnotation) || !hasKey(got.GetAnnotations(), clusterv1.PausedAnnotation) {
		t.Errorf("the parked node's Machine or VSphereMachine is not protected: %v, %v", gm.Annotations, got.GetAnnotations())
	}
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(stranger), stranger))
	if len(stranger.GetAnnotations()) != 0 {
		t.Errorf("a VSphereVM the VSphereMachine does not own was annotated: %v", stranger.GetAnnotations())
	}
}

// TestNodeAnnotationNamingAnotherMachine (issue 35): a node's annotations (which its own
// kubelet can write) naming another node's Machine are ignored: nothing on that Machine,
// its VSphereMachine or its VSphereVM changes, and the VM is held rather than parked
// unprotected, with a message naming the node and the Machine.
func TestNodeAnnotationNamingAnotherMachine(t *testing.T) {
	h := newHarness(t, "fmc-")
	objs := h.capvObjects("elsewhere")
	victim := h.machine("elsewhere", "worker-elsewhere", "infrastructure.cluster.x-k8s.io", "VSphereMachine")
	h.annotateMachine("day-1", victim)
	untouched := func(when string) {
		t.Helper()
		var m clusterv1.Machine
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(victim), &m))
		if len(m.Annotations) != 0 {
			t.Errorf("%s: the other node's Machine was annotated: %v", when, m.Annotations)
		}
		for kind, o := range objs {
			got := o.DeepCopy()
			h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(o), got))
			if len(got.GetAnnotations()) != 0 {
				t.Errorf("%s: the other node's %s was annotated: %v", when, kind, got.GetAnnotations())
			}
		}
	}

	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	p := h.passes(pool.Name, 25, 10*time.Second)
	if st := h.vm("day-1"); st.PowerState != "poweredOn" {
		t.Errorf("day-1 is %s: parked although the Machine its node names is not its own", st.PowerState)
	}
	for _, vm := range []string{"day-2", "day-3", "day-4"} {
		if st := h.vm(vm); st.PowerState == "poweredOn" {
			t.Errorf("%s is still on: one held node must not hold the others", vm)
		}
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonMachineNotTrusted,
		"node "+h.prefix+"day-1 names Machine "+h.prefix+"apps/elsewhere", "names node worker-elsewhere")
	untouched("night")

	// Releasing the node (the day comes back) does not touch that Machine either.
	h.clock.SetTime(tuesday0750)
	h.passes(pool.Name, 25, 10*time.Second)
	untouched("day")
}

// TestTrustMachine: a Machine is the node's only when its status.nodeRef names the node
// (and its uid, when the Machine records one).
func TestTrustMachine(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", UID: "uid-1",
		Annotations: map[string]string{clusterv1.MachineAnnotation: "m"}}}
	for _, tc := range []struct {
		name    string
		nodeRef map[string]any
		want    string // "" when trusted
	}{
		{"names the node", map[string]any{"name": "gpu-1"}, ""},
		{"names the node and its uid", map[string]any{"name": "gpu-1", "uid": "uid-1"}, ""},
		{"no nodeRef yet", nil, "names no node yet"},
		{"another node", map[string]any{"name": "gpu-2"}, "whose status.nodeRef names node gpu-2"},
		{"a former node of the same name", map[string]any{"name": "gpu-1", "uid": "uid-0"}, "with uid uid-0, not this node's uid-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &unstructured.Unstructured{Object: map[string]any{}}
			m.SetNamespace("capi")
			m.SetName("m")
			if tc.nodeRef != nil {
				m.Object["status"] = map[string]any{"nodeRef": tc.nodeRef}
			}
			err := trustMachine(m, node)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("not trusted: %v", err)
			case tc.want != "" && (!errors.Is(err, errMachineNotTrusted) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want errMachineNotTrusted saying %q", err, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), "node gpu-1 names Machine capi/m"):
				t.Errorf("error %v does not name the node and the Machine", err)
			}
		})
	}
}

// TestGuestShutdown (9): a transient error asking the guest is retried rather than
// followed by a hard power-off; a guest without VMware Tools is powered off hard at once.
func TestGuestShutdown(t *testing.T) {
	h := newHarness(t, "gsd-")
	h.sim.FailGuestOps(h.prefix+"day-1", 1, &vimtypes.HostCommunication{})
	h.sim.FailGuestOps(h.prefix+"day-2", -1, &vimtypes.ToolsUnavailable{})
	pool := h.dayNight()
	pool.Spec.Parking = gpupoolv1.ParkingPowerOff
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.checkNightParkedOff(h.converge(pool.Name, "night", 80))
	if got := h.sim.Calls("PowerOffVM_Task"); got != 1 {
		t.Errorf("PowerOffVM_Task called %d times, want 1 (day-2, whose guest has no tools)", got)
	}
	evs := h.events()
	containsAll(t, "events", evs, "GuestShutdownUnavailable")
	for _, e := range evs {
		if strings.Contains(e, "GuestShutdownUnavailable") && !strings.Contains(e, h.prefix+"day-2") {
			t.Errorf("a hard power-off after a transient error: %s", e)
		}
	}
}

// TestGuestShutdownTimeout (9): a guest that does not shut down within
// spec.guestShutdownTimeout is powered off hard.
func TestGuestShutdownTimeout(t *testing.T) {
	h := newHarness(t, "gst-")
	h.sim.SetTaskDelay("ShutdownGuest", time.Hour) // the guests never finish
	pool := h.dayNight()
	pool.Spec.Parking = gpupoolv1.ParkingPowerOff
	pool.Spec.GuestShutdownTimeout = &metav1.Duration{Duration: time.Minute}
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.checkNightParkedOff(h.converge(pool.Name, "night", 80))
	if got := h.sim.Calls("PowerOffVM_Task"); got != 4 {
		t.Errorf("PowerOffVM_Task called %d times, want 4 after the guests did not shut down", got)
	}
	containsAll(t, "events", h.events(), "GuestShutdownTimedOut")
}

func (h *harness) checkNightParkedOff(p *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	if p.Status.ActiveLayout != "night" {
		h.t.Fatalf("active %q, want night", p.Status.ActiveLayout)
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if st := h.vm(vm); st.PowerState != "poweredOff" {
			h.t.Errorf("VM %s %s, want powered off", vm, st.PowerState)
		}
	}
}

// TestTaintPatchKeepsOtherControllersTaints (9): a node patch built from a stale copy of
// the node must not drop a taint another controller added meanwhile.
func TestTaintPatchKeepsOtherControllersTaints(t *testing.T) {
	h := newHarness(t, "tnt-")
	stale := h.node("day-1")
	cur := stale.DeepCopy()
	before := cur.DeepCopy()
	cur.Spec.Taints = append(cur.Spec.Taints, corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule})
	h.must(k8s.Patch(h.ctx, cur, client.MergeFrom(before)))

	r := h.reconciler()
	h.must(r.patchNode(h.ctx, stale, func(n *corev1.Node) { nodes.ApplyMeta(n, nodes.ParkedMeta("tnt-pool")) }))
	got := h.node("day-1")
	var keys []string
	for _, t := range got.Spec.Taints {
		keys = append(keys, t.Key)
	}
	if !slices.Contains(keys, "example.com/other") || !slices.Contains(keys, TaintParked) {
		t.Errorf("taints %v, want both the other controller's and gpupool's", keys)
	}
}

// TestNodePatchWritesNoSharedNode: a pass's nodes share their labels, taints and
// conditions with the manager's cache (observe lists them without copying), so a node
// write must change the node it is given and never what it shares, whether the patch
// goes through at once or is made again after a conflict (the node read again into it).
// The written node keeps the status the pass read (shared), or after a conflict the one
// read again.
func TestNodePatchWritesNoSharedNode(t *testing.T) {
	h := newHarness(t, "nsh-")
	r := h.reconciler()
	for i, conflict := range []bool{false, true} {
		vm := fmt.Sprintf("day-%d", i+1)
		cached := h.node(vm)
		if conflict { // another writer moves the node on: the patch conflicts and reads it again
			cur := cached.DeepCopy()
			cur.Labels["example.com/other"] = strconv.FormatBool(conflict)
			h.must(k8s.Update(h.ctx, cur))
		}
		want := cached.DeepCopy()
		n := *cached // what the cache's List gives a pass: the same maps and slices
		h.must(r.patchNode(h.ctx, &n, func(n *corev1.Node) {
			nodes.ApplyMeta(n, nodes.ParkedMeta("nsh-pool"))
			nodes.SetState(n, "parked", "nsh-pool")
		}))
		if !equality.Semantic.DeepEqual(cached, want) {
			t.Errorf("conflict %v: the shared node changed: labels %v, taints %v; was %v, %v", conflict, cached.Labels, cached.Spec.Taints, want.Labels, want.Spec.Taints)
		}
		if n.Labels[LabelState] != "parked" || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintParked }) {
			t.Errorf("conflict %v: the written node %v %v, want it parked", conflict, n.Labels, n.Spec.Taints)
		}
		// The pass holds the status it read, not the answer's: the answer's is let go.
		if shared := len(n.Status.Conditions) > 0 && &n.Status.Conditions[0] == &cached.Status.Conditions[0]; shared == conflict {
			t.Errorf("conflict %v: the written node holds the status it was given: %v, want %v", conflict, shared, !conflict)
		}
		if got := h.node(vm); got.Labels[LabelState] != "parked" || (conflict && got.Labels["example.com/other"] != "true") {
			t.Errorf("conflict %v: the API server's node %v", conflict, got.Labels)
		}
	}
}
