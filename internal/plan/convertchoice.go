package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// The choice of a layout by count. A VM's vGPUs all run on its own host, so what
// converting GPUs costs on one host depends only on that host's choice: the cost of a
// choice is the sum of its hosts'. Per host the least-cost set of k GPUs (that Check
// accepts) is found by enumeration, and the hosts' sets are combined by dynamic
// programming over the count, least cost first, then fewest hosts touched (converted
// GPUs kept together, against fragmentation), then the hosts and GPUs in name order.

// maxEnumeratedGPUs bounds the GPUs of one host whose subsets are enumerated; past it
// only the cheapest alone are considered (a host with more GPUs than that is rare:
// 8 per host is the common maximum).
const maxEnumeratedGPUs = 12

// maxCheckedPicks bounds how many of a host's sets of k GPUs, least cost first, are
// put to Check before that k counts as infeasible on the host.
const maxCheckedPicks = 32

// hostConv is one host of the pool and what converting its GPUs means.
type hostConv struct {
	host *inventory.Host
	// eligible are the GPUs (indexes) that may be converted; ineligible those that may
	// not, why says why.
	eligible, ineligible []int
	why                  map[int]string
	// fill is how many candidate workers a converted GPU takes.
	fill map[int]int
	// maxGPUs is the most GPUs the host's candidates can fill.
	maxGPUs int
	// best is the least-cost pick for each number of GPUs converted.
	best []hostPick
	// vms are the inventory's VMs on the host; base the base layout's workers whose VM
	// is on it, with their VMs; pool the workers that make the host's VMs of the pool
	// the pool of hostCheck's spec; inv the host and its VMs alone, for hostCheck.
	vms  []*inventory.VM
	base []baseWorker
	pool []gpupoolv1.Worker
	inv  *inventory.Inventory
}

type baseWorker struct {
	w  gpupoolv1.Worker
	vm *inventory.VM
}

// hostPick is a set of a host's GPUs to convert and what it means for the host.
type hostPick struct {
	ok   bool
	gpus []int
	// cost and pods are what the transition disrupts on the host.
	cost int64
	pods int
	// displaced are the host's running VMs that leave or are reprofiled; forbidden those
	// among them that Weights do not allow to disrupt.
	displaced, forbidden []string
	// keep are the host's base workers that keep running; deferred those that are not
	// running, kept only where they fit beside the converted GPUs.
	keep, deferred []gpupoolv1.Worker
	// assigned are the candidates that run Profile.
	assigned []*inventory.VM
	// refusal says why the pick cannot be made.
	refusal string
}

// indexHosts finds the hosts of the pool's VMs and which of their GPUs may be converted.
func (c *converter) indexHosts() {
	names := map[string]bool{}
	for vm := range c.pool {
		names[vm.Host] = true
	}
	for i := range c.inv.Hosts {
		h := &c.inv.Hosts[i]
		if !names[h.Name] {
			continue
		}
		names[h.Name] = false // the first host of a name, as findHost
		hc := c.hostConv(h)
		hc.inv = &inventory.Inventory{Hosts: []inventory.Host{*h}}
		for j := range c.inv.VMs {
			if vm := &c.inv.VMs[j]; vm.Host == h.Name {
				hc.vms = append(hc.vms, vm)
				hc.inv.VMs = append(hc.inv.VMs, *vm)
			}
		}
		c.hosts = append(c.hosts, hc)
	}
	byHost := map[string]*hostConv{}
	for _, hc := range c.hosts {
		byHost[hc.host.Name] = hc
	}
	seen := map[*inventory.VM]bool{}
	addPool := func(w gpupoolv1.Worker) {
		if vm, ok := c.vms[w.VM]; ok && byHost[vm.Host] != nil && !seen[vm] {
			seen[vm] = true
			byHost[vm.Host].pool = append(byHost[vm.Host].pool, w)
		}
	}
	for _, l := range c.spec.Layouts {
		for _, w := range l.Workers {
			addPool(w)
		}
	}
	for _, cd := range c.conv.Candidates {
		addPool(c.candidateWorker(c.vms[cd.VM]))
	}
	for _, w := range c.base.Workers {
		if vm, ok := c.vms[w.VM]; ok && byHost[vm.Host] != nil {
			byHost[vm.Host].base = append(byHost[vm.Host].base, baseWorker{w, vm})
		}
	}
	slices.SortFunc(c.hosts, func(x, y *hostConv) int { return cmp.Compare(x.host.Name, y.host.Name) })
}

