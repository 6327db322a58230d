package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/testworld"
)

// rolloutWorld is one P100 with two 4Q VMs running (the MachineDeployment's first
// Machines) and two powered off (the rollout's), and the night VM.
const rolloutWorld = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    policy: performance
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
vms:
  - {name: %[1]sday-1, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-2, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-3, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOff}
  - {name: %[1]sday-4, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOff}
  - {name: %[1]snight-1, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOff}
`

// deploymentMachine makes the Machine of MachineDeployment md that runs the VM, as
// Cluster API and CAPV do: the Machine (label cluster.x-k8s.io/deployment-name, its
// node in status.nodeRef), its VSphereMachine and the VSphereVM that one owns, named
// after the VM.
func (h *harness) deploymentMachine(md, vm string) *clusterv1.Machine {
	h.t.Helper()
	name := h.prefix + vm
	h.capvObjects(name)
	m := h.machine(name, name, "infrastructure.cluster.x-k8s.io", "VSphereMachine")
	before := m.DeepCopy()
	m.Labels = map[string]string{clusterv1.MachineDeploymentNameLabel: md}
	h.must(k8s.Patch(h.ctx, m, client.MergeFrom(before)))
	return m
}

// deleteMachine deletes the Machine and its CAPV objects, as a rollout does.
func (h *harness) deleteMachine(m *clusterv1.Machine) {
	h.t.Helper()
	h.must(k8s.Delete(h.ctx, m))
	for _, kind := range []string{"VSphereVM", "VSphereMachine"} {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta1")
		o.SetKind(kind)
		o.SetNamespace(m.Namespace)
		o.SetName(m.Name)
		h.must(k8s.Delete(h.ctx, o))
	}
}

// failMachineList fails the listing of Machines while fail is set, as an API server
// that does not answer.
type failMachineList struct {
	client.Reader
	fail *atomic.Bool
}

func (f failMachineList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if u, ok := list.(*unstructured.UnstructuredList); ok && u.GetKind() == "MachineList" && f.fail.Load() {
		return errors.New("injected: the API server does not answer")
	}
	return f.Reader.List(ctx, list, opts...)
}

// selectPool is the day/night pool whose day layout selects the Machines of the
// MachineDeployment gpu.
func (h *harness) selectPool() *gpupoolv1.GPUPoolProfile {
	pool := h.dayNight()
	day := testworld.Layout(pool, "day")
	day.Workers = nil
	day.Select = &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{
		MachineDeployment: &gpupoolv1.MachineDeploymentReference{Namespace: h.prefix + "apps", Name: "gpu"}}}
	return pool
}

// poolNode tells whether the VM's node serves the pool (gpupool's pool label on it).
func (h *harness) poolNode(vm, pool string) bool {
	return h.node(vm).Labels[gpupoolv1.LabelPool] == pool
}

// convergeRepaired is converge until, beside, no worker has a step left: a change of
// the active layout's VMs (a new selection) is a repair of the active layout, during
// which the pool stays Steady.
func (h *harness) convergeRepaired(name, layout string, maxIter int) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	for range maxIter {
		res := h.reconcile(name)
		h.settle()
		p := h.get(name)
		if testworld.Reached(p, layout) && !slices.ContainsFunc(p.Status.Workers, func(w gpupoolv1.WorkerStatus) bool { return w.Step != "" }) {
			return p
		}
		h.clock.Step(testworld.Step(res))
	}
	p := h.get(name)
	h.t.Fatalf("pool did not settle on %s after %d passes: phase %s, workers %+v, %s", layout, maxIter, p.Status.Phase, p.Status.Workers, testworld.Conditions(p))
	return nil
}

func hasWorker(p *gpupoolv1.GPUPoolProfile, vm string) bool {
	for _, w := range p.Status.Workers {
		if w.VM == vm {
			return true
		}
	}
	return false
}

// TestSelectFollowsMachineDeploymentRollout (issue 38, select): the day layout selects
// a MachineDeployment's Machines. A rollout replaces them (new Machines on new VMs, the
// old ones deleted): the pool follows, the new VMs are powered on and their nodes
// labelled, the old nodes released as a VM removed from the spec is (gpupool's labels
// gone; the VMs are Cluster API's to delete).
func TestSelectFollowsMachineDeploymentRollout(t *testing.T) {
	h := newHarnessWith(t, "sel-", rolloutWorld)
	old := []*clusterv1.Machine{h.deploymentMachine("gpu", "day-1"), h.deploymentMachine("gpu", "day-2")}
	h.deploymentMachine("other", "day-4") // another MachineDeployment's Machine
	pool := h.selectPool()
	h.clock.SetTime(monday1000)
	h.create(pool)
	p := h.converge(pool.Name, "day", 30)
	for _, vm := range []string{"day-1", "day-2"} {
		if !h.poolNode(vm, pool.Name) || h.vm(vm).PowerState != string(inventory.PoweredOn) {
			t.Fatalf("%s: node %v, VM %s; want a running pool node", vm, h.node(vm).Labels, h.vm(vm).PowerState)
		}
		if h.node(vm).Labels["lab.example/workload"] != "inference" {
			t.Errorf("%s's node has labels %v, want day's", vm, h.node(vm).Labels)
		}
	}
	for _, vm := range []string{"day-3", "day-4"} {
		if hasWorker(p, h.prefix+vm) || h.vm(vm).PowerState == string(inventory.PoweredOn) {
			t.Errorf("%s, of no Machine of the MachineDeployment, is a worker or runs", vm)
		}
	}

	// The rollout: day-3's Machine first, then the old Machines deleted.
	h.deploymentMachine("gpu", "day-3")
	for _, m := range old {
		h.deleteMachine(m)
	}
	p = h.convergeRepaired(pool.Name, "day", 40)
	if st := h.vm("day-3"); st.PowerState != string(inventory.PoweredOn) || !h.poolNode("day-3", pool.Name) {
		t.Errorf("day-3 (the rollout's Machine): VM %s, node labels %v; want it picked up: running, a pool node; phase %s, workers %+v, steps %v", st.PowerState, h.node("day-3").Labels, p.Status.Phase, p.Status.Workers, h.steps)
	}
	for _, vm := range []string{"day-1", "day-2"} {
		n := h.node(vm)
		if n.Labels[gpupoolv1.LabelPool] != "" || n.Labels["lab.example/workload"] != "" || n.Spec.Unschedulable {
			t.Errorf("%s's node after the rollout: labels %v, unschedulable %v; want it released", vm, n.Labels, n.Spec.Unschedulable)
		}
		if hasWorker(p, h.prefix+vm) {
			t.Errorf("%s is still a worker in the status after its Machine was deleted", vm)
		}
		if st := h.vm(vm); st.PowerState != string(inventory.PoweredOn) {
			t.Errorf("%s is %s: gpupool parked a VM it no longer manages (Cluster API deletes it)", vm, st.PowerState)
		}
	}
	if !hasWorker(p, h.prefix+"day-3") || hasWorker(p, h.prefix+"day-4") {
		t.Errorf("workers %+v: want day-3, not day-4 (another MachineDeployment's)", p.Status.Workers)
	}
}

// TestSelectionReadFailureReleasesNothing (issue 38, select): a selection that cannot
// be read is never "no VMs". With a last selection the pass keeps it; without one (a
// restarted manager) the pass stops and says why; no node is released either way. Once
// the Machines can be read again the pool follows them.
func TestSelectionReadFailureReleasesNothing(t *testing.T) {
	h := newHarnessWith(t, "sef-", rolloutWorld)
	old := []*clusterv1.Machine{h.deploymentMachine("gpu", "day-1"), h.deploymentMachine("gpu", "day-2")}
	pool := h.selectPool()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	fail := &atomic.Bool{}
	failing := func() { h.reconciler().APIReader = failMachineList{Reader: operator, fail: fail} }
	failing()
	fail.Store(true)
	// A rollout the pass cannot see: were the failed read "no Machines", day-1 and
	// day-2 would be released.
	h.deploymentMachine("gpu", "day-3")
	for _, m := range old {
		h.deleteMachine(m)
	}
	kept := func(when string) {
		t.Helper()
		for _, vm := range []string{"day-1", "day-2"} {
			if !h.poolNode(vm, pool.Name) {
				t.Errorf("%s: %s's node was released (labels %v)", when, vm, h.node(vm).Labels)
			}
		}
		if st := h.vm("day-3"); st.PowerState == string(inventory.PoweredOn) {
			t.Errorf("%s: day-3 was powered on from a selection that could not be read", when)
		}
	}
	for range 3 {
		h.reconcile(pool.Name)
		h.settle()
	}
	kept("with the last selection")
	if p := h.get(pool.Name); !hasWorker(p, h.prefix+"day-1") {
		t.Errorf("the last selection's day-1 left the status: %+v", p.Status.Workers)
	}

	// A restarted manager has no last selection: the pass stops and says why.
	h.rec = nil
	failing()
	h.reconcile(pool.Name)
	h.settle()
	kept("after a restart")
	p := h.get(pool.Name)
	if c := testworld.Conditions(p); !strings.Contains(c, "selecting the VMs of layout day") || !strings.Contains(c, "injected") {
		t.Errorf("conditions %s: want why the pool stopped (the Machines could not be listed)", c)
	}

	fail.Store(false)
	h.convergeRepaired(pool.Name, "day", 40)
	if !h.poolNode("day-3", pool.Name) || h.poolNode("day-1", pool.Name) {
		t.Errorf("once the Machines can be read: day-3 labels %v, day-1 labels %v; want the pool to follow the rollout",
			h.node("day-3").Labels, h.node("day-1").Labels)
	}
}

// TestSelectByNamePatternAndCandidatesFrom (issue 38, select): the day layout selects
// its VMs by name pattern in vCenter, and night, a layout by count, selects its
// candidates the same way (convert.candidatesFrom): by night the GPU is converted to
// the night VM, by day the day VMs run again.
func TestSelectByNamePatternAndCandidatesFrom(t *testing.T) {
	h := newHarness(t, "sen-")
	pool := h.dayNight()
	day := testworld.Layout(pool, "day")
	day.Workers = nil
	day.Select = &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{NamePattern: h.prefix + "day-*"}}
	night := testworld.Layout(pool, "night")
	night.Workers = nil
	night.Convert = &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q",
		CandidatesFrom: &gpupoolv1.VMSelector{NamePattern: h.prefix + "night-*"}}
	h.clock.SetTime(monday1000)
	h.create(pool)
	p := h.converge(pool.Name, "day", 30)
	for i := 1; i <= 4; i++ {
		vm := fmt.Sprintf("day-%d", i)
		if !hasWorker(p, h.prefix+vm) || !h.poolNode(vm, pool.Name) {
			t.Errorf("%s, which the pattern matches, is no worker or pool node (workers %+v)", vm, p.Status.Workers)
		}
	}
	if !hasWorker(p, h.prefix+"night-1") {
		t.Errorf("night-1, a selected candidate, is not a pool VM: workers %+v", p.Status.Workers)
	}

	h.clock.SetTime(monday1950)
	h.converge(pool.Name, "night", 60)
	if st := h.vm("night-1"); st.PowerState != string(inventory.PoweredOn) {
		t.Errorf("night-1 is %s by night, want it running on the converted GPU", st.PowerState)
	}
	for i := 1; i <= 4; i++ {
		if st := h.vm(fmt.Sprintf("day-%d", i)); st.PowerState == string(inventory.PoweredOn) {
			t.Errorf("day-%d runs by night on the converted GPU", i)
		}
	}

	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 60)
	for i := 1; i <= 4; i++ {
		if st := h.vm(fmt.Sprintf("day-%d", i)); st.PowerState != string(inventory.PoweredOn) {
			t.Errorf("day-%d is %s by day, want running", i, st.PowerState)
		}
	}
}

// TestSelectFollowsVSphereTags (issue 38, select by tag): the day layout selects the VMs
// that carry a vSphere tag. An administrator tags one more VM and untags another: the
// pool follows (the newly tagged VM powered on and its node labelled, the untagged one's
// node released, its VM left as it is). The tag deleted in vCenter is a selection that
// cannot be read, never "no VMs": nothing is released, and a restarted manager (no last
// selection) stops and says which tag is missing. Tagged again, the pool follows.
func TestSelectFollowsVSphereTags(t *testing.T) {
	h := newHarnessWith(t, "stg-", rolloutWorld)
	const dayTag = "gpupool/day"
	for _, vm := range []string{"day-1", "day-2"} {
		h.must(h.sim.AttachTag(h.prefix+vm, dayTag))
	}
	h.must(h.sim.AttachTag(h.prefix+"day-4", "gpupool/night")) // another tag of the category
	pool := h.dayNight()
	day := testworld.Layout(pool, "day")
	day.Workers = nil
	day.Select = &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{
		Tag: &gpupoolv1.TagReference{Category: "gpupool", Name: "day"}}}
	h.clock.SetTime(monday1000)
	h.create(pool)
	p := h.converge(pool.Name, "day", 30)
	for _, vm := range []string{"day-1", "day-2"} {
		if !h.poolNode(vm, pool.Name) || h.vm(vm).PowerState != string(inventory.PoweredOn) {
			t.Fatalf("%s (tagged): node labels %v, VM %s; want a running pool node", vm, h.node(vm).Labels, h.vm(vm).PowerState)
		}
	}
	for _, vm := range []string{"day-3", "day-4"} {
		if hasWorker(p, h.prefix+vm) || h.vm(vm).PowerState == string(inventory.PoweredOn) {
			t.Errorf("%s, untagged or of another tag, is a worker or runs", vm)
		}
	}

	h.must(h.sim.AttachTag(h.prefix+"day-3", dayTag))
	h.must(h.sim.DetachTag(h.prefix+"day-1", dayTag))
	p = h.convergeRepaired(pool.Name, "day", 40)
	if st := h.vm("day-3"); st.PowerState != string(inventory.PoweredOn) || !h.poolNode("day-3", pool.Name) {
		t.Errorf("day-3 (tagged since): VM %s, node labels %v; want it picked up", st.PowerState, h.node("day-3").Labels)
	}
	if n := h.node("day-1"); n.Labels[gpupoolv1.LabelPool] != "" || n.Spec.Unschedulable || hasWorker(p, h.prefix+"day-1") {
		t.Errorf("day-1 (untagged): node labels %v, unschedulable %v, still a worker %v; want it released",
			n.Labels, n.Spec.Unschedulable, hasWorker(p, h.prefix+"day-1"))
	}
	if st := h.vm("day-1"); st.PowerState != string(inventory.PoweredOn) {
		t.Errorf("day-1 is %s: gpupool parked a VM it no longer manages", st.PowerState)
	}

	h.must(h.sim.DeleteTag(dayTag))
	kept := func(when string) {
		t.Helper()
		for _, vm := range []string{"day-2", "day-3"} {
			if !h.poolNode(vm, pool.Name) {
				t.Errorf("%s: %s's node was released (labels %v)", when, vm, h.node(vm).Labels)
			}
		}
	}
	for range 3 {
		h.reconcile(pool.Name)
		h.settle()
	}
	kept("with the tag deleted and the last selection")
	h.rec = nil
	h.reconcile(pool.Name)
	h.settle()
	kept("with the tag deleted, after a restart")
	if c := testworld.Conditions(h.get(pool.Name)); !strings.Contains(c, "selecting the VMs of layout day") || !strings.Contains(c, `tag "day" not found in category "gpupool"`) {
		t.Errorf("conditions %s: want why the pool stopped (the tag is missing)", c)
	}

	h.must(h.sim.AttachTag(h.prefix+"day-2", dayTag))
	h.convergeRepaired(pool.Name, "day", 40)
	if !h.poolNode("day-2", pool.Name) || h.poolNode("day-3", pool.Name) {
		t.Errorf("tagged again (day-2 only): day-2 labels %v, day-3 labels %v; want the pool to follow the tag",
			h.node("day-2").Labels, h.node("day-3").Labels)
	}
}
