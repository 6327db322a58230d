package vgpusim_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/test/vgpusim"
)

func startSim(t *testing.T, file string) *vgpusim.Sim {
	t.Helper()
	inv, err := vgpusim.LoadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return vgpusim.StartInventoryT(t, inv, vgpusim.Options{})
}

func connect(t *testing.T, sim *vgpusim.Sim) *govmomi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	u := *sim.URL
	u.User = url.UserPassword(sim.Username, sim.Password)
	c, err := govmomi.NewClient(ctx, &u, true)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func vmObj(t *testing.T, sim *vgpusim.Sim, c *govmomi.Client, name string) *object.VirtualMachine {
	t.Helper()
	ref, ok := sim.VMRef(name)
	if !ok {
		t.Fatalf("no VM %s", name)
	}
	return object.NewVirtualMachine(c.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: ref})
}

// taskResult reads a task once: the simulator completes tasks before the call returns.
func taskResult(t *testing.T, c *govmomi.Client, tk *object.Task) types.TaskInfo {
	t.Helper()
	var o mo.Task
	if err := c.RetrieveOne(context.Background(), tk.Reference(), []string{"info"}, &o); err != nil {
		t.Fatal(err)
	}
	return o.Info
}

func wantState(t *testing.T, sim *vgpusim.Sim, name, power, gpu string) {
	t.Helper()
	st, _ := sim.VM(name)
	if st.PowerState != power || st.GPU != gpu {
		t.Fatalf("%s: got %s on GPU %q, want %s on GPU %q", name, st.PowerState, st.GPU, power, gpu)
	}
}

func TestStartPlacesPoweredOnVMs(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	got := sim.GPUs("esx-01")["0000:3b:00.0"]
	if strings.Join(got, ",") != "gpu-day-1,gpu-day-2,gpu-day-3,gpu-day-4" {
		t.Fatalf("GPU runs %v", got)
	}
	wantState(t, sim, "gpu-night-1", "poweredOff", "")

	c := connect(t, sim)
	hosts, err := viewHosts(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].Name != "esx-01" {
		t.Fatalf("hosts %+v", hosts)
	}
	cfg := hosts[0].Config
	if len(cfg.SharedPassthruGpuTypes) != 5 || cfg.GraphicsConfig.SharedPassthruAssignmentPolicy != "performance" ||
		len(cfg.SharedGpuCapabilities) != 5 || !cfg.SharedGpuCapabilities[0].SuspendSupported {
		t.Fatalf("host vGPU config %+v", cfg)
	}
	if len(cfg.GraphicsInfo) != 1 || len(cfg.GraphicsInfo[0].Vm) != 4 || cfg.GraphicsInfo[0].MemorySizeInKB != 16*1024*1024 {
		t.Fatalf("graphicsInfo %+v", cfg.GraphicsInfo)
	}
}

func viewHosts(c *govmomi.Client) ([]mo.HostSystem, error) {
	ctx := context.Background()
	cv, err := view.NewManager(c.Client).CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"HostSystem"}, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cv.Destroy(ctx) }()
	var hosts []mo.HostSystem
	err = cv.Retrieve(ctx, []string{"HostSystem"}, []string{"name", "parent", "config"}, &hosts)
	return hosts, err
}

func TestPowerOnRefusedBySameSizeRule(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx := context.Background()

	tk, err := vmObj(t, sim, c, "gpu-night-1").PowerOn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := taskResult(t, c, tk)
	if info.State != types.TaskInfoStateError {
		t.Fatalf("power-on of the 16Q VM next to 4Q VMs: state %s", info.State)
	}
	if _, ok := info.Error.Fault.(*types.InsufficientResourcesFault); !ok {
		t.Fatalf("fault %T", info.Error.Fault)
	}
	if !strings.Contains(info.Error.LocalizedMessage, "same-size rule") {
		t.Fatalf("message %q does not name the rule", info.Error.LocalizedMessage)
	}
	wantState(t, sim, "gpu-night-1", "poweredOff", "")
	// Calls are counted per VM as well: one power-on of night-1, none of the others.
	ref := vmObj(t, sim, c, "gpu-night-1").Reference().Value
	for vm, calls := range sim.VMCallCounts() {
		if want := map[bool]int{true: 1}[vm == ref]; calls["PowerOnVM_Task"] != want {
			t.Errorf("VM %s: %d PowerOnVM_Task calls counted, want %d", vm, calls["PowerOnVM_Task"], want)
		}
	}
	if sim.VMCallCounts()[ref]["PowerOnVM_Task"] != 1 {
		t.Errorf("per-VM counts %v lack night-1's power-on", sim.VMCallCounts())
	}
}