func (c *converter) hostConv(h *inventory.Host) *hostConv {
	hc := &hostConv{host: h, why: map[int]string{}, fill: map[int]int{}}
	p, offered := offerOf(h, c.conv.Profile)
	for i, g := range h.GPUs {
		why := ""
		switch {
		case len(c.cands[h.Name]) == 0:
			why = "has no candidate VM on its host"
		case h.Unavailable() != "":
			why = "is on a host that " + h.Unavailable()
		case !offered:
			why = fmt.Sprintf("is on a host that does not offer %s (it offers %s)", c.conv.Profile, offers(h))
		case h.RunsOn(i, c.conv.Profile) != inventory.Runs:
			why = fmt.Sprintf("is %s, which does not run %s", g.Describe(), c.conv.Profile)
		}
		n := inventory.PerGPU(g.MemoryMiB, p.FrameBufferMiB)
		if g.Mixed() {
			n, _ = inventory.MixedSizeMax(g, p.FrameBufferMiB)
		}
		if why == "" && n/c.vgpus < 1 {
			why = fmt.Sprintf("takes %d of %s, fewer than a worker's %d", n, c.conv.Profile, c.vgpus)
		}
		if why == "" {
			for _, name := range g.VMs {
				if vm, ok := c.vms[name]; !ok || !c.pool[vm] {
					why = fmt.Sprintf("runs VM %s, which no layout names, so gpupool cannot empty it", name)
					break
				}
			}
		}
		if why != "" {
			hc.ineligible = append(hc.ineligible, i)
			hc.why[i] = why
			continue
		}
		hc.eligible = append(hc.eligible, i)
		hc.fill[i] = n / c.vgpus
	}
	fills := make([]int, 0, len(hc.eligible))
	for _, i := range hc.eligible {
		fills = append(fills, hc.fill[i])
	}
	slices.Sort(fills)
	left := len(c.cands[h.Name])
	for _, f := range fills {
		if f > left {
			break
		}
		left -= f
		hc.maxGPUs++
	}
	return hc
}

// choose finds the least-cost pick of every host, for Count GPUs in all.
func (c *converter) choose() ([]hostPick, error) {
	for _, hc := range c.hosts {
		c.bestPicks(hc)
	}
	type cell struct {
		ok    bool
		cost  int64
		hosts int
		k     int // GPUs converted on the last host
	}
	n := c.conv.Count
	dp := make([][]cell, len(c.hosts)+1)
	for i := range dp {
		dp[i] = make([]cell, n+1)
	}
	dp[0][0] = cell{ok: true}
	for i, hc := range c.hosts {
		for total := 0; total <= n; total++ {
			for k := 0; k < len(hc.best) && k <= total; k++ {
				prev, p := dp[i][total-k], hc.best[k]
				if !prev.ok || !p.ok {
					continue
				}
				next := cell{ok: true, cost: prev.cost + p.cost, hosts: prev.hosts, k: k}
				if k > 0 {
					next.hosts++
				}
				cur := &dp[i+1][total]
				if !cur.ok || next.cost < cur.cost || (next.cost == cur.cost && next.hosts < cur.hosts) {
					*cur = next
				}
			}
		}
	}
	if !dp[len(c.hosts)][n].ok {
		return nil, c.noChoice()
	}
	picks := make([]hostPick, len(c.hosts))
	for i, total := len(c.hosts), n; i > 0; i-- {
		k := dp[i][total].k
		picks[i-1] = c.hosts[i-1].best[k]
		total -= k
	}
	return picks, nil
}

// bestPicks finds the host's least-cost pick for each number of GPUs.
func (c *converter) bestPicks(hc *hostConv) {
	zero := c.evaluate(hc, nil)
	zero.ok = len(zero.forbidden) == 0
	hc.best = []hostPick{zero}
	gpus := hc.eligible
	if len(gpus) > maxEnumeratedGPUs {
		gpus = slices.Clone(gpus)
		slices.SortStableFunc(gpus, func(x, y int) int {
			return cmp.Compare(c.evaluate(hc, []int{x}).cost, c.evaluate(hc, []int{y}).cost)
		})
		gpus = gpus[:maxEnumeratedGPUs]
		slices.Sort(gpus)
	}
	for k := 1; k <= min(len(gpus), hc.maxGPUs, c.conv.Count); k++ {
		var picks []hostPick
		for _, set := range subsets(gpus, k) {
			if p := c.evaluate(hc, set); p.refusal == "" && len(p.forbidden) == 0 {
				picks = append(picks, p)
			}
		}
		slices.SortStableFunc(picks, func(x, y hostPick) int { return cmp.Compare(x.cost, y.cost) })
		best := hostPick{}
		for j, p := range picks {
			if j == maxCheckedPicks {
				break
			}
			if probs := c.hostCheck(hc, append(slices.Clone(p.keep), c.assignedWorkers(p)...)); len(probs) > 0 {
				if best.refusal == "" {
					best.refusal = probs[0].Message
				}
				continue
			}
			p.ok = true
			best = p
			break
		}
		hc.best = append(hc.best, best)
	}
}

