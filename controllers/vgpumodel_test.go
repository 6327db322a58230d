package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/find"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
)

// The tests in this file run the planner's model of vSphere (mixed-size vGPU mode, VMs
// with several vGPUs, hosts that are not available) end to end against vgpusim, whose
// placement is its own: what the planner orders, the simulated vCenter must accept.

// pool is a pool on this harness's simulator with the given layouts, no schedule and
// the first layout as default.
func (h *harness) pool(name string, layouts ...gpupoolv1.Layout) *gpupoolv1.GPUPoolProfile {
	p := h.dayNight()
	p.Name = h.prefix + name
	p.Spec.Layouts = layouts
	p.Spec.Schedule = nil
	p.Spec.DefaultLayout = layouts[0].Name
	p.Spec.DiscardSuspendedState = true
	return p
}

// layout is a layout of this harness's VMs, each "vm=profile" or "vm=profile*n".
func (h *harness) layout(name string, workers ...string) gpupoolv1.Layout {
	l := gpupoolv1.Layout{Name: name}
	for _, w := range workers {
		vm, profile, _ := strings.Cut(w, "=")
		profile, n, _ := strings.Cut(profile, "*")
		wk := gpupoolv1.Worker{VM: h.prefix + vm, Profile: profile}
		if n != "" {
			wk.VGPUs = int32(n[0] - '0')
		}
		l.Workers = append(l.Workers, wk)
	}
	return l
}

// switchTo makes layout the pool's default (a spec change, as kubectl edit would).
func (h *harness) switchTo(name, layout string) {
	h.t.Helper()
	cur := h.get(name)
	cur.Spec.DefaultLayout = layout
	h.must(k8s.Update(h.ctx, cur))
}

const mixedInventory = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    policy: performance
    vgpuMode: MODE
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}
      - {name: grid_p100-8q, frameBufferGiB: 8, suspendSupported: true}
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
vms:
  - {name: %[1]ssmall-1, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOff}
  - {name: %[1]ssmall-2, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOff}
  - {name: %[1]smid-1, host: %[1]sesx-01, profile: grid_p100-8q, powerState: poweredOff}
  - {name: %[1]sbig-1, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOn}
`

// TestMixedSizeLayoutNeedsMixedSizeMode: two 4Q and one 8Q on one 16 GB GPU is reached
// when the GPU is in mixed-size mode, and refused before anything is touched, with a
// message that names the mode and what to change, when it is in same-size mode.
func TestMixedSizeLayoutNeedsMixedSizeMode(t *testing.T) {
	for _, tc := range []struct{ prefix, mode string }{{"mx-", "mixedSize"}, {"ss-", "sameSize"}} {
		t.Run(tc.mode, func(t *testing.T) {
			h := newHarnessWith(t, tc.prefix, strings.ReplaceAll(mixedInventory, "MODE", tc.mode))
			pool := h.pool("mixed", h.layout("big", "big-1=grid_p100-16q"),
				h.layout("mixed", "small-1=grid_p100-4q", "small-2=grid_p100-4q", "mid-1=grid_p100-8q"))
			h.clock.SetTime(monday1000)
			h.create(pool)
			h.converge(pool.Name, "big", 30)
			h.switchTo(pool.Name, "mixed")

			if tc.mode == "mixedSize" {
				h.converge(pool.Name, "mixed", 40)
				gpus := h.sim.GPUs(h.prefix + "esx-01")
				on := gpus["0000:3b:00.0"]
				slices.Sort(on)
				want := []string{h.prefix + "mid-1", h.prefix + "small-1", h.prefix + "small-2"}
				if !slices.Equal(on, want) {
					t.Errorf("GPU runs %v, want %v", on, want)
				}
				return
			}
			p := h.passes(pool.Name, 5, 10*time.Second)
			condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, ReasonInfeasible, "same-size", "mixed-size", "0000:3b:00.0")
			if p.Status.ActiveLayout != "big" {
				t.Errorf("active layout %q, want big kept", p.Status.ActiveLayout)
			}
			if st := h.vm("big-1"); st.PowerState != "poweredOn" {
				t.Errorf("big-1 %s: an infeasible layout must not touch the running one", st.PowerState)
			}
			if n := h.node("big-1"); n.Spec.Unschedulable {
				t.Error("big-1's node cordoned for a layout that was refused")
			}
		})
	}
}

const multiInventory = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    policy: performance
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:d8:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
vms:
  - {name: %[1]sday-1, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-2, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]strain-1, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOff}
`

