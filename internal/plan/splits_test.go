package plan

import (
	"fmt"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

func l4q(n int) string { return fmt.Sprintf("grid_l4-%dq", n) }

// l4World is esx-01 with two NVIDIA L4 GPUs in mixed-size mode: outside the pool, big
// runs an xQ and a yQ vGPU listed on both GPUs and small one sQ on the first; the pool's
// pool-1 is suspended with n x dQ, which layout night resumes.
func l4World(t testing.TB, x, y, s, d, n int) (*gpupoolv1.GPUPoolProfileSpec, *world) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	gpu := func(pci string, vms ...string) inventory.GPU {
		return inventory.GPU{PCIID: pci, Device: "NVIDIA L4", DeviceID: 0x27b8, MemoryMiB: 23034, Mode: inventory.ModeMixedSize, VMs: vms}
	}
	w.inv.Hosts = []inventory.Host{{Name: "esx-01", Policy: inventory.PolicyPerformance, Profiles: l4Profiles(),
		GPUs: []inventory.GPU{gpu("0000:3b:00.0", "big", "small"), gpu("0000:af:00.0", "big")}}}
	w.inv.VMs = []inventory.VM{
		{Name: "big", Host: "esx-01", Profile: l4q(x), Profiles: []string{l4q(x), l4q(y)}, VGPUs: 2, PowerState: inventory.PoweredOn,
			GPU: "0000:3b:00.0", GPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		{Name: "small", Host: "esx-01", Profile: l4q(s), VGPUs: 1, PowerState: inventory.PoweredOn, GPU: "0000:3b:00.0", GPUs: []string{"0000:3b:00.0"}},
		{Name: "pool-1", Host: "esx-01", Profile: l4q(d), VGPUs: n, PowerState: inventory.Suspended},
	}
	if x == y {
		w.inv.VMs[0].Profiles = nil
	}
	spec := &gpupoolv1.GPUPoolProfileSpec{Parking: gpupoolv1.ParkingPowerOff, DefaultLayout: "night", Layouts: []gpupoolv1.Layout{
		{Name: "night", Workers: []gpupoolv1.Worker{{VM: "pool-1", Profile: l4q(d), VGPUs: int32(n)}}}}}
	return spec, w
}

func l4Profiles() []inventory.Profile {
	var ps []inventory.Profile
	for _, n := range []int{1, 2, 3, 4, 6, 8, 12, 24} {
		ps = append(ps, inventory.Profile{Name: l4q(n), FrameBufferMiB: int64(n) * 1024, SuspendSupported: true})
	}
	return ps
}

// TestEverySplit: the planner does not know which of big's vGPUs runs on which GPU, and
// a layout is feasible only if it fits under every split consistent with the report.
// The case on two L4s in mixed-size mode (22.5 GiB reported each): big runs an
// 8Q and a 12Q over both, small an 8Q on the first. If big's 12Q shares the first GPU
// with small, two 6Q fit next to big's 8Q on the second; if its 8Q does, the first GPU
// has no 6Q place left and the second room for one 6Q: suspended pool-1 (2 x 6Q) cannot
// resume, and gpupool must not say it can.
func TestEverySplit(t *testing.T) {
	for _, tc := range []struct {
		name          string
		x, y, s, d, n int
		contains      []string // "" entries: no problem expected
	}{
		{name: "the issue's case: fits under one split only", x: 8, y: 12, s: 8, d: 6, n: 2, contains: []string{
			"vSphere does not report which of the vGPUs of VM big run on which GPU",
			"fits under some of the 2 splits consistent with its report but not under the one with VM big with grid_l4-8q on GPU 0000:3b:00.0 and grid_l4-12q on GPU 0000:af:00.0",
			"gpupool starts a layout only if it fits under every such split",
			"Power VM big off (or move it) while the layout starts, or give it one vGPU device per GPU it runs on, all of one profile",
		}},
		{name: "devices in the other order: the same splits", x: 12, y: 8, s: 8, d: 6, n: 2, contains: []string{"not under the one with VM big with grid_l4-8q on GPU 0000:3b:00.0 and grid_l4-12q on GPU 0000:af:00.0"}},
		{name: "one 6Q fits under both splits", x: 8, y: 12, s: 8, d: 6, n: 1},
		{name: "fits under no split: the usual message", x: 8, y: 12, s: 8, d: 12, n: 2, contains: []string{"which do not fit its GPUs"}},
		{name: "equal devices, one per GPU: the split is known", x: 12, y: 12, s: 8, d: 6, n: 2, contains: []string{"which do not fit its GPUs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := l4World(t, tc.x, tc.y, tc.s, tc.d, tc.n)
			ps := Check(spec, "night", w.inv)
			if len(tc.contains) == 0 {
				if len(ps) > 0 {
					t.Fatalf("Check:\n%s", problemLines(ps))
				}
				return
			}
			if len(ps) != 1 || ps[0].Reason != ReasonInsufficientGPU {
				t.Fatalf("want one InsufficientGPU, Check:\n%s", problemLines(ps))
			}
			for _, c := range tc.contains {
				if !strings.Contains(ps[0].Message, c) {
					t.Errorf("message %q\ndoes not say %q", ps[0].Message, c)
				}
			}
			if strings.Contains(tc.name, "usual") || strings.Contains(tc.name, "known") {
				if strings.Contains(ps[0].Message, "does not report which") {
					t.Errorf("message blames the split although no split fits: %q", ps[0].Message)
				}
			}
		})
	}
}

// TestEverySplitTooMany: past maxSplits consistent splits the layout is refused, saying
// that the split is unknown and too many splits are possible.
func TestEverySplitTooMany(t *testing.T) {
	w := &world{inv: &inventory.Inventory{}, nodes: map[string]*node{}}
	var gpus []inventory.GPU
	var pcis []string
	for i := range 4 {
		pci := fmt.Sprintf("0000:%02x:00.0", 0x3b+i)
		pcis = append(pcis, pci)
		gpus = append(gpus, inventory.GPU{PCIID: pci, Device: "NVIDIA L40", DeviceID: 0x26b5, MemoryMiB: 48 * 1024, Mode: inventory.ModeMixedSize, VMs: []string{"wide"}})
	}
	w.inv.Hosts = []inventory.Host{{Name: "esx-01", Policy: inventory.PolicyPerformance, Profiles: l40(), GPUs: gpus}}
	w.inv.VMs = []inventory.VM{
		{Name: "wide", Host: "esx-01", Profile: "grid_l40-4q", VGPUs: 12, PowerState: inventory.PoweredOn, GPU: pcis[0], GPUs: pcis},
		{Name: "pool-1", Host: "esx-01", Profile: "grid_l40-4q", VGPUs: 1, PowerState: inventory.PoweredOff},
	}
	spec := &gpupoolv1.GPUPoolProfileSpec{Parking: gpupoolv1.ParkingPowerOff, DefaultLayout: "night", Layouts: []gpupoolv1.Layout{
		{Name: "night", Workers: []gpupoolv1.Worker{{VM: "pool-1", Profile: "grid_l40-4q"}}}}}
	ps := Check(spec, "night", w.inv)
	if len(ps) != 1 || !strings.Contains(ps[0].Message, "vSphere does not report which of the vGPUs of VM wide run on which GPU, and more than 64 splits") ||
		!strings.Contains(ps[0].Message, "Power VM wide off") {
		t.Fatalf("Check:\n%s", problemLines(ps))
	}
	// With the VM off nothing is unknown.
	w.inv.VMs[0].PowerState, w.inv.VMs[0].GPUs, w.inv.VMs[0].GPU = inventory.PoweredOff, nil, ""
	for i := range w.inv.Hosts[0].GPUs {
		w.inv.Hosts[0].GPUs[i].VMs = nil
	}
	if ps := Check(spec, "night", w.inv); len(ps) > 0 {
		t.Fatalf("Check:\n%s", problemLines(ps))
	}
}
