package vsphere_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// env is a simulator with a connector pointed at it.
type env struct {
	t    testing.TB
	sim  *vgpusim.Sim
	conn *vsphere.SessionCache
	c    vsphere.Client
	ctx  context.Context
}

func newEnv(t testing.TB, yamlOrFile string, opts ...vsphere.Option) *env {
	t.Helper()
	var (
		inv *vgpusim.Inventory
		err error
	)
	if strings.HasSuffix(yamlOrFile, ".yaml") {
		inv, err = vgpusim.LoadFile("../test/vgpusim/testdata/" + yamlOrFile)
	} else {
		inv, err = vgpusim.Load([]byte(yamlOrFile))
	}
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, vgpusim.Options{})
	// A test's calls end within 30 s; a benchmark's run as many times as -benchtime asks
	// (40 reads of the 64-host inventory take half a minute).
	timeout := 30 * time.Second
	if _, bench := t.(*testing.B); bench {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	conn := vsphere.NewConnector(opts...)
	t.Cleanup(func() { _ = conn.Close() })
	e := &env{t: t, sim: sim, conn: conn, ctx: ctx}
	e.c, err = conn.Connect(ctx, e.config())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) config() vsphere.Config {
	return vsphere.Config{
		Server:     e.sim.URL.Host,
		Datacenter: e.sim.Datacenter(),
		Username:   e.sim.Username,
		Password:   e.sim.Password,
		Thumbprint: e.sim.ThumbprintSHA256(),
	}
}

func (e *env) ref(name string) string {
	e.t.Helper()
	ref, ok := e.sim.VMRef(name)
	if !ok {
		e.t.Fatalf("no VM %s", name)
	}
	return ref
}