func TestPowerOnRefusedByFrameBuffer(t *testing.T) {
	sim := vgpusim.StartT(t, `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryMiB: 16384, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-8q}]
vms:
- {name: a, host: h1, profile: grid_p100-8q, powerState: poweredOn}
- {name: b, host: h1, profile: grid_p100-8q, powerState: poweredOn}
- {name: c, host: h1, profile: grid_p100-8q}
`)
	c := connect(t, sim)
	tk, err := vmObj(t, sim, c, "c").PowerOn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	info := taskResult(t, c, tk)
	if info.State != types.TaskInfoStateError || !strings.Contains(info.Error.LocalizedMessage, "frame-buffer rule") {
		t.Fatalf("got %s %+v", info.State, info.Error)
	}
}

func TestStartRefusesImpossibleInventory(t *testing.T) {
	inv, err := vgpusim.Load([]byte(`
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q}, {name: grid_p100-16q}]
vms:
- {name: a, host: h1, profile: grid_p100-4q, powerState: poweredOn}
- {name: b, host: h1, profile: grid_p100-16q, powerState: poweredOn}
`))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := vgpusim.Start(inv, vgpusim.Options{})
	if err == nil {
		sim.Close()
		t.Fatal("started an inventory whose VMs cannot all run")
	}
	if !strings.Contains(err.Error(), "power on VM b") {
		t.Fatalf("error %v", err)
	}
}

func TestLoadRejectsBadInventory(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":       "hosts: [{name: h, gpu: []}]",
		"no hosts":            "vms: []",
		"unknown host":        "hosts: [{name: h}]\nvms: [{name: v, host: x}]",
		"profile offered":     "hosts: [{name: h}]\nvms: [{name: v, host: h, profile: grid_p100-4q}]",
		"gpu memory":          `hosts: [{name: h, gpus: [{model: P100, pciId: "0000:3b:00.0"}]}]`,
		"policy":              "hosts: [{name: h, policy: fastest}]",
		"power state":         "hosts: [{name: h}]\nvms: [{name: v, host: h, powerState: on}]",
		"host vgpuMode":       "hosts: [{name: h, vgpuMode: mixed}]",
		"gpu vgpuMode":        `hosts: [{name: h, gpus: [{memoryGiB: 16, pciId: "0000:3b:00.0", vgpuMode: mig}]}]`,
		"connection":          "hosts: [{name: h, connectionState: down}]",
		"vgpus, no vGPU":      "hosts: [{name: h}]\nvms: [{name: v, host: h, vgpus: 2}]",
		"negative vgpus":      "hosts: [{name: h, profiles: [{name: grid_p100-4q}]}]\nvms: [{name: v, host: h, profile: grid_p100-4q, vgpus: -1}]",
		"runs in maintenance": "hosts: [{name: h, inMaintenanceMode: true}]\nvms: [{name: v, host: h, powerState: poweredOn}]",
	} {
		if _, err := vgpusim.Load([]byte(doc)); err == nil {
			t.Errorf("%s: accepted %q", name, doc)
		}
	}
	// The defaults of the new fields.
	inv, err := vgpusim.Load([]byte(`hosts: [{name: h, gpus: [{memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-4q}]}]
vms: [{name: v, host: h, profile: grid_p100-4q}]`))
	if err != nil {
		t.Fatal(err)
	}
	h := inv.Hosts[0]
	if h.VGPUMode != "sameSize" || h.GPUs[0].VGPUMode != "sameSize" || h.ConnectionState != "connected" || inv.VMs[0].VGPUs != 1 {
		t.Fatalf("defaults: host %+v, VM %+v", h, inv.VMs[0])
	}
}

func TestSuspendReleasesAndResumeNeedsSlot(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx := context.Background()

	// Park the day VMs: suspend releases their vGPUs.
	for _, name := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"} {
		tk, err := vmObj(t, sim, c, name).Suspend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info := taskResult(t, c, tk); info.State != types.TaskInfoStateSuccess {
			t.Fatalf("suspend %s: %+v", name, info.Error)
		}
		wantState(t, sim, name, "suspended", "")
	}
	// The night VM now has the GPU to itself.
	tk, err := vmObj(t, sim, c, "gpu-night-1").PowerOn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("power on night VM: %+v", info.Error)
	}
	wantState(t, sim, "gpu-night-1", "poweredOn", "0000:3b:00.0")
	// Resuming a day VM needs a slot, which the 16Q VM holds.
	tk, err = vmObj(t, sim, c, "gpu-day-1").PowerOn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateError {
		t.Fatal("resumed a 4Q VM onto a GPU running a 16Q vGPU")
	}
	wantState(t, sim, "gpu-day-1", "suspended", "")
}

