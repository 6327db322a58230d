package plan

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/inventory"
)

// TestEverySplitProperty: on random two-L4 worlds (l4World), Check accepts a layout only
// if Check accepts it on every world in which big's split is known (big replaced by one
// VM per GPU, holding that GPU's devices), over the splits this test enumerates itself
// (every assignment of big's devices giving each GPU one, valid by inventory.CanRun);
// and when it refuses because of the split, some known split fits and some does not.
func TestEverySplitProperty(t *testing.T) {
	sizes := []int{1, 2, 3, 4, 6, 8, 12}
	r := rand.New(rand.NewPCG(22, 3))
	checked := 0
	for range 400 {
		x, y, s, d := sizes[r.IntN(len(sizes))], sizes[r.IntN(len(sizes))], sizes[r.IntN(len(sizes))], sizes[r.IntN(len(sizes))]
		n := 1 + r.IntN(4)
		spec, w := l4World(t, x, y, s, d, n)
		ps := Check(spec, "night", w.inv)
		var fits, fails int
		for _, at := range knownSplits(w.inv, x, y, s) {
			kspec, kw := l4World(t, x, y, s, d, n)
			knowSplit(kw.inv, at)
			if len(Check(kspec, "night", kw.inv)) == 0 {
				fits++
			} else {
				fails++
			}
		}
		if fits+fails > 0 {
			checked++
		}
		if len(ps) == 0 && fails > 0 {
			t.Errorf("big %dQ+%dQ, small %dQ, pool %d x %dQ: Check accepts, but %d known splits refuse", x, y, s, n, d, fails)
		}
		if len(ps) > 0 && strings.Contains(ps[0].Message, "does not report which") && (fits == 0 || fails == 0) {
			t.Errorf("big %dQ+%dQ, small %dQ, pool %d x %dQ: refused for the split, but %d known splits fit and %d do not: %s", x, y, s, n, d, fits, fails, ps[0].Message)
		}
	}
	if checked < 100 {
		t.Errorf("only %d worlds had a consistent split", checked)
	}
}

// knownSplits are the splits of big's two devices over the two GPUs that can be true:
// one device on each, every GPU's vGPUs valid under its mode.
func knownSplits(inv *inventory.Inventory, x, y, s int) [][2][]string {
	h := &inv.Hosts[0]
	p := func(n int) inventory.Profile { return inventory.Profile{Name: l4q(n), FrameBufferMiB: int64(n) * 1024} }
	var out [][2][]string
	for _, at := range [][2]int{{x, y}, {y, x}} {
		if inventory.CanRun(h.GPUs[0], []inventory.Profile{p(s), p(at[0])}) && inventory.CanRun(h.GPUs[1], []inventory.Profile{p(at[1])}) &&
			!slices.ContainsFunc(out, func(o [2][]string) bool { return o[0][0] == l4q(at[0]) }) {
			out = append(out, [2][]string{{l4q(at[0])}, {l4q(at[1])}})
		}
	}
	return out
}

// knowSplit replaces big by big-0 and big-1, one per GPU with the devices of at.
func knowSplit(inv *inventory.Inventory, at [2][]string) {
	h := &inv.Hosts[0]
	inv.VMs = slices.DeleteFunc(inv.VMs, func(vm inventory.VM) bool { return vm.Name == "big" })
	for i := range 2 {
		name := []string{"big-0", "big-1"}[i]
		h.GPUs[i].VMs = append(slices.DeleteFunc(h.GPUs[i].VMs, func(n string) bool { return n == "big" }), name)
		inv.VMs = append(inv.VMs, inventory.VM{Name: name, Host: h.Name, Profile: at[i][0], Profiles: nil, VGPUs: len(at[i]),
			PowerState: inventory.PoweredOn, GPU: h.GPUs[i].PCIID, GPUs: []string{h.GPUs[i].PCIID}})
	}
}
