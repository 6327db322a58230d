package vsphere_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/vsphere"
)

// selectWorld has VMs in folders (vgpusim refuses two VMs of one name, so the listing of
// such a pair by path is not tested here).
const selectWorld = `
datacenter: dc1
hosts:
  - name: esx-01
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4}
vms:
  - {name: gpu-day-1, host: esx-01, profile: grid_p100-4q, folder: gpu/day}
  - {name: gpu-day-2, host: esx-01, profile: grid_p100-4q, folder: gpu/day/b}
  - {name: gpu-day-3, host: esx-01, profile: grid_p100-4q}
  - {name: gpu-night-1, host: esx-01, profile: grid_p100-4q, folder: gpu/night}
  - {name: twin, host: esx-01, profile: grid_p100-4q, folder: gpu/day}
  - {name: gpu-daylight, host: esx-01, profile: grid_p100-4q, folder: gpu/daylight}
`

// TestSelectVMs (issue 38, select): the datacenter's VMs by name pattern, by folder
// (relative to the vm folder or as an inventory path, subfolders included, a folder
// whose name only starts like it not), by both.
func TestSelectVMs(t *testing.T) {
	e := newEnv(t, selectWorld)
	for _, tc := range []struct {
		sel  vsphere.VMSelector
		want string
	}{
		{vsphere.VMSelector{NamePattern: "gpu-day-*"}, "gpu-day-1 gpu-day-2 gpu-day-3"},
		{vsphere.VMSelector{Folder: "gpu/day"}, "gpu-day-1 gpu-day-2 twin"},
		{vsphere.VMSelector{Folder: "/dc1/vm/gpu/day/"}, "gpu-day-1 gpu-day-2 twin"},
		{vsphere.VMSelector{Folder: "gpu", NamePattern: "gpu-*-1"}, "gpu-day-1 gpu-night-1"},
		{vsphere.VMSelector{NamePattern: "nothing-*"}, ""},
	} {
		got, err := e.c.SelectVMs(e.ctx, tc.sel)
		if err != nil {
			t.Fatalf("%+v: %v", tc.sel, err)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%+v selects %q, want %q", tc.sel, strings.Join(got, " "), tc.want)
		}
		if !slices.IsSorted(got) {
			t.Errorf("%+v: %v not sorted", tc.sel, got)
		}
	}
	if got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Folder: "gpu/missing"}); err == nil || !strings.Contains(err.Error(), "/dc1/vm/gpu/missing not found") {
		t.Errorf("a folder that does not exist selects %v (error %v), want an error naming it: a renamed folder must not release every node", got, err)
	}
	if _, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{NamePattern: "gpu-[day"}); err == nil {
		t.Error("a malformed glob selected VMs, want an error")
	}
	// A vCenter that cannot be read is an error, never no VMs.
	e.sim.RefuseConnections()
	t.Cleanup(func() { _ = e.sim.AcceptConnections() })
	if got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{NamePattern: "gpu-day-*"}); err == nil {
		t.Errorf("selected %v from a vCenter that refuses connections, want an error", got)
	}
}
