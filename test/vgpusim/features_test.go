package vgpusim_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/test/vgpusim"
)

func hostObj(t *testing.T, c *govmomi.Client, name string) *object.HostSystem {
	t.Helper()
	f := find.NewFinder(c.Client, true)
	dc, err := f.Datacenter(context.Background(), "dc1")
	if err != nil {
		t.Fatal(err)
	}
	f.SetDatacenter(dc)
	h, err := f.HostSystem(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func hostMo(t *testing.T, c *govmomi.Client, h *object.HostSystem) mo.HostSystem {
	t.Helper()
	var o mo.HostSystem
	if err := c.RetrieveOne(context.Background(), h.Reference(), []string{"config.graphicsInfo", "config.graphicsConfig", "runtime", "recentTask"}, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// powerOn starts PowerOnVM_Task, with a host argument when host is not nil, and returns
// the finished task's info.
func powerOn(t *testing.T, c *govmomi.Client, vm *object.VirtualMachine, host *object.HostSystem) types.TaskInfo {
	t.Helper()
	req := types.PowerOnVM_Task{This: vm.Reference()}
	if host != nil {
		ref := host.Reference()
		req.Host = &ref
	}
	res, err := methods.PowerOnVM_Task(context.Background(), c.Client, &req)
	if err != nil {
		t.Fatal(err)
	}
	return taskResult(t, c, object.NewTask(c.Client, res.Returnval))
}

func wantFault(t *testing.T, info types.TaskInfo, fault, text string) {
	t.Helper()
	if info.State != types.TaskInfoStateError {
		t.Fatalf("task %s succeeded, want %s", info.DescriptionId, fault)
	}
	got := reflect.TypeOf(info.Error.Fault).Elem().Name()
	if got != fault || !strings.Contains(info.Error.LocalizedMessage, text) {
		t.Fatalf("fault %s %q, want %s containing %q", got, info.Error.LocalizedMessage, fault, text)
	}
}

func TestVGPUModeIsPublished(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	h := hostMo(t, c, hostObj(t, c, "esx-a"))
	modes := map[string]string{}
	for _, g := range h.Config.GraphicsInfo {
		modes[g.PciId] = g.VgpuMode
	}
	if modes["0000:3b:00.0"] != "mixedSize" || modes["0000:5e:00.0"] != "sameSize" {
		t.Fatalf("graphicsInfo vgpuMode %v", modes)
	}
	for _, d := range h.Config.GraphicsConfig.DeviceType {
		if d.VgpuMode != modes[d.DeviceId] {
			t.Fatalf("graphicsConfig.deviceType %s: vgpuMode %q, graphicsInfo says %q", d.DeviceId, d.VgpuMode, modes[d.DeviceId])
		}
	}
}

func TestMultiVGPUPowerOnIsAtomic(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	big := vmObj(t, sim, c, "big-1")

	// Two 48Q vGPUs need both GPUs empty: small-1 and mid-1 hold them, so neither is placed.
	wantFault(t, powerOn(t, c, big, nil), "InsufficientResourcesFault", "2 vGPUs")
	if got := sim.GPUs("esx-a"); len(got["0000:3b:00.0"]) != 1 || len(got["0000:5e:00.0"]) != 1 {
		t.Fatalf("a refused power-on left vGPUs behind: %v", got)
	}

	for _, name := range []string{"small-1", "mid-1"} {
		if _, err := vmObj(t, sim, c, name).PowerOff(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if info := powerOn(t, c, big, nil); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("power-on: %s", info.Error.LocalizedMessage)
	}
	st, _ := sim.VM("big-1")
	if st.VGPUs != 2 || !slices.Equal(st.GPUs, []string{"0000:3b:00.0", "0000:5e:00.0"}) {
		t.Fatalf("big-1: %+v", st)
	}
	h := hostMo(t, c, hostObj(t, c, "esx-a"))
	for _, g := range h.Config.GraphicsInfo {
		if len(g.Vm) != 1 || g.Vm[0] != big.Reference() {
			t.Fatalf("GPU %s lists %v, want big-1", g.PciId, g.Vm)
		}
	}
	if _, err := big.Suspend(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sim.GPUs("esx-a"); len(got["0000:3b:00.0"])+len(got["0000:5e:00.0"]) != 0 {
		t.Fatalf("suspend kept vGPUs: %v", got)
	}
}

func TestReconfigureRefusesAnotherSeries(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	big := vmObj(t, sim, c, "big-1")
	add := func(profile string) types.TaskInfo {
		spec := types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{&types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: vgpusim.NewVGPUDevice(profile, 2)}}}
		task, err := big.Reconfigure(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return taskResult(t, c, task)
	}
	wantFault(t, add("grid_a40-8c"), "InvalidDeviceSpec", "same board and series")
	if info := add("grid_a40-8q"); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("adding a vGPU of the same series: %s", info.Error.LocalizedMessage)
	}
	if st, _ := sim.VM("big-1"); st.VGPUs != 3 {
		t.Fatalf("big-1 has %d vGPUs, want 3", st.VGPUs)
	}
}

func TestUnavailableHostsRefusePowerOn(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	for _, tc := range []struct{ host, vm, fault, text, conn string }{
		{"esx-down", "down-1", "HostNotConnected", "notResponding", "notResponding"},
		{"esx-mm", "mm-1", "InvalidHostState", "maintenance mode", "connected"},
	} {
		h := hostMo(t, c, hostObj(t, c, tc.host))
		if string(h.Runtime.ConnectionState) != tc.conn || h.Runtime.InMaintenanceMode != (tc.host == "esx-mm") {
			t.Fatalf("%s: runtime %s, maintenance %v", tc.host, h.Runtime.ConnectionState, h.Runtime.InMaintenanceMode)
		}
		wantFault(t, powerOn(t, c, vmObj(t, sim, c, tc.vm), nil), tc.fault, tc.text)
	}
	// Back in service, the same power-on works.
	if err := sim.SetHostState("esx-down", false, "connected"); err != nil {
		t.Fatal(err)
	}
	if info := powerOn(t, c, vmObj(t, sim, c, "down-1"), nil); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("power-on after reconnect: %s", info.Error.LocalizedMessage)
	}
}

func TestMaintenanceModeWaitsForRunningVMs(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	ctx := context.Background()
	esxA := hostObj(t, c, "esx-a")
	enter, err := esxA.EnterMaintenanceMode(ctx, 0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// small-1 and mid-1 run: the task stays running, visible in the host's recentTask.
	if info := taskResult(t, c, enter); info.State != types.TaskInfoStateRunning {
		t.Fatalf("enter maintenance: %s while VMs run", info.State)
	}
	h := hostMo(t, c, esxA)
	if !slices.Contains(h.RecentTask, enter.Reference()) || h.Runtime.InMaintenanceMode {
		t.Fatalf("recentTask %v, inMaintenanceMode %v", h.RecentTask, h.Runtime.InMaintenanceMode)
	}
	wantFault(t, powerOn(t, c, vmObj(t, sim, c, "mover"), nil), "InvalidHostState", "entering maintenance mode")

	if _, err := vmObj(t, sim, c, "small-1").PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, enter); info.State != types.TaskInfoStateRunning {
		t.Fatalf("enter maintenance: %s while mid-1 runs", info.State)
	}
	if _, err := vmObj(t, sim, c, "mid-1").Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, enter); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("enter maintenance: %s after the last VM stopped", info.State)
	}
	if h := hostMo(t, c, esxA); !h.Runtime.InMaintenanceMode {
		t.Fatal("runtime.inMaintenanceMode is false after entering")
	}
	wantFault(t, powerOn(t, c, vmObj(t, sim, c, "mid-1"), nil), "InvalidHostState", "in maintenance mode")

	exit, err := esxA.ExitMaintenanceMode(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, exit); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("exit maintenance: %s", info.State)
	}
	if info := powerOn(t, c, vmObj(t, sim, c, "mid-1"), nil); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("resume after exit: %s", info.Error.LocalizedMessage)
	}
}