// do runs an operation and returns its task's final state. The simulator completes tasks
// before the call returns, so one read is enough.
func (e *env) do(op func(context.Context, string) (string, error), vm string) vsphere.TaskInfo {
	e.t.Helper()
	id, err := op(e.ctx, e.ref(vm))
	if err != nil {
		e.t.Fatalf("%s: %v", vm, err)
	}
	if id == "" {
		e.t.Fatalf("%s: no task started", vm)
	}
	info, err := e.c.Task(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

func (e *env) want(vm, power, gpu string) {
	e.t.Helper()
	st, _ := e.sim.VM(vm)
	if st.PowerState != power || st.GPU != gpu {
		e.t.Fatalf("%s is %s on GPU %q, want %s on GPU %q", vm, st.PowerState, st.GPU, power, gpu)
	}
}

func TestInventoryDayNight(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Hosts) != 1 {
		t.Fatalf("hosts %+v", inv.Hosts)
	}
	h := inv.Hosts[0]
	if h.Name != "esx-01" || h.Policy != inventory.PolicyPerformance || !strings.HasPrefix(h.Ref, "host-") {
		t.Fatalf("host %+v", h)
	}
	if len(h.GPUs) != 1 || h.GPUs[0].PCIID != "0000:3b:00.0" || h.GPUs[0].MemoryMiB != 16384 || h.GPUs[0].Device != "Tesla P100" ||
		h.GPUs[0].DeviceID != 0x15f8 { // hardware.pciDevice: GP100GL [Tesla P100 PCIe 16GB]
		t.Fatalf("GPUs %+v", h.GPUs)
	}
	if got := strings.Join(h.GPUs[0].VMs, ","); got != "gpu-day-1,gpu-day-2,gpu-day-3,gpu-day-4" {
		t.Fatalf("GPU runs %s", got)
	}
	if len(h.Profiles) != 5 {
		t.Fatalf("profiles %+v", h.Profiles)
	}
	p16, ok := h.Profile("grid_p100-16q")
	if !ok || p16.FrameBufferMiB != 16384 || !p16.SuspendSupported {
		t.Fatalf("16q profile %+v", p16)
	}

	if len(inv.VMs) != 5 {
		t.Fatalf("VMs %+v", inv.VMs)
	}
	day, _ := inv.FindVM("gpu-day-1")
	if day.Path != "/dc1/vm/gpu-day-1" || day.Host != "esx-01" || day.PowerState != inventory.PoweredOn ||
		day.Profile != "grid_p100-4q" || day.GPU != "0000:3b:00.0" || day.Ref != e.ref("gpu-day-1") || len(day.UUID) != 36 {
		t.Fatalf("day VM %+v", day)
	}
	night, _ := inv.FindVM("gpu-night-1")
	if night.PowerState != inventory.PoweredOff || night.GPU != "" || night.Profile != "grid_p100-16q" {
		t.Fatalf("night VM %+v", night)
	}
	// A VM's vGPU count and GPUs, the host's availability and compute resource.
	if day.VGPUs != 1 || len(day.GPUs) != 1 || day.GPUs[0] != day.GPU || night.VGPUs != 1 || len(night.GPUs) != 0 {
		t.Fatalf("vGPUs: day %d on %v, night %d on %v", day.VGPUs, day.GPUs, night.VGPUs, night.GPUs)
	}
	if h.ConnectionState != inventory.Connected || h.InMaintenance || h.EnteringMaintenance || h.Unavailable() != "" || h.ComputeResource == "" {
		t.Fatalf("host availability %+v", h)
	}
}

// TestInventoryHostInMaintenance: a host that enters maintenance mode through vCenter's
// own EnterMaintenanceMode_Task reads as in maintenance mode.
func TestInventoryHostInMaintenance(t *testing.T) {
	e := newEnv(t, `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q}]
vms:
- {name: a, host: h1, profile: grid_p100-4q, powerState: poweredOff}
`)
	u := *e.sim.URL
	u.User = url.UserPassword(e.sim.Username, e.sim.Password)
	c, err := govmomi.NewClient(e.ctx, &u, true)
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := find.NewFinder(c.Client).HostSystemList(e.ctx, "/"+e.sim.Datacenter()+"/host/*/*")
	if err != nil || len(hosts) != 1 {
		t.Fatalf("hosts %v: %v", hosts, err)
	}
	task, err := hosts[0].EnterMaintenanceMode(e.ctx, 0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := inv.Hosts[0]; !h.InMaintenance || h.Unavailable() != "is in maintenance mode" {
		t.Fatalf("host %+v, want in maintenance mode", h)
	}
}

func TestInventoryTwoHostsFoldersAndSuspended(t *testing.T) {
	e := newEnv(t, "twohost.yaml")
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, ok := inv.FindHost("esx-02")
	if !ok || h2.Policy != inventory.PolicyConsolidation || len(h2.GPUs) != 2 {
		t.Fatalf("esx-02 %+v", h2)
	}
	// Consolidation fills the first GPU; performance (esx-01) spreads.
	if len(h2.GPUs[0].VMs) != 2 || len(h2.GPUs[1].VMs) != 0 {
		t.Fatalf("consolidation placed %+v", h2.GPUs)
	}
	h1, _ := inv.FindHost("esx-01")
	if len(h1.GPUs[0].VMs) != 1 || len(h1.GPUs[1].VMs) != 1 {
		t.Fatalf("performance placed %+v", h1.GPUs)
	}
	vm, _ := inv.FindVM("/dc1/vm/gpu/night/gpu-parked-1")
	if vm == nil || vm.PowerState != inventory.Suspended || vm.GPU != "" || vm.Host != "esx-02" {
		t.Fatalf("parked VM %+v", vm)
	}
}

func TestInventoryIsOneRoundTrip(t *testing.T) {
	// The profile's frame buffer (3 GiB) disagrees with its name (4 GiB) on purpose:
	// the answer must come from the host's config target.
	e := newEnv(t, `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q, frameBufferGiB: 3}]
- name: h2
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-4q, frameBufferGiB: 3}]
vms:
- {name: a, host: h1, profile: grid_p100-4q, powerState: poweredOn}
`)
	e.sim.ResetCalls()
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := inv.Hosts[0].Profile("grid_p100-4q"); p.FrameBufferMiB != 3*1024 {
		t.Fatalf("frame buffer %d MiB, want the config target's 3072", p.FrameBufferMiB)
	}
	if n := e.sim.Calls("RetrievePropertiesEx") + e.sim.Calls("RetrieveProperties"); n != 1 {
		t.Fatalf("first inventory: %d property reads, want 1", n)
	}
	if n := e.sim.Calls("QueryConfigTarget"); n != 2 {
		t.Fatalf("first inventory: %d config target queries, want one per host", n)
	}

	e.sim.ResetCalls()
	if _, err := e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("RetrievePropertiesEx") + e.sim.Calls("RetrieveProperties"); n != 1 {
		t.Fatalf("second inventory: %d property reads, want 1", n)
	}
	if n := e.sim.Calls("QueryConfigTarget"); n != 0 {
		t.Fatalf("second inventory: %d config target queries, want 0 (cached)", n)
	}
}

func TestPowerOperations(t *testing.T) {
	e := newEnv(t, "daynight.yaml")

	if info := e.do(e.c.PowerOff, "gpu-day-1"); info.State != vsphere.TaskSuccess {
		t.Fatalf("power off: %+v", info)
	}
	e.want("gpu-day-1", "poweredOff", "")
	if id, err := e.c.PowerOff(e.ctx, e.ref("gpu-day-1")); id != "" || err != nil {
		t.Fatalf("power off again: %q, %v", id, err)
	}

	if info := e.do(e.c.Suspend, "gpu-day-2"); info.State != vsphere.TaskSuccess {
		t.Fatalf("suspend: %+v", info)
	}
	e.want("gpu-day-2", "suspended", "")
	if id, err := e.c.Suspend(e.ctx, e.ref("gpu-day-2")); id != "" || err != nil {
		t.Fatalf("suspend again: %q, %v", id, err)
	}
	if _, err := e.c.Suspend(e.ctx, e.ref("gpu-day-1")); !errors.Is(err, vsphere.ErrInvalidPowerState) {
		t.Fatalf("suspend a powered-off VM: %v", err)
	}

	// PowerOn resumes a suspended VM and places its vGPU again.
	if info := e.do(e.powerOn, "gpu-day-2"); info.State != vsphere.TaskSuccess {
		t.Fatalf("resume: %+v", info)
	}
	e.want("gpu-day-2", "poweredOn", "0000:3b:00.0")
	if id, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-2"), ""); id != "" || err != nil {
		t.Fatalf("power on again: %q, %v", id, err)
	}

	// Powering off a suspended VM discards its state.
	e.do(e.c.Suspend, "gpu-day-3")
	if info := e.do(e.c.PowerOff, "gpu-day-3"); info.State != vsphere.TaskSuccess {
		t.Fatalf("power off suspended: %+v", info)
	}
	e.want("gpu-day-3", "poweredOff", "")

	if err := e.c.ShutdownGuest(e.ctx, e.ref("gpu-day-4")); err != nil {
		t.Fatal(err)
	}
	e.want("gpu-day-4", "poweredOff", "")
	if err := e.c.ShutdownGuest(e.ctx, e.ref("gpu-day-4")); err != nil {
		t.Fatalf("shut down a powered-off VM: %v", err)
	}

	if _, err := e.c.PowerOn(e.ctx, "vm-does-not-exist", ""); !errors.Is(err, vsphere.ErrVMNotFound) {
		t.Fatalf("unknown VM: %v", err)
	}
}

func TestSetProfile(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	day := e.ref("gpu-day-1")

	if _, err := e.c.SetProfile(e.ctx, day, "grid_p100-8q", 1); !errors.Is(err, vsphere.ErrNotPoweredOff) {
		t.Fatalf("set profile of a running VM: %v", err)
	}
	e.do(e.c.Suspend, "gpu-day-1")
	if _, err := e.c.SetProfile(e.ctx, day, "grid_p100-8q", 1); !errors.Is(err, vsphere.ErrNotPoweredOff) {
		t.Fatalf("set profile of a suspended VM: %v", err)
	}
	e.do(e.c.PowerOff, "gpu-day-1")

	id, err := e.c.SetProfile(e.ctx, day, "grid_p100-8q", 1)
	if err != nil || id == "" {
		t.Fatalf("set profile: %q, %v", id, err)
	}
	if info, err := e.c.Task(e.ctx, id); err != nil || info.State != vsphere.TaskSuccess {
		t.Fatalf("set profile task: %+v, %v", info, err)
	}
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if vm, _ := inv.FindVM("gpu-day-1"); vm.Profile != "grid_p100-8q" {
		t.Fatalf("profile is %q", vm.Profile)
	}
	if id, err := e.c.SetProfile(e.ctx, day, "grid_p100-8q", 1); id != "" || err != nil {
		t.Fatalf("set the same profile again: %q, %v", id, err)
	}

	// A profile the host does not offer is refused by the reconfiguration task.
	id, err = e.c.SetProfile(e.ctx, day, "grid_t4-16q", 1)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := e.c.Task(e.ctx, id); info.State != vsphere.TaskError || info.Fault != "InvalidDeviceSpec" {
		t.Fatalf("unsupported profile: %+v", info)
	}
}

func TestPlacementRules(t *testing.T) {
	e := newEnv(t, "daynight.yaml")

	// Mixed profiles: the 16Q VM cannot join the 4Q VMs on the GPU.
	info := e.do(e.powerOn, "gpu-night-1")
	if info.State != vsphere.TaskError || info.Fault != "InsufficientResourcesFault" || !strings.Contains(info.Error, "same-size rule") {
		t.Fatalf("mixed profiles: %+v", info)
	}

	// Park three day VMs: the GPU still runs a 4Q vGPU, so the 16Q VM still cannot start.
	for _, vm := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3"} {
		e.do(e.c.Suspend, vm)
	}
	if info := e.do(e.powerOn, "gpu-night-1"); info.State != vsphere.TaskError {
		t.Fatalf("16Q next to one 4Q: %+v", info)
	}
	e.do(e.c.Suspend, "gpu-day-4")
	if info := e.do(e.powerOn, "gpu-night-1"); info.State != vsphere.TaskSuccess {
		t.Fatalf("16Q on an empty GPU: %+v", info)
	}
	// Resuming a day VM needs a slot, which the 16Q VM now holds.
	info = e.do(e.powerOn, "gpu-day-1")
	if info.State != vsphere.TaskError || info.Fault != "InsufficientResourcesFault" {
		t.Fatalf("resume without a slot: %+v", info)
	}
	e.want("gpu-day-1", "suspended", "")
}