// TestWorkerWithTwoVGPUs: a training worker asks for two 16Q vGPUs; the VM is
// reconfigured to two vGPU devices, runs on both GPUs of the host, and is parked again
// for the day layout.
func TestWorkerWithTwoVGPUs(t *testing.T) {
	h := newHarnessWith(t, "mv-", multiInventory)
	pool := h.pool("multi", h.layout("day", "day-1=grid_p100-4q", "day-2=grid_p100-4q"),
		h.layout("night", "train-1=grid_p100-16q*2"))
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	h.switchTo(pool.Name, "night")
	p := h.converge(pool.Name, "night", 60)
	st := h.vm("train-1")
	if st.PowerState != "poweredOn" || st.VGPUs != 2 || st.Profile != "grid_p100-16q" {
		t.Fatalf("train-1 = %+v, want powered on with two grid_p100-16q vGPUs", st)
	}
	if gpus := slices.Compact(slices.Sorted(slices.Values(st.GPUs))); len(gpus) != 2 {
		t.Errorf("train-1 runs on %v, want both GPUs", st.GPUs)
	}
	// Its node is ready for work only once it advertises both GPUs.
	if n := h.node("train-1"); cluster.AdvertisedGPUs(n) != "2" || n.Spec.Unschedulable {
		t.Errorf("train-1's node: allocatable %v, unschedulable %v; want 2 GPUs and uncordoned", n.Status.Allocatable, n.Spec.Unschedulable)
	}
	if w := worker(p, h.prefix+"train-1"); w == nil || !strings.Contains(w.GPU, ",") {
		t.Errorf("worker status %+v should name both GPUs", w)
	}
	for _, vm := range []string{"day-1", "day-2"} {
		if st := h.vm(vm); st.PowerState == "poweredOn" {
			t.Errorf("%s still running in the night layout", vm)
		}
	}

	h.switchTo(pool.Name, "day")
	h.converge(pool.Name, "day", 60)
	if st := h.vm("train-1"); st.PowerState == "poweredOn" {
		t.Errorf("train-1 %s, want it parked by day", st.PowerState)
	}
}

const hostsInventory = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    cluster: gpu
    inMaintenanceMode: true
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles: &p100
      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
  - name: %[1]sesx-02
    cluster: gpu
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:d8:00.0"}
    profiles: *p100
  - name: %[1]sesx-03
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles: *p100
  - name: %[1]sesx-04
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles: *p100
vms:
  - {name: %[1]skeep-1, host: %[1]sesx-02, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]snight-1, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOff}
  - {name: %[1]spark-1, host: %[1]sesx-03, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]slost-1, host: %[1]sesx-04, profile: grid_p100-4q, powerState: poweredOff}
