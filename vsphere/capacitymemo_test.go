package vsphere

import (
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// TestCapacityMemo: an answer is reused only for the same fingerprint, while younger
// than the max age and not from the clock's future; a failed query forgets it; a
// timeout holds every query back until the back-off ends, saying until when.
func TestCapacityMemo(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	host := types.ManagedObjectReference{Type: "HostSystem", Value: "host-1"}
	read := inventory.VCenterCapacity{State: inventory.CapacityRead, Profiles: map[string]inventory.ProfileCapacity{"p": {Remaining: 1}}}
	fp, other := [32]byte{1}, [32]byte{2}
	var m capacityMemo
	m.remember(host, fp, t0, read)
	for _, tc := range []struct {
		name string
		fp   [32]byte
		now  time.Time
		want bool
	}{
		{"same, fresh", fp, t0.Add(time.Minute), true},
		{"changed", other, t0.Add(time.Minute), false},
		{"same, too old", fp, t0.Add(CapacityMaxAge), false},
		{"same, clock set back", fp, t0.Add(-time.Second), false},
	} {
		if _, got := m.reuse(host, tc.fp, tc.now, CapacityMaxAge); got != tc.want {
			t.Errorf("%s: reused %v, want %v", tc.name, got, tc.want)
		}
	}
	m.remember(host, fp, t0, inventory.VCenterCapacity{State: inventory.CapacityFailed})
	if _, ok := m.reuse(host, fp, t0, CapacityMaxAge); ok {
		t.Error("a failed query left the last answer to be reused")
	}

	if why := m.backingOff(t0); why != "" {
		t.Errorf("backing off before any timeout: %s", why)
	}
	m.timedOut("esx-01", 10*time.Second, CapacityQueryBackoff, t0)
	if why := m.backingOff(t0.Add(CapacityQueryBackoff - time.Nanosecond)); why != "not asked: vCenter's DirectPathProfileManager.QueryCapacity for host esx-01 did not answer within 10s at 2026-12-03T07:00:00Z; no host is asked before 2026-12-03T07:05:00Z" {
		t.Errorf("during the back-off: %q", why)
	}
	if why := m.backingOff(t0.Add(CapacityQueryBackoff)); why != "" {
		t.Errorf("after the back-off: %q", why)
	}
}

// TestCapacityFingerprint: the VMs' order does not matter; a VM's power state or recent
// tasks, a VM leaving the host, and the VMs on the host's GPUs do.
func TestCapacityFingerprint(t *testing.T) {
	vm := func(id string, state types.VirtualMachinePowerState, tasks ...string) *mo.VirtualMachine {
		v := &mo.VirtualMachine{Runtime: types.VirtualMachineRuntimeInfo{PowerState: state}}
		v.Self = types.ManagedObjectReference{Type: "VirtualMachine", Value: id}
		for _, task := range tasks {
			v.RecentTask = append(v.RecentTask, types.ManagedObjectReference{Type: "Task", Value: task})
		}
		return v
	}
	h := inventory.Host{Ref: "host-1", GPUs: []inventory.GPU{{PCIID: "0000:3b:00.0", VMs: []string{"a"}}}}
	self := mo.HostSystem{}
	a, b := vm("vm-1", "poweredOn"), vm("vm-2", "poweredOff")
	base := capacityFingerprint(h, self, []*mo.VirtualMachine{a, b})
	if got := capacityFingerprint(h, self, []*mo.VirtualMachine{b, a}); got != base {
		t.Error("the VMs' order changed the fingerprint")
	}
	moved := h
	moved.GPUs = []inventory.GPU{{PCIID: "0000:3b:00.0"}}
	for name, got := range map[string][32]byte{
		"power state": capacityFingerprint(h, self, []*mo.VirtualMachine{a, vm("vm-2", "poweredOn")}),
		"a new task":  capacityFingerprint(h, self, []*mo.VirtualMachine{a, vm("vm-2", "poweredOff", "task-9")}),
		"a VM left":   capacityFingerprint(h, self, []*mo.VirtualMachine{a}),
		"GPU's VMs":   capacityFingerprint(moved, self, []*mo.VirtualMachine{a, b}),
	} {
		if got == base {
			t.Errorf("%s: fingerprint unchanged", name)
		}
	}
}