func TestFrameBufferRule(t *testing.T) {
	e := newEnv(t, `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
  profiles: [{name: grid_p100-8q}]
vms:
- {name: a, host: h1, profile: grid_p100-8q, powerState: poweredOn}
- {name: b, host: h1, profile: grid_p100-8q, powerState: poweredOn}
- {name: c, host: h1, profile: grid_p100-8q}
`)
	info := e.do(e.powerOn, "c")
	if info.State != vsphere.TaskError || info.Fault != "InsufficientResourcesFault" || !strings.Contains(info.Error, "frame-buffer rule") {
		t.Fatalf("third 8Q on a 16 GiB GPU: %+v", info)
	}
}

func TestFailingTaskSurfaces(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	e.do(e.c.PowerOff, "gpu-day-1")
	e.sim.FailTasks("PowerOnVM_Task", 2, &types.TaskInProgress{})
	for range 2 {
		if info := e.do(e.powerOn, "gpu-day-1"); info.State != vsphere.TaskError || info.Fault != "TaskInProgress" {
			t.Fatalf("injected failure: %+v", info)
		}
	}
	if info := e.do(e.powerOn, "gpu-day-1"); info.State != vsphere.TaskSuccess {
		t.Fatalf("after the injected failures: %+v", info)
	}
}

