package plan

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gpupool/gpupool/internal/inventory"
)

// explain fills the chosen, not chosen and ineligible GPUs of r with why, for
// kubectl gpupool plan and status.plan. Each GPU's pods and cost are what emptying it
// alone disrupts; the choice itself weighs whole hosts (convertchoice.go).
func (c *converter) explain(r *Resolution, picks []hostPick) {
	var maxChosen int64 = -1
	hostsUsed := 0
	for i, hc := range c.hosts {
		p := picks[i]
		if len(p.gpus) > 0 {
			hostsUsed++
		}
		names := make([]string, len(p.assigned))
		for j, vm := range p.assigned {
			names[j] = vm.Name
		}
		next := 0
		for _, gi := range p.gpus {
			g := c.gpuChoice(hc, gi)
			n := min(hc.fill[gi], len(names)-next)
			g.Workers = names[next : next+n]
			next += n
			maxChosen = max(maxChosen, g.Cost)
			switch {
			case len(g.Displaced) == 0 && len(hc.host.GPUs[gi].VMs) > 0:
				g.Why = fmt.Sprintf("chosen: already runs %s", c.conv.Profile)
			case len(g.Displaced) == 0:
				g.Why = "chosen: free, evicts nothing"
			default:
				g.Why = "chosen: " + c.disrupts(g)
			}
			r.Chosen = append(r.Chosen, g)
		}
	}
	for i, hc := range c.hosts {
		p := picks[i]
		for _, gi := range hc.ineligible {
			g := c.gpuChoice(hc, gi)
			g.Why = "cannot be converted: it " + hc.why[gi]
			r.Ineligible = append(r.Ineligible, g)
		}
		for _, gi := range hc.eligible {
			if slices.Contains(p.gpus, gi) {
				continue
			}
			g := c.gpuChoice(hc, gi)
			g.Why = c.whyNot(hc, p, g, maxChosen, hostsUsed)
			r.NotChosen = append(r.NotChosen, g)
		}
	}
}

// whyNot says why an eligible GPU was not chosen.
func (c *converter) whyNot(hc *hostConv, p hostPick, g GPUChoice, maxChosen int64, hostsUsed int) string {
	single := c.evaluate(hc, []int{indexOf(hc.host, g.GPU)})
	switch {
	case len(single.forbidden) > 0:
		return fmt.Sprintf("not chosen: emptying it disrupts %s (%s), which the disruption weights forbid", vmList(single.forbidden), c.describeCost(single.forbidden[0]))
	case g.Cost > maxChosen:
		return fmt.Sprintf("not chosen: costs %d, more than any chosen GPU (at most %d); %s", g.Cost, maxChosen, c.disrupts(g))
	case len(p.gpus) > 0 && len(p.gpus) >= hc.maxGPUs:
		return fmt.Sprintf("not chosen: the host's %d candidate VMs fill its chosen GPUs", len(c.cands[hc.host.Name]))
	case len(p.gpus) == 0 && hostsUsed > 0:
		return "not chosen: costs no less than the chosen GPUs, which keep the converted GPUs on fewer hosts"
	}
	return "not chosen: costs no less than the chosen GPUs; between equals gpupool takes hosts and GPUs in name order"
}

// disrupts writes what emptying a GPU disrupts: "evicts 3 GPU pods (cost 4: 1
// do-not-disrupt pod at weight 1), displaces VMs a, b".
func (c *converter) disrupts(g GPUChoice) string {
	dnd, jobs := 0, 0
	for _, vm := range g.Displaced {
		dnd += c.costs[vm].DoNotDisrupt
		jobs += c.costs[vm].JobsNearCompletion
	}
	var weighed []string
	if dnd > 0 {
		weighed = append(weighed, fmt.Sprintf("%d do-not-disrupt %s at weight %d", dnd, plural(dnd, "pod"), c.conv.Disruption.DoNotDisrupt))
	}
	if jobs > 0 {
		weighed = append(weighed, fmt.Sprintf("%d %s near completion at weight %d", jobs, plural(jobs, "Job"), c.conv.Disruption.JobNearCompletion))
	}
	s := fmt.Sprintf("evicts %d GPU %s", g.Pods, plural(g.Pods, "pod"))
	if len(weighed) > 0 {
		s += fmt.Sprintf(" (cost %d: %s)", g.Cost, strings.Join(weighed, ", "))
	}
	return s + ", displaces " + vmList(g.Displaced)
}

func indexOf(h *inventory.Host, pciID string) int {
	return slices.IndexFunc(h.GPUs, func(g inventory.GPU) bool { return g.PCIID == pciID })
}

// gpuChoice is GPU gi of hc with what emptying it alone disrupts: the pool's VMs
// running on it, but for candidates that already run Profile there.
func (c *converter) gpuChoice(hc *hostConv, gi int) GPUChoice {
	g := GPUChoice{Host: hc.host.Name, GPU: hc.host.GPUs[gi].PCIID}
	for _, name := range hc.host.GPUs[gi].VMs {
		vm, ok := c.vms[name]
		if !ok || !c.pool[vm] {
			continue
		}
		if _, cand := c.candOf[vm]; cand && vm.Is(c.conv.Profile, c.vgpus) {
			continue
		}
		g.Displaced = append(g.Displaced, name)
		cost, _ := c.cost(name)
		g.Cost += cost
		g.Pods += c.costs[name].GPUPods
	}
	slices.Sort(g.Displaced)
	return g
}

// String explains the resolution for users: the GPUs chosen, not chosen and why.
func (r *Resolution) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "layout %s: %d %s converted to %s, evicting %d GPU %s\n", r.Layout.Name, r.Count, plural(r.Count, "GPU"), r.Profile, r.Evicted, plural(r.Evicted, "pod"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, set := range [][]GPUChoice{r.Chosen, r.NotChosen, r.Ineligible} {
		for _, g := range set {
			workers := ""
			if len(g.Workers) > 0 {
				workers = " -> " + strings.Join(g.Workers, ", ")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s%s\n", g.Host, g.GPU, g.Why, workers)
		}
	}
	tw.Flush()
	for _, pr := range r.Problems {
		fmt.Fprintf(&b, "  %s: %s\n", pr.Reason, pr.Message)
	}
	return b.String()
}
