package controllers

import (
	"fmt"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// countPairInventory is the count demo's world (test/vgpusim/testdata/count.yaml), a
// template for fmt as fourByFour: one host with two 16 GB P100s, eight 4Q day VMs
// running (four per GPU, as the performance policy spreads them) and two 16Q night VMs
// powered off.
func countPairInventory() string {
	var b strings.Builder
	b.WriteString("datacenter: dc1\nhosts:\n  - name: %[1]sesx-01\n    policy: performance\n    gpus:\n")
	for _, pci := range []string{"0000:3b:00.0", "0000:d8:00.0"} {
		fmt.Fprintf(&b, "      - {model: Tesla P100, memoryGiB: 16, pciId: %q}\n", pci)
	}
	b.WriteString("    profiles:\n      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}\n      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}\nvms:\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "  - {name: %%[1]sday-%d, host: %%[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}\n", i)
	}
	for i := 1; i <= 2; i++ {
		fmt.Fprintf(&b, "  - {name: %%[1]snight-%d, host: %%[1]sesx-01, profile: grid_p100-16q, powerState: poweredOff}\n", i)
	}
	return b.String()
}

// TestCountChoiceHoldsOnAReadBetweenTwoStates: night is day with one GPU converted. A
// read taken just after the night VM's power-on catches it with its vGPU already
// placed on the converted GPU while it still reads as powered off (the order vSphere
// and vgpusim make the change in): on that read the converted GPU looks taken, and the
// other GPU the one to convert. The switch must not act on it: the other GPU's day
// VMs keep running and their nodes are never cordoned; each VM gets each operation
// once, the converted GPU's day nodes are cordoned once, and the pool never reports
// the layout infeasible. So with a new manager every pass, which remembers no earlier
// choice to compare with. Without the settle (decide, facts.choiceMoved) the other GPU's
// four day nodes were cordoned and drained for one pass (the e2e test
// TestDemandSizedPartialSwitchOnLocalCluster saw it under load).
func TestCountChoiceHoldsOnAReadBetweenTwoStates(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			choiceHolds(t, restart)
		})
	}
}

func choiceHolds(t *testing.T, restart bool) {
	prefix := "csr-"
	if restart {
		prefix = "csrr-"
	}
	h := newHarnessWith(t, prefix, countPairInventory())
	var dayW, vms []string
	for i := 1; i <= 8; i++ {
		dayW = append(dayW, fmt.Sprintf("day-%d=grid_p100-4q", i))
		vms = append(vms, fmt.Sprintf("day-%d", i))
	}
	vms = append(vms, "night-1", "night-2")
	conv := &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q",
		Candidates: []gpupoolv1.Candidate{{VM: h.prefix + "night-1"}, {VM: h.prefix + "night-2"}}}
	pool := h.pool("pair", h.layout("day", dayW...), gpupoolv1.Layout{Name: "night", Convert: conv})
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 40)
	h.forget = restart // a new manager every pass: no choice remembered from the last

	// The operator's first read that shows a night VM running shows it placed but
	// powered off.
	caught := map[string]bool{}
	h.hook().read = func(inv *inventory.Inventory, named []string) {
		if len(named) == 0 {
			return // the harness's own read (settle)
		}
		for i := range inv.VMs {
			vm := &inv.VMs[i]
			if strings.HasPrefix(vm.Name, h.prefix+"night-") && vm.PowerState == inventory.PoweredOn && len(vm.GPUs) > 0 && !caught[vm.Name] {
				caught[vm.Name] = true
				vm.PowerState = inventory.PoweredOff
			}
		}
	}
	l := h.ledger(vms...)
	h.switchTo(pool.Name, "night")
	p := h.untilLayout(pool.Name, "night", 60, l)
	l.once("to night, a read between two states")
	if len(caught) == 0 {
		t.Fatal("no read caught a night VM between two states: the test tests nothing")
	}
	var kept, parked []string
	for _, vm := range vms[:8] {
		if h.vm(vm).PowerState == "poweredOn" {
			kept = append(kept, vm)
			if n := l.cordons[vm]; n > 0 {
				t.Errorf("day VM %s runs on the GPU that is not converted, and its node was cordoned %d times", vm, n)
			}
		} else {
			parked = append(parked, vm)
		}
	}
	if len(kept) != 4 || len(parked) != 4 {
		t.Errorf("day VMs kept %v, parked %v: want four of each", kept, parked)
	}
	for _, vm := range parked {
		if n := l.cordons[vm]; n != 1 {
			t.Errorf("day VM %s was parked, its node cordoned %d times: want once", vm, n)
		}
	}
	h.neverInfeasible(p)
}