func TestReconfigureVGPUOnlyWhenPoweredOff(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx := context.Background()
	vm := vmObj(t, sim, c, "gpu-day-1")

	change := func() types.VirtualMachineConfigSpec {
		devices, err := vm.Device(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var spec types.VirtualMachineConfigSpec
		for _, d := range devices {
			if _, ok := d.(*types.VirtualPCIPassthrough); ok {
				spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
					Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d})
			}
		}
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: vgpusim.NewVGPUDevice("grid_p100-8q", 0)})
		return spec
	}
	reconfigure := func() types.TaskInfo {
		tk, err := vm.Reconfigure(ctx, change())
		if err != nil {
			t.Fatal(err)
		}
		return taskResult(t, c, tk)
	}

	for _, suspend := range []bool{false, true} {
		if suspend {
			tk, _ := vm.Suspend(ctx)
			taskResult(t, c, tk)
		}
		info := reconfigure()
		if _, ok := info.Error.Fault.(*types.InvalidPowerState); !ok {
			t.Fatalf("reconfigure while %v: %+v", suspend, info)
		}
	}
	tk, _ := vm.PowerOff(ctx)
	taskResult(t, c, tk)
	if info := reconfigure(); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("reconfigure while off: %+v", info.Error)
	}
	if st, _ := sim.VM("gpu-day-1"); st.Profile != "grid_p100-8q" {
		t.Fatalf("profile %q", st.Profile)
	}
}

func TestFaultsAndHeldTasks(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx := context.Background()
	vm := vmObj(t, sim, c, "gpu-day-1")

	sim.FailTasks("PowerOffVM_Task", 1, nil)
	tk, _ := vm.PowerOff(ctx)
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateError {
		t.Fatal("injected failure did not fail the task")
	}
	wantState(t, sim, "gpu-day-1", "poweredOn", "0000:3b:00.0")

	sim.HoldTasks()
	tk, _ = vm.PowerOff(ctx)
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateRunning {
		t.Fatalf("held task is %s", info.State)
	}
	if n := sim.ReleaseTasks(); n != 1 {
		t.Fatalf("released %d tasks", n)
	}
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateSuccess {
		t.Fatalf("released task: %+v", info.Error)
	}
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, sim, "gpu-day-1", "poweredOff", "")

	sim.ExpireSessions()
	_, err := vm.PowerState(ctx)
	if err == nil || !isNotAuthenticated(err) {
		t.Fatalf("expired session: %v", err)
	}
	if err := c.Login(ctx, url.UserPassword(sim.Username, sim.Password)); err != nil {
		t.Fatalf("login after expiry: %v", err)
	}
	if _, err := vm.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
}

func isNotAuthenticated(err error) bool {
	if !soap.IsSoapFault(err) {
		return false
	}
	_, ok := soap.ToSoapFault(err).VimFault().(types.NotAuthenticated)
	return ok
}

func TestTaskDelay(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vm := vmObj(t, sim, c, "gpu-day-1")

	sim.SetTaskDelay("PowerOffVM_Task", 50*time.Millisecond)
	tk, err := vm.PowerOff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info := taskResult(t, c, tk); info.State != types.TaskInfoStateRunning {
		t.Fatalf("delayed task is %s", info.State)
	}
	wantState(t, sim, "gpu-day-1", "poweredOn", "0000:3b:00.0")
	// Task.Wait follows the task through the property collector: no polling.
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, sim, "gpu-day-1", "poweredOff", "")

	sim.SetTaskDelay("ShutdownGuest", 50*time.Millisecond)
	vm2 := vmObj(t, sim, c, "gpu-day-2")
	if err := vm2.ShutdownGuest(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, sim, "gpu-day-2", "poweredOn", "0000:3b:00.0")
	if err := vm2.WaitForPowerState(ctx, types.VirtualMachinePowerStatePoweredOff); err != nil {
		t.Fatal(err)
	}
	wantState(t, sim, "gpu-day-2", "poweredOff", "")
}

func TestQueryConfigTargetListsProfiles(t *testing.T) {
	sim := startSim(t, "twohost.yaml")
	c := connect(t, sim)
	ctx := context.Background()
	hosts, err := viewHosts(c)
	if err != nil {
		t.Fatal(err)
	}
	var cr mo.ComputeResource
	if err := c.RetrieveOne(ctx, *hosts[0].Parent, []string{"environmentBrowser"}, &cr); err != nil {
		t.Fatal(err)
	}
	target, err := object.NewEnvironmentBrowser(c.Client, *cr.EnvironmentBrowser).
		QueryConfigTarget(ctx, object.NewHostSystem(c.Client, hosts[0].Self))
	if err != nil {
		t.Fatal(err)
	}
	fbs := map[string]int64{}
	for _, p := range target.VgpuProfileInfo {
		fbs[p.ProfileName] = p.FbSizeInGib
	}
	if len(fbs) != 5 || fbs["grid_p100-16q"] != 16 || fbs["grid_p100-1q"] != 1 {
		t.Fatalf("vgpuProfileInfo %v", fbs)
	}
}
