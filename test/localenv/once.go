package localenv

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// OnceCheck is what one switch did to each VM and node, against what it needed: every
// changed VM parked or powered on once, every drained node cordoned once.
type OnceCheck struct {
	Switch string `json:"switch"`
	// PerChangedVM is the VM tasks started during the switch by method, divided by the
	// VMs the switch changes; Calls and VMs are those tasks and the VMs they were
	// started on, by method (once each: Calls equals VMs).
	PerChangedVM map[string]float64 `json:"perChangedVM"`
	Calls        map[string]int     `json:"calls"`
	VMs          map[string]int     `json:"vms"`
	// CordonsPerNode is the cordons seen (a node going from schedulable to cordoned)
	// divided by the nodes cordoned at least once.
	CordonsPerNode float64 `json:"cordonsPerNode"`
	// Repeats names every VM that got one operation more than once and every node
	// cordoned more than once ("day-00-0-1: SuspendVM_Task x2").
	Repeats []string `json:"repeats,omitempty"`
}

// onceCheck derives the switch's OnceCheck from its trace; changed is how many VMs the
// switch changes.
func onceCheck(name string, tr *switchTrace, changed int) OnceCheck {
	c := OnceCheck{Switch: name, PerChangedVM: map[string]float64{}, Calls: map[string]int{}, VMs: map[string]int{}}
	perVM := map[string]map[string]int{}
	for _, t := range tr.Tasks {
		vm := t.VMName
		if vm == "" {
			vm = t.VM
		}
		if perVM[vm] == nil {
			perVM[vm] = map[string]int{}
		}
		if perVM[vm][t.Method] == 0 {
			c.VMs[t.Method]++
		}
		perVM[vm][t.Method]++
		c.Calls[t.Method]++
		c.PerChangedVM[t.Method] += 1 / float64(max(changed, 1))
	}
	for vm, methods := range perVM {
		for m, n := range methods {
			if n > 1 {
				c.Repeats = append(c.Repeats, fmt.Sprintf("%s: %s x%d", vm, m, n))
			}
		}
	}
	total, nodes := 0, 0
	for node, n := range tr.Cordons {
		if n == 0 {
			continue
		}
		total, nodes = total+n, nodes+1
		if n > 1 {
			c.Repeats = append(c.Repeats, fmt.Sprintf("%s: cordoned x%d", node, n))
		}
	}
	if nodes > 0 {
		c.CordonsPerNode = float64(total) / float64(nodes)
	}
	slices.Sort(c.Repeats)
	return c
}

// FormatOnce renders the switches' operations per changed VM and cordons per node, and
// flags every repeat.
func FormatOnce(rs []*BenchResult) string {
	var b strings.Builder
	for _, r := range rs {
		for _, c := range r.Once {
			methods := make([]string, 0, len(c.PerChangedVM))
			for m := range c.PerChangedVM {
				methods = append(methods, m)
			}
			slices.Sort(methods)
			per := make([]string, len(methods))
			for i, m := range methods {
				per[i] = fmt.Sprintf("%s %d on %d VMs (%.2f per changed VM)", m, c.Calls[m], c.VMs[m], c.PerChangedVM[m])
			}
			verdict := "no repeat"
			if len(c.Repeats) > 0 {
				verdict = fmt.Sprintf("REPEATED (%d): %s", len(c.Repeats), firstOf(c.Repeats, 8))
			}
			fmt.Fprintf(&b, "%d hosts, %s: %s; cordons per drained node %.2f; %s\n",
				r.Hosts, c.Switch, strings.Join(per, ", "), c.CordonsPerNode, verdict)
		}
	}
	return b.String()
}

func firstOf(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, "; ")
	}
	return strings.Join(xs[:n], "; ") + fmt.Sprintf("; and %d more", len(xs)-n)
}

// RunSwitchesOnce creates the benchmark's pool and its workload (with b.Pods) on a
// started environment whose vgpusim writes its task log (--tasks-file e.Dir/vgpusim-tasks.json),
// switches the pool to each layout in turn ("" is back to day, the override removed),
// and returns each switch's OnceCheck: the end-to-end count of what the switches did.
func RunSwitchesOnce(ctx context.Context, e *Env, b BenchOptions, layouts []string) ([]OnceCheck, error) {
	if _, err := e.benchSetUp(ctx, b); err != nil {
		return nil, err
	}
	var out []OnceCheck
	for i, l := range layouts {
		_, tr, err := e.switchTo(ctx, l)
		if err != nil {
			return out, fmt.Errorf("switch %d to %q: %w", i+1, l, err)
		}
		out = append(out, onceCheck(fmt.Sprintf("switch %d to %s", i+1, cmp.Or(l, "day")), tr, 5*b.Hosts*b.GPUs))
	}
	return out, nil
}