func TestPowerOnHonoursHostArgument(t *testing.T) {
	sim := startSim(t, "features.yaml")
	c := connect(t, sim)
	mover := vmObj(t, sim, c, "mover")

	wantFault(t, powerOn(t, c, mover, hostObj(t, c, "esx-down")), "InvalidArgument", "not in the compute resource")
	if err := sim.SetHostState("esx-b", true, ""); err != nil {
		t.Fatal(err)
	}
	wantFault(t, powerOn(t, c, mover, hostObj(t, c, "esx-b")), "InvalidHostState", "maintenance mode")
	if err := sim.SetHostState("esx-b", false, ""); err != nil {
		t.Fatal(err)
	}

	esxB := hostObj(t, c, "esx-b")
	if info := powerOn(t, c, mover, esxB); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("power-on on esx-b: %s", info.Error.LocalizedMessage)
	}
	st, _ := sim.VM("mover")
	if st.Host != "esx-b" || st.GPU != "0000:3b:00.0" || len(sim.GPUs("esx-b")["0000:3b:00.0"]) != 1 {
		t.Fatalf("mover: %+v, esx-b GPUs %v", st, sim.GPUs("esx-b"))
	}
	var o mo.VirtualMachine
	if err := c.RetrieveOne(context.Background(), mover.Reference(), []string{"runtime.host"}, &o); err != nil {
		t.Fatal(err)
	}
	if *o.Runtime.Host != esxB.Reference() {
		t.Fatalf("runtime.host %v, want esx-b", o.Runtime.Host)
	}
	if h := hostMo(t, c, esxB); len(h.Config.GraphicsInfo[0].Vm) != 1 || h.Config.GraphicsInfo[0].Vm[0] != mover.Reference() {
		t.Fatalf("esx-b GPU lists %v", h.Config.GraphicsInfo[0].Vm)
	}
}