// subsets are the k-element subsets of xs, in lexicographic order.
func subsets(xs []int, k int) [][]int {
	var out [][]int
	var walk func(from int, cur []int)
	walk = func(from int, cur []int) {
		if len(cur) == k {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := from; i <= len(xs)-(k-len(cur)); i++ {
			walk(i+1, append(cur, xs[i]))
		}
	}
	walk(0, nil)
	return out
}

// evaluate is what converting the GPUs set of hc means: which candidates run Profile,
// which base workers keep running, and what the transition disrupts on the host.
func (c *converter) evaluate(hc *hostConv, set []int) hostPick {
	h := hc.host
	p := hostPick{gpus: set}
	onSet := map[string]bool{}
	need := 0
	for _, i := range set {
		for _, name := range h.GPUs[i].VMs {
			onSet[name] = true
		}
		need += hc.fill[i]
	}
	// Candidates, cheapest first: those already running Profile on a converted GPU, then
	// those not running with it, powered off with another, running on a converted GPU
	// (disrupted anyway), suspended with another (where its state may be discarded).
	// A candidate running elsewhere is not moved: it would keep its GPU.
	var classes [5][]*inventory.VM
	for _, vm := range c.cands[h.Name] {
		running, is := vm.PowerState == inventory.PoweredOn, vm.Is(c.conv.Profile, c.vgpus)
		switch {
		case running && is && onSet[vm.Name]:
			classes[0] = append(classes[0], vm)
		case !running && is:
			classes[1] = append(classes[1], vm)
		case vm.PowerState == inventory.PoweredOff:
			classes[2] = append(classes[2], vm)
		case running && onSet[vm.Name]:
			classes[3] = append(classes[3], vm)
		case vm.PowerState == inventory.Suspended && c.spec.DiscardSuspendedState:
			classes[4] = append(classes[4], vm)
		}
	}
	for _, cl := range classes {
		for _, vm := range cl {
			if len(p.assigned) < need {
				p.assigned = append(p.assigned, vm)
			}
		}
	}
	if len(p.assigned) < need {
		p.refusal = fmt.Sprintf("host %s has %d usable candidate VMs for %d converted GPUs, which take %d", h.Name, len(p.assigned), len(set), need)
	}
	staying := map[*inventory.VM]bool{}
	for _, vm := range p.assigned {
		if vm.PowerState == inventory.PoweredOn && vm.Is(c.conv.Profile, c.vgpus) {
			staying[vm] = true
		}
	}
	for _, b := range hc.base {
		w, vm := b.w, b.vm
		if slices.Contains(p.assigned, vm) {
			continue
		}
		switch {
		case vm.PowerState != inventory.PoweredOn && len(set) > 0:
			p.deferred = append(p.deferred, w)
		case vm.PowerState != inventory.PoweredOn || !onSet[vm.Name]:
			p.keep = append(p.keep, w)
			if vm.Is(w.Profile, max(int(w.VGPUs), 1)) {
				staying[vm] = true
			}
		}
	}
	for _, vm := range hc.vms {
		if !c.pool[vm] || vm.PowerState != inventory.PoweredOn || staying[vm] {
			continue
		}
		p.displaced = append(p.displaced, vm.Name)
		cost, allowed := c.cost(vm.Name)
		p.cost += cost
		p.pods += c.costs[vm.Name].GPUPods
		if !allowed {
			p.forbidden = append(p.forbidden, vm.Name)
		}
	}
	slices.Sort(p.displaced)
	slices.Sort(p.forbidden)
	return p
}

// cost is what disrupting the VM costs, and whether Weights allow it at all.
func (c *converter) cost(vm string) (int64, bool) {
	vc, w := c.costs[vm], c.conv.Disruption
	allowed := (vc.DoNotDisrupt == 0 || w.DoNotDisrupt > 0) && (vc.JobsNearCompletion == 0 || w.JobNearCompletion > 0)
	return int64(vc.GPUPods) + int64(vc.DoNotDisrupt)*int64(w.DoNotDisrupt) + int64(vc.JobsNearCompletion)*int64(w.JobNearCompletion), allowed
}

func (c *converter) assignedWorkers(p hostPick) []gpupoolv1.Worker {
	out := make([]gpupoolv1.Worker, len(p.assigned))
	for i, vm := range p.assigned {
		out[i] = c.candidateWorker(vm)
	}
	return out
}

// hostCheck is Check of workers on one host alone: a spec whose pool is the pool's VMs
// on that host and an inventory of the host and its VMs, so that the answer does not
// depend on the other hosts' choices (and costs what one host costs).
func (c *converter) hostCheck(hc *hostConv, workers []gpupoolv1.Worker) []Problem {
	s := *c.spec
	s.Layouts = []gpupoolv1.Layout{{Name: c.conv.Layout, Workers: workers}, {Name: c.conv.Layout + poolSuffix, Workers: hc.pool}}
	return Check(&s, c.conv.Layout, hc.inv)
}

// workers are the resolved layout's workers: the base workers that stay, in the base
// layout's order, the base workers not running now where they fit beside the converted
// GPUs, then the candidates chosen, in the candidates' order.
func (c *converter) workers(picks []hostPick) []gpupoolv1.Worker {
	keep := map[string]bool{}
	assigned := map[*inventory.VM]bool{}
	onHost := map[string]bool{}
	for i, hc := range c.hosts {
		p := picks[i]
		onHost[hc.host.Name] = true
		for _, w := range p.keep {
			keep[w.VM] = true
		}
		for _, vm := range p.assigned {
			assigned[vm] = true
		}
		// Note: a base worker not running now is kept where Check accepts it beside
		// the converted GPUs, one at a time in the base layout's order, so that a lower
		// count brings the base workers back.
		ws := append(slices.Clone(p.keep), c.assignedWorkers(p)...)
		for _, w := range p.deferred {
			if len(c.hostCheck(hc, append(slices.Clone(ws), w))) == 0 {
				ws = append(ws, w)
				keep[w.VM] = true
			}
		}
	}
	var out []gpupoolv1.Worker
	for _, w := range c.base.Workers {
		vm, found := c.vms[w.VM]
		if keep[w.VM] || !found || !onHost[vm.Host] {
			out = append(out, w) // one Check reports, or a host with no candidates
		}
	}
	for _, cd := range c.conv.Candidates {
		if assigned[c.vms[cd.VM]] {
			out = append(out, c.candidateWorker(c.vms[cd.VM]))
		}
	}
	return out
}

// noChoice says why no choice of Count GPUs can be made.
func (c *converter) noChoice() error {
	field := fmt.Sprintf("layout %s", c.conv.Layout)
	var forbidden, refusals []string
	for _, hc := range c.hosts {
		for _, i := range hc.eligible {
			p := c.evaluate(hc, []int{i})
			for _, vm := range p.forbidden {
				forbidden = append(forbidden, fmt.Sprintf("VM %s on GPU %s of %s (%s)", vm, hc.host.GPUs[i].PCIID, hc.host.Name, c.describeCost(vm)))
			}
		}
		if len(hc.best) > 0 && len(hc.best[0].forbidden) > 0 {
			for _, vm := range hc.best[0].forbidden {
				forbidden = append(forbidden, fmt.Sprintf("VM %s on %s, which leaves unless its GPU is converted (%s)", vm, hc.host.Name, c.describeCost(vm)))
			}
		}
		for _, p := range hc.best {
			if p.refusal != "" {
				refusals = append(refusals, p.refusal)
			}
		}
	}
	slices.Sort(forbidden)
	forbidden = slices.Compact(forbidden)
	if len(forbidden) > 0 {
		return fmt.Errorf("%s: %w: no %d GPUs can be converted to %s without disrupting what the disruption weights forbid: %s; lower count, wait for those pods to finish, or set disruption weights (doNotDisrupt, jobNearCompletion) to allow it at a cost",
			field, errNoChoice, c.conv.Count, c.conv.Profile, strings.Join(forbidden, "; "))
	}
	if len(refusals) > 0 {
		return fmt.Errorf("%s: %w: no %d GPUs converted to %s fit: %s; lower count, or list candidates on more hosts", field, errNoChoice, c.conv.Count, c.conv.Profile, refusals[0])
	}
	return fmt.Errorf("%s: %w: no %d GPUs can be converted to %s; lower count", field, errNoChoice, c.conv.Count, c.conv.Profile)
}

// describeCost writes what disrupting a VM disrupts: "2 do-not-disrupt pods".
func (c *converter) describeCost(vm string) string {
	vc := c.costs[vm]
	var out []string
	if vc.DoNotDisrupt > 0 {
		out = append(out, fmt.Sprintf("%d do-not-disrupt %s", vc.DoNotDisrupt, plural(vc.DoNotDisrupt, "pod")))
	}
	if vc.JobsNearCompletion > 0 {
		out = append(out, fmt.Sprintf("%d %s near completion", vc.JobsNearCompletion, plural(vc.JobsNearCompletion, "Job")))
	}
	out = append(out, fmt.Sprintf("%d GPU %s", vc.GPUPods, plural(vc.GPUPods, "pod")))
	return strings.Join(out, ", ")
}