`

// TestUnavailableHosts: a powered-off VM registered on a host in maintenance mode is
// powered on on another host of its cluster; a running VM whose host is entering
// maintenance mode is held (never parked there) while the rest of the pool goes on; a
// VM on a host that does not respond stalls the layout with the host named.
func TestUnavailableHosts(t *testing.T) {
	h := newHarnessWith(t, "hu-", hostsInventory)
	pool := h.pool("hosts", h.layout("day", "keep-1=grid_p100-4q", "park-1=grid_p100-4q"),
		h.layout("night", "keep-1=grid_p100-4q", "night-1=grid_p100-16q"),
		h.layout("lost", "keep-1=grid_p100-4q", "park-1=grid_p100-4q", "lost-1=grid_p100-4q"))
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	// esx-03 starts entering maintenance mode: vCenter waits for park-1 to stop.
	h.enterMaintenance("esx-03")
	if hs, _ := h.sim.Host(h.prefix + "esx-03"); !hs.EnteringMaintenanceMode {
		t.Fatalf("esx-03 = %+v, want it entering maintenance mode", hs)
	}
	h.switchTo(pool.Name, "night")
	var p *gpupoolv1.GPUPoolProfile
	for i := 0; i < 40; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		p = h.get(pool.Name)
		if st := h.vm("night-1"); st.PowerState == "poweredOn" && worker(p, h.prefix+"night-1").Step == gpupoolv1.StepNone {
			break
		}
		h.clock.Step(testworld.Step(res))
	}
	st := h.vm("night-1")
	if st.PowerState != "poweredOn" || st.Host != h.prefix+"esx-02" {
		t.Fatalf("night-1 = %+v, want it powered on on esx-02 (esx-01 is in maintenance mode)", st)
	}
	if st := h.vm("park-1"); st.PowerState != "poweredOn" {
		t.Errorf("park-1 %s: a VM on a host entering maintenance mode must be held, not parked", st.PowerState)
	}
	if n := h.node("park-1"); n.Spec.Unschedulable {
		t.Error("park-1's node cordoned although its VM is held")
	}
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, plan.ReasonHostUnavailable, h.prefix+"esx-03", "maintenance")
	if w := worker(p, h.prefix+"park-1"); w == nil || !strings.Contains(w.Message, "maintenance") {
		t.Errorf("park-1's worker %+v should say why it is held", w)
	}

	// esx-04 stops responding; the layout that needs lost-1 there is refused, naming it.
	h.must(h.sim.SetHostState(h.prefix+"esx-04", false, "notResponding"))
	h.switchTo(pool.Name, "lost")
	p = h.passes(pool.Name, 5, 10*time.Second)
	condition(t, p, gpupoolv1.ConditionStalled, metav1.ConditionTrue, "", h.prefix+"esx-04", "not responding")
	if st := h.vm("lost-1"); st.PowerState != "poweredOff" {
		t.Errorf("lost-1 %s, want it untouched", st.PowerState)
	}
}

// enterMaintenance starts EnterMaintenanceMode_Task on a host, as an admin would, without
// waiting for it: vCenter finishes it once no VM runs there.
func (h *harness) enterMaintenance(host string) {
	h.t.Helper()
	f := find.NewFinder(h.admin().Client)
	dc, err := f.Datacenter(h.ctx, h.sim.Datacenter())
	h.must(err)
	f.SetDatacenter(dc)
	hosts, err := f.HostSystemList(h.ctx, "*")
	h.must(err)
	for _, hs := range hosts {
		if hs.Name() == h.prefix+host {
			_, err = hs.EnterMaintenanceMode(h.ctx, 0, false, nil)
			h.must(err)
			return
		}
	}
	h.t.Fatalf("no host %s", host)
}

// TestUnavailableHostMovedPowerOnRefused: vCenter refuses the power-on that the plan
// moved off a host in maintenance mode (PowerOnVM_Task's host must be compatible with
// the VM); the worker says where the power-on went and why it was refused, and the
// retry after the backoff starts it there. Never on the home host.
func TestUnavailableHostMovedPowerOnRefused(t *testing.T) {
	h := newHarnessWith(t, "hm-", hostsInventory)
	pool := h.pool("moved", h.layout("day", "keep-1=grid_p100-4q", "park-1=grid_p100-4q"),
		h.layout("night", "keep-1=grid_p100-4q", "night-1=grid_p100-16q"))
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	h.sim.FailTasks("PowerOnVM_Task", 1, nil)
	h.switchTo(pool.Name, "night")
	var said string
	for i := 0; i < 40 && h.vm("night-1").PowerState != "poweredOn"; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		if w := worker(h.get(pool.Name), h.prefix+"night-1"); w != nil && strings.Contains(w.Message, "moved to host") {
			said = w.Message
		}
		h.clock.Step(testworld.Step(res))
	}
	for _, want := range []string{"the power-on was moved to host " + h.prefix + "esx-02", h.prefix + "esx-01 is in maintenance mode", "vCenter refused it there", "injected failure of PowerOnVM_Task"} {
		if !strings.Contains(said, want) {
			t.Errorf("night-1's message while the refused power-on waits for its retry: %q, want it to say %q", said, want)
		}
	}
	if st := h.vm("night-1"); st.PowerState != "poweredOn" || st.Host != h.prefix+"esx-02" {
		t.Fatalf("night-1 = %+v, want it powered on on esx-02 after the retry", st)
	}
}

// TestMixedDeviceVMIsReconfigured: a VM whose two vGPU devices differ (16Q and 4Q) is
// not what a worker of two 16Q vGPUs asks for, although its first device's profile and
// its device count match: it is reconfigured to two 16Q before it is powered on.
func TestMixedDeviceVMIsReconfigured(t *testing.T) {
	inv := strings.Replace(multiInventory, "%[1]strain-1, host: %[1]sesx-01, profile: grid_p100-4q",
		"%[1]strain-1, host: %[1]sesx-01, profiles: [grid_p100-16q, grid_p100-4q]", 1)
	h := newHarnessWith(t, "md-", inv)
	pool := h.pool("mixed", h.layout("day", "day-1=grid_p100-4q", "day-2=grid_p100-4q"),
		h.layout("night", "train-1=grid_p100-16q*2"))
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	if st := h.vm("train-1"); strings.Join(st.Profiles, ",") != "grid_p100-16q,grid_p100-4q" {
		t.Fatalf("train-1 starts as %+v, want a 16Q and a 4Q device", st)
	}

	h.switchTo(pool.Name, "night")
	h.converge(pool.Name, "night", 60)
	st := h.vm("train-1")
	if st.PowerState != "poweredOn" || strings.Join(st.Profiles, ",") != "grid_p100-16q,grid_p100-16q" {
		t.Fatalf("train-1 = %+v, want it powered on with two grid_p100-16q vGPUs", st)
	}
}
