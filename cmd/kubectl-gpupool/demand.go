package main

import (
	"fmt"
	"io"
	"strings"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// demandWhy is the operator's words for a layout demand wants: the cause of the switch
// it started, or what keeps the layout.
func demandWhy(st *gpupoolv1.GPUPoolProfileStatus) string {
	if t := st.Transition; t != nil && t.To == st.DesiredLayout && t.Reason == gpupoolv1.DesiredByDemand && t.Cause != "" {
		return t.Cause
	}
	if st.Demand != nil && st.Demand.Message != "" {
		return "Demand: " + st.Demand.Message
	}
	return string(gpupoolv1.DesiredByDemand)
}

// describeDemand prints what the operator saw of the demand per layout and what it
// decided, or why it did not act, for a pool with spec.demand.
func describeDemand(out io.Writer, p *gpupoolv1.GPUPoolProfile, wide bool, sc screen) {
	ds := p.Status.Demand
	if p.Spec.Demand == nil || ds == nil {
		return
	}
	now := sc.now
	fmt.Fprintln(out, "\nDemand:")
	if ds.Message != "" {
		fmt.Fprintf(out, "  %s\n", clip(sc.text(ds.Message), wide, 240))
	}
	if b := ds.Budget; b != nil {
		line := fmt.Sprintf("  Switch budget: %d of %d switches in 24h (scheduled and demand; overrides do not count)", b.Used, b.Max)
		if b.NextAt != nil {
			line += ", spent until " + sc.at(b.NextAt.Time) + " (kubectl gpupool reset-budget " + p.Name + " resets it)"
		}
		if b.ResetTime != nil {
			line += ", reset at " + sc.at(b.ResetTime.Time)
		}
		fmt.Fprintln(out, line)
	}
	if sw := ds.Switch; sw != nil {
		fmt.Fprintf(out, "  Announced: switch to %s at %s: %s\n", sw.Layout, sc.at(sw.At.Time), clip(sc.text(sw.Message), wide, 160))
	}
	if st := ds.Step; st != nil {
		fmt.Fprintf(out, "  Announced: step of %s from %d to %d GPUs converted at %s: %s\n", st.Layout, st.From, st.To, sc.at(st.At.Time), clip(sc.text(st.Message), wide, 160))
	}
	tw := table(out)
	fmt.Fprintln(tw, "  LAYOUT\tPENDING\tRUNNING GPUS\tSINCE\tA SWITCH TO IT WOULD EVICT\tPODS")
	for _, l := range ds.Layouts {
		pending := "-"
		if l.PendingPods > 0 {
			pending = fmt.Sprintf("%d pods, %d GPUs", l.PendingPods, l.PendingGPUs)
		}
		since := "-"
		switch {
		case l.PendingSince != nil:
			since = "pending for " + short(now.Sub(l.PendingSince.Time))
		case l.IdleSince != nil:
			since = "idle for " + short(now.Sub(l.IdleSince.Time))
		}
		risk := "-"
		if l.Layout != p.Status.ActiveLayout {
			risk = fmt.Sprintf("%d GPU pods", l.Evictions)
			if l.DoNotDisrupt > 0 {
				risk += fmt.Sprintf(", %d do-not-disrupt", l.DoNotDisrupt)
			}
			if l.JobsNearCompletion > 0 {
				risk += fmt.Sprintf(", %d of Jobs near completion", l.JobsNearCompletion)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\n", l.Layout, pending, l.RunningGPUs, since, risk, or(strings.Join(l.Pods, ", "), "-"))
	}
	_ = tw.Flush()
}
