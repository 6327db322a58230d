package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/vsphere"
)

const vcenterCapacityInventory = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    policy: performance
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:d8:00.0"}
    profiles:
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
vms:
  - {name: %[1]sbig-1, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOn}
  - {name: %[1]sbig-2, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOff}
`

// TestVCenterCapacityDisagreement: gpupool's packing finds the second GPU free for
// big-2, but vCenter (DirectPathProfileManager.QueryCapacity, forced in the simulator)
// says no 16Q vGPU remains on the host. The layout is refused before anything is
// touched, with a message reporting the disagreement; once vCenter agrees, it is reached.
// Note: nothing a read sees changes when the simulator is told to disagree, so the
// session's last answer would be reused (vsphere/capacitymemo.go): the connector runs on
// the test's clock, stepped past vsphere.CapacityMaxAge after each change of vCenter's
// mind.
func TestVCenterCapacityDisagreement(t *testing.T) {
	h := newHarnessWith(t, "vc-", vcenterCapacityInventory)
	h.conn = newConnector(vsphere.WithClock(h.clock))
	t.Cleanup(func() { closeConnector(h.conn) })
	pool := h.pool("vcap", h.layout("one", "big-1=grid_p100-16q"),
		h.layout("two", "big-1=grid_p100-16q", "big-2=grid_p100-16q"))
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "one", 30)

	h.sim.SetVCenterRemaining(h.prefix+"esx-01", "grid_p100-16q", 0)
	h.clock.Step(vsphere.CapacityMaxAge)
	h.switchTo(pool.Name, "two")
	p := h.passes(pool.Name, 5, 10*time.Second)
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonInfeasible,
		"gpupool's packing finds room for 1 x grid_p100-16q on host "+h.prefix+"esx-01",
		"vCenter (DirectPathProfileManager.QueryCapacity) says remaining 0", "gpupool follows vCenter")
	if p.Status.ActiveLayout != "one" {
		t.Errorf("active layout %q, want one kept", p.Status.ActiveLayout)
	}
	if st := h.vm("big-2"); st.PowerState != "poweredOff" {
		t.Errorf("big-2 %s: a refused layout must not power it on", st.PowerState)
	}
	if st := h.vm("big-1"); st.PowerState != "poweredOn" {
		t.Errorf("big-1 %s: a refused layout must not touch the running VM", st.PowerState)
	}
	if n := h.node("big-1"); n.Spec.Unschedulable {
		t.Error("big-1's node cordoned for a refused layout")
	}

	h.sim.SetVCenterRemaining(h.prefix+"esx-01", "grid_p100-16q", -1)
	h.clock.Step(vsphere.CapacityMaxAge)
	h.converge(pool.Name, "two", 40)
	if st := h.vm("big-2"); st.PowerState != "poweredOn" {
		t.Errorf("big-2 %s once vCenter agrees, want poweredOn", st.PowerState)
	}
}