func TestRunningTaskAndInvalidPowerStateCountsAsSuccess(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	e.do(e.c.PowerOff, "gpu-day-1")

	e.sim.HoldTasks()
	first, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-1"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Still powered off while the first task runs, so a second power-on is started.
	second, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-1"), "")
	if err != nil || second == "" {
		t.Fatalf("second power-on: %q, %v", second, err)
	}
	if info, _ := e.c.Task(e.ctx, first); info.State != vsphere.TaskRunning {
		t.Fatalf("held task: %+v", info)
	}
	if n := e.sim.ReleaseTasks(); n != 2 {
		t.Fatalf("released %d tasks", n)
	}
	if info, _ := e.c.Task(e.ctx, first); info.State != vsphere.TaskSuccess {
		t.Fatalf("first task: %+v", info)
	}
	// The second failed with InvalidPowerState, but the VM is on: that is success.
	if info, _ := e.c.Task(e.ctx, second); info.State != vsphere.TaskSuccess {
		t.Fatalf("second task: %+v", info)
	}
	if _, err := e.c.Task(e.ctx, "task-999999"); !errors.Is(err, vsphere.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
}

func TestSessionIsCachedAndReestablished(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	if n := e.sim.Calls("Login"); n != 1 {
		t.Fatalf("%d logins", n)
	}
	c2, err := e.conn.Connect(e.ctx, e.config())
	if err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("Login"); n != 1 {
		t.Fatalf("second Connect logged in again (%d logins)", n)
	}

	e.sim.ExpireSessions()
	if _, err := c2.Inventory(e.ctx); err != nil {
		t.Fatalf("inventory after session expiry: %v", err)
	}
	if n := e.sim.Calls("Login"); n != 2 {
		t.Fatalf("%d logins after expiry, want 2", n)
	}
	// Both clients share the re-established session.
	if _, err := e.c.PowerOff(e.ctx, e.ref("gpu-day-1")); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("Login"); n != 2 {
		t.Fatalf("%d logins, want 2", n)
	}

	if err := e.conn.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls("Logout"); n != 1 {
		t.Fatalf("%d logouts after Close", n)
	}
	if _, err := e.conn.Connect(e.ctx, e.config()); !errors.Is(err, vsphere.ErrClosed) {
		t.Fatalf("Connect after Close: %v", err)
	}
	// A client from before Close fails rather than logging in again.
	if _, err := c2.Inventory(e.ctx); !errors.Is(err, vsphere.ErrClosed) {
		t.Fatalf("inventory after Close: %v", err)
	}
	if n := e.sim.Calls("Login"); n != 2 {
		t.Fatalf("logged in after Close (%d logins)", n)
	}
}

func TestLoginFailureKeepsPasswordSecret(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	cfg := e.config()
	cfg.Username = "someone-else"
	cfg.Password = "hunter2-Sup3rS3cret"
	_, err := vsphere.NewConnector().Connect(e.ctx, cfg)
	if err == nil {
		t.Fatal("logged in with a wrong password")
	}
	if strings.Contains(err.Error(), cfg.Password) {
		t.Fatalf("error reveals the password: %v", err)
	}
	if !strings.Contains(err.Error(), "log in") || !strings.Contains(err.Error(), e.sim.URL.Host) {
		t.Fatalf("error does not say what failed: %v", err)
	}
	if !errors.Is(err, vsphere.ErrInvalidLogin) {
		t.Fatalf("a refused login is not ErrInvalidLogin, so the controller would retry it soon: %v", err)
	}

	cfg.Server = "someone:" + cfg.Password + "@" + e.sim.URL.Host
	if _, err := vsphere.NewConnector().Connect(e.ctx, cfg); err == nil || strings.Contains(err.Error(), cfg.Password) {
		t.Fatalf("credentials in the server address: %v", err)
	}
}

func TestRefusedConnectionRecovers(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	if _, err := e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.sim.RefuseConnections()
	_, err := e.c.Inventory(e.ctx)
	if err == nil {
		t.Fatal("inventory while vCenter refuses connections")
	}
	if !strings.Contains(err.Error(), e.sim.URL.Host) || strings.Contains(err.Error(), e.sim.Password) {
		t.Fatalf("unclear error: %v", err)
	}
	// Another call sees the refusal itself, whatever the first saw of the dropped connection.
	if _, err := e.c.Inventory(e.ctx); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("want connection refused, got %v", err)
	}
	if err := e.sim.AcceptConnections(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Inventory(e.ctx); err != nil {
		t.Fatalf("after vCenter is back: %v", err)
	}
	if n := e.sim.Calls("Login"); n != 1 {
		t.Fatalf("%d logins: the session should have survived the outage", n)
	}
}

func TestSlowVCenterHonoursContext(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	e.sim.SetDelay("RetrievePropertiesEx", 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := e.c.Inventory(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	e.sim.SetDelay("RetrievePropertiesEx", 0)
	if _, err := e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTLSVerification(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	base := e.config()
	base.Thumbprint = ""

	good := map[string]vsphere.Config{}
	for name, tp := range map[string]string{
		"sha256":          e.sim.ThumbprintSHA256(),
		"sha1":            e.sim.ThumbprintSHA1(),
		"lowercase plain": strings.ToLower(strings.ReplaceAll(e.sim.ThumbprintSHA256(), ":", "")),
	} {
		cfg := base
		cfg.Thumbprint = tp
		good[name] = cfg
	}
	ca := base
	ca.CABundle = e.sim.CertificatePEM()
	good["CA bundle"] = ca
	insecure := base
	insecure.Insecure = true
	good["insecure"] = insecure
	for name, cfg := range good {
		conn := vsphere.NewConnector()
		if _, err := conn.Connect(e.ctx, cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		_ = conn.Close()
	}

	wrong := base
	wrong.Thumbprint = strings.Repeat("AB:", 31) + "AB"
	_, err := vsphere.NewConnector().Connect(e.ctx, wrong)
	if err == nil || !strings.Contains(err.Error(), "does not match the configured thumbprint") {
		t.Fatalf("wrong thumbprint: %v", err)
	}
	if _, err := vsphere.NewConnector().Connect(e.ctx, base); err == nil {
		t.Fatal("connected to a self-signed vCenter without a thumbprint, CA or Insecure")
	}
	bad := base
	bad.Thumbprint = "not-a-thumbprint"
	if _, err := vsphere.NewConnector().Connect(e.ctx, bad); err == nil {
		t.Fatal("accepted a malformed thumbprint")
	}
}

func TestKeepAlive(t *testing.T) {
	e := newEnv(t, "daynight.yaml", vsphere.WithKeepAlive(10*time.Millisecond))
	// The keep-alive runs on its own clock; wait for it, boundedly.
	for deadline := time.Now().Add(10 * time.Second); e.sim.Calls("CurrentTime") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no keep-alive call within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.conn.Close(); err != nil {
		t.Fatal(err)
	}
	// Closed: no more keep-alives.
	n := e.sim.Calls("CurrentTime")
	time.Sleep(50 * time.Millisecond)
	if m := e.sim.Calls("CurrentTime"); m != n {
		t.Fatalf("%d keep-alive calls after Close", m-n)
	}
}

// BenchmarkInventory measures one inventory read (one property-collector round trip once
// the profile sizes are cached) against the two-host sample.
func BenchmarkInventory(b *testing.B) {
	e := newEnv(b, "twohost.yaml")
	if _, err := e.c.Inventory(e.ctx); err != nil {
		b.Fatal(err)
	}
	e.sim.ResetCalls()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.c.Inventory(e.ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(e.sim.Calls("RetrievePropertiesEx"))/float64(b.N), "roundtrips/op")
}

// BenchmarkScopedInventory measures the pass's read of a large pool: 64 hosts x 4 P100s,
// each GPU with four 4Q VMs running and a 16Q VM off (the shape of make
// bench-transition at 64 hosts), read scoped to the pool's VMs once the devices of
// unchanged VMs are in the session's memo (devicememo.go).
func BenchmarkScopedInventory(b *testing.B) {
	y, ids := sixtyFourHosts(true)
	e := newEnv(b, y)
	if _, err := e.c.Inventory(e.ctx, ids...); err != nil {
		b.Fatal(err)
	}
	e.sim.ResetCalls()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.c.Inventory(e.ctx, ids...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(e.sim.Calls("RetrievePropertiesEx"))/float64(b.N), "roundtrips/op")
}

// sixtyFourHosts is the inventory of the 64-host benchmarks: 64 hosts of four P100s,
// four 4Q day VMs on each GPU, powered on, and with night one 16Q night VM per GPU,
// powered off; and the VMs' names.
func sixtyFourHosts(night bool) (string, []string) {
	var y strings.Builder
	var names []string
	y.WriteString("datacenter: dc1\nhosts:\n")
	for h := range 64 {
		fmt.Fprintf(&y, "  - name: esx-%02d\n    gpus:\n", h)
		for g := range 4 {
			fmt.Fprintf(&y, "      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:%02x:00.0\"}\n", 0x10+g)
		}
		y.WriteString("    profiles: [{name: grid_p100-4q}, {name: grid_p100-16q}]\n")
	}
	y.WriteString("vms:\n")
	for h := range 64 {
		for g := range 4 {
			for k := range 4 {
				names = append(names, fmt.Sprintf("day-%02d-%d-%d", h, g, k))
				fmt.Fprintf(&y, "  - {name: %s, host: esx-%02d, profile: grid_p100-4q, powerState: poweredOn}\n", names[len(names)-1], h)
			}
			if night {
				names = append(names, fmt.Sprintf("night-%02d-%d", h, g))
				fmt.Fprintf(&y, "  - {name: %s, host: esx-%02d, profile: grid_p100-16q, powerState: poweredOff}\n", names[len(names)-1], h)
			}
		}
	}
	return y.String(), names
}

// powerOn powers a VM on on its own host, in e.do's shape.
func (e *env) powerOn(ctx context.Context, vm string) (string, error) {
	return e.c.PowerOn(ctx, vm, "")
}

// TestMixedDeviceVM: a VM whose vGPU devices differ (NVIDIA Multi-vGPU allows sizes of
// one series) is read with every device's profile, so the planner sees it is not
// {grid_p100-16q, vgpus: 2}; SetProfile makes it uniform.
func TestMixedDeviceVM(t *testing.T) {
	e := newEnv(t, `
hosts:
- name: h1
  gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}, {model: Tesla P100, memoryGiB: 16, pciId: "0000:af:00.0"}]
  profiles: [{name: grid_p100-8q}, {name: grid_p100-16q}]
vms:
- {name: a, host: h1, profiles: [grid_p100-16q, grid_p100-8q], powerState: poweredOff}
- {name: b, host: h1, profiles: [grid_p100-16q, grid_p100-16q], powerState: poweredOff}
`)
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := inv.FindVM("a")
	if a.Profile != "grid_p100-16q" || a.VGPUCount() != 2 || strings.Join(a.Profiles, ",") != "grid_p100-16q,grid_p100-8q" || a.Is("grid_p100-16q", 2) {
		t.Fatalf("VM a read as %+v (%s), want both device profiles", a, a.Describe())
	}
	if b, _ := inv.FindVM("b"); b.Profiles != nil || !b.Is("grid_p100-16q", 2) {
		t.Fatalf("VM b read as %+v, want 2 x grid_p100-16q without Profiles", b)
	}
	if info := e.do(func(ctx context.Context, ref string) (string, error) {
		return e.c.SetProfile(ctx, ref, "grid_p100-16q", 2)
	}, "a"); info.State != vsphere.TaskSuccess {
		t.Fatalf("set profile: %+v", info)
	}
	if inv, err = e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
	if a, _ := inv.FindVM("a"); !a.Is("grid_p100-16q", 2) || a.Profiles != nil {
		t.Fatalf("after SetProfile VM a is %s", a.Describe())
	}
	if _, err := vgpusim.Load([]byte(`
hosts: [{name: h1, gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-8q}, {name: grid_p100-8c}]}]
vms: [{name: a, host: h1, profiles: [grid_p100-8q, grid_p100-8c]}]
`)); err == nil || !strings.Contains(err.Error(), "not of the same board and series") {
		t.Fatalf("profiles of two series: %v", err)
	}
}

// TestDatastoresAndMovedPowerOn: hosts and VMs are read with their datastores, and the
// planner moves the power-on of a VM off a host in maintenance mode only to a host that
// mounts them. vCenter uses a VM's own host when the power-on's host is not compatible
// (PowerOnVMRequestType.host), so a power-on moved to h3, which lacks local-1, fails on
// h1, in maintenance mode.
func TestDatastoresAndMovedPowerOn(t *testing.T) {
	e := newEnv(t, `
hosts:
- {name: h1, cluster: c, inMaintenanceMode: true, datastores: [local-1, shared], gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-16q}]}
- {name: h2, cluster: c, datastores: [shared], gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-16q}]}
- {name: h3, cluster: c, datastores: [local-3], gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-16q}]}
vms:
- {name: a, host: h1, datastore: local-1, profile: grid_p100-16q, powerState: poweredOff}
- {name: b, host: h1, datastore: shared, profile: grid_p100-16q, powerState: poweredOff}
`)
	inv, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := inv.FindHost("h1")
	h2, _ := inv.FindHost("h2")
	h3, _ := inv.FindHost("h3")
	a, _ := inv.FindVM("a")
	b, _ := inv.FindVM("b")
	if len(h1.Datastores) != 2 || len(a.Datastores) != 1 || len(b.Datastores) != 1 {
		t.Fatalf("datastores: h1 %v, a %v, b %v", h1.Datastores, a.Datastores, b.Datastores)
	}
	for _, tc := range []struct {
		host   *inventory.Host
		vm     *inventory.VM
		mounts bool
	}{{h1, a, true}, {h1, b, true}, {h2, a, false}, {h2, b, true}, {h3, a, false}, {h3, b, false}} {
		if got := tc.host.Mounts(tc.vm.Datastores); got != tc.mounts {
			t.Errorf("host %s mounts VM %s's datastores %v: %v, want %v", tc.host.Name, tc.vm.Name, tc.vm.Datastores, got, tc.mounts)
		}
	}
	info := e.do(func(ctx context.Context, ref string) (string, error) { return e.c.PowerOn(ctx, ref, h3.Ref) }, "a")
	if info.State != vsphere.TaskError || !strings.Contains(info.Error, "maintenance") {
		t.Fatalf("power-on of a on h3, which lacks its datastore: %+v, want a failure on h1 (maintenance mode)", info)
	}
	info = e.do(func(ctx context.Context, ref string) (string, error) { return e.c.PowerOn(ctx, ref, h2.Ref) }, "b")
	if info.State != vsphere.TaskSuccess {
		t.Fatalf("power-on of b on h2, which mounts its datastore: %+v", info)
	}
	if inv, err = e.c.Inventory(e.ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := inv.FindVM("b"); b.Host != "h2" || b.PowerState != inventory.PoweredOn {
		t.Fatalf("b is %s on %s", b.PowerState, b.Host)
	}
}
