package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/requests"
)

// statusHistory is how many past transitions status shows; history shows all.
const statusHistory = 3

func (a *app) statusCommand() *cobra.Command {
	var pf *genericclioptions.PrintFlags
	var watchIt bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show the pools, or one pool: layout now and wanted, why, next switch, workers, conditions",
		Long: `Show the pools, or one pool: layout now and wanted, why, next switch, workers, conditions.

With -w (--watch) it prints the pool again on every change of what it shows, until
interrupted or, with --timeout, for that long.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watchIt {
				if len(args) == 0 {
					return errors.New("--watch needs a pool's NAME")
				}
				return a.watchStatus(cmd.Context(), args[0], pf, timeout)
			}
			if len(args) == 0 {
				return a.list(cmd.Context(), pf)
			}
			p, c, err := a.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			a.requests = c
			if ok, wide := human(pf); ok {
				return a.describe(a.streams.Out, p, wide)
			}
			return printObject(pf, p, a.streams.Out)
		},
	}
	pf = a.outputFlags(cmd)
	cmd.Flags().BoolVarP(&watchIt, "watch", "w", false, "print the pool again on every change, until interrupted or --timeout")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --watch: stop watching after this long (default: until interrupted)")
	return cmd
}

// watchStatus prints the pool, then again on every change of what is printed (a status
// write that changes nothing shown prints nothing), until ctx ends or timeout passes:
// both end the watch as asked, without an error.
func (a *app) watchStatus(ctx context.Context, name string, pf *genericclioptions.PrintFlags, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	isHuman, wide := human(pf)
	if c, err := a.client(); err == nil {
		a.requests = c
	}
	var last string
	err := a.watchPool(ctx, name, func(p *gpupoolv1.GPUPoolProfile) (bool, error) {
		var b bytes.Buffer
		var err error
		if isHuman {
			err = a.describe(&b, p, wide)
		} else {
			err = printObject(pf, p, &b)
		}
		if err != nil || b.String() == last {
			return err != nil, err
		}
		if last != "" && isHuman {
			fmt.Fprintln(a.streams.Out)
		}
		last = b.String()
		_, err = a.streams.Out.Write(b.Bytes())
		return err != nil, err
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// list prints a line per pool, as kubectl get gpp with the reason and why.
func (a *app) list(ctx context.Context, pf *genericclioptions.PrintFlags) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	var pools gpupoolv1.GPUPoolProfileList
	if err := c.List(ctx, &pools); err != nil {
		return err
	}
	ok, wide := human(pf)
	if !ok {
		return printObject(pf, &pools, a.streams.Out)
	}
	specs := make([]*gpupoolv1.GPUPoolProfileSpec, len(pools.Items))
	for i := range pools.Items {
		specs[i] = &pools.Items[i].Spec
	}
	sc, err := a.screenFor(specs...)
	if err != nil {
		return err
	}
	tw := table(a.streams.Out)
	fmt.Fprint(tw, "NAME\tREADY\tREASON\tACTIVE\tWANTED\tPHASE\tNEXT")
	if wide {
		fmt.Fprint(tw, "\tNEXT AT\tWHY\tPAUSED\tOVERRIDE")
	}
	fmt.Fprintln(tw)
	for i := range pools.Items {
		p := &pools.Items[i]
		st := &p.Status
		status, reason := "Unknown", "-"
		if c := meta.FindStatusCondition(st.Conditions, gpupoolv1.ConditionReady); c != nil {
			status, reason = string(c.Status), c.Reason
		}
		next, nextAt := "-", "-"
		if n := st.NextTransition; n != nil {
			next, nextAt = fmt.Sprintf("%s %s", n.Layout, relative(n.At.Time, sc.now)), sc.when(n.At.Time)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", p.Name, status, reason, or(st.ActiveLayout, "-"), or(st.DesiredLayout, "-"), or(string(st.Phase), "-"), next)
		if wide {
			override := "-"
			if o := p.Spec.Override; o != nil {
				override = o.Layout
				if o.Until != nil {
					override += " until " + sc.at(o.Until.Time)
				}
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%v\t%s", nextAt, or(string(st.DesiredReason), "-"), p.Spec.Paused, override)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// describe prints one pool for a person.
func (a *app) describe(out io.Writer, p *gpupoolv1.GPUPoolProfile, wide bool) error {
	sc, err := a.screenFor(&p.Spec)
	if err != nil {
		return err
	}
	now := sc.now
	st := &p.Status
	tw := table(out)
	fmt.Fprintf(tw, "Pool:\t%s\n", p.Name)
	fmt.Fprintf(tw, "Times in:\t%s\n", sc.zone())
	fmt.Fprintf(tw, "Layout now:\t%s\n", or(withCount(st.ActiveLayout, st.ActiveCount), "(none yet)"))
	why := string(st.DesiredReason)
	// The operator's words for why, from the same function it decides with, on the
	// spec with the pool's requests applied.
	live := a.liveRequests(p, now)
	spec := requests.Effective(&p.Spec, live)
	if d, err := plan.Desired(spec, now); err == nil && d.Layout == st.DesiredLayout {
		why = d.Message
	}
	if st.DesiredReason == gpupoolv1.DesiredByDemand {
		why = demandWhy(st)
	}
	fmt.Fprintf(tw, "Wanted:\t%s (%s)\n", or(st.DesiredLayout, "(not decided yet)"), or(sc.text(why), "-"))
	if q := live.Switch; q != nil {
		fmt.Fprintf(tw, "Request:\t%s: switch to %s until %s (kubectl gpupool resume %s ends it)\n", q.Name, q.Spec.Layout, sc.at(spec.Override.Until.Time), p.Name)
	}
	if o := p.Spec.Override; o != nil {
		until := "until removed (kubectl gpupool resume " + p.Name + " --in-spec)"
		if o.Until != nil {
			until = "until " + sc.at(o.Until.Time)
		}
		fmt.Fprintf(tw, "Override:\t%s %s%s\n", o.Layout, until, reasonSuffix(o.Reason))
	}
	switch {
	case p.Spec.Paused:
		fmt.Fprintf(tw, "Paused:\tyes (spec.paused): nothing is changed until kubectl gpupool unpause %s --in-spec\n", p.Name)
	case live.Paused():
		q := live.Pausing[len(live.Pausing)-1]
		fmt.Fprintf(tw, "Paused:\tyes (request %s, until %s): nothing is changed until kubectl gpupool unpause %s\n", q.Name, sc.at(requestExpiry(q, sc.now)), p.Name)
	}
	fmt.Fprintf(tw, "Phase:\t%s\n", or(string(st.Phase), "(not reconciled yet)"))
	if c := meta.FindStatusCondition(st.Conditions, gpupoolv1.ConditionReady); c != nil {
		fmt.Fprintf(tw, "Ready:\t%s (%s): %s\n", c.Status, c.Reason, clip(sc.text(c.Message), wide, 160))
	}
	if n := st.NextTransition; n != nil {
		fmt.Fprintf(tw, "Next:\t%s at %s\n", n.Layout, sc.at(n.At.Time))
	} else if st.Phase != "" {
		fmt.Fprintf(tw, "Next:\tno change scheduled within 35 days\n")
	}
	if t := st.Transition; t != nil {
		state := "in progress"
		if t.AbortedTime != nil {
			state = "aborted " + sc.at(t.AbortedTime.Time)
		}
		fmt.Fprintf(tw, "Transition:\t%s: %s -> %s, started %s, %s\n", t.ID, or(withCount(t.From, t.FromCount), "(none)"), withCount(t.To, t.Count), sc.at(t.StartTime.Time), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	describeDemand(out, p, wide, sc)
	describeKueue(out, p, sc)
	describeWorkers(out, p, wide, sc)
	describeConditions(out, p, wide, sc)
	if len(st.History) > 0 {
		fmt.Fprintf(out, "\nLast transitions (kubectl gpupool history %s for all):\n", p.Name)
		return printHistory(out, st.History[:min(len(st.History), statusHistory)], false, sc)
	}
	return nil
}

func describeWorkers(out io.Writer, p *gpupoolv1.GPUPoolProfile, wide bool, sc screen) {
	if len(p.Status.Workers) == 0 {
		return
	}
	fmt.Fprintln(out, "\nWorkers:")
	tw := table(out)
	fmt.Fprint(tw, "  VM\tNODE\tPOWER\tPROFILE\tSTEP\tWAITING FOR")
	if wide {
		fmt.Fprint(tw, "\tHOST\tGPU\tSTEP SINCE\tMESSAGE")
	}
	fmt.Fprintln(tw)
	waits := gpuWaits(p.Status.Plan)
	for _, w := range p.Status.Workers {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s", w.VM, or(w.Node, "-"), or(w.PowerState, "-"), or(w.Profile, "-"), or(string(w.Step), "-"), waitingFor(&w, waits[w.VM] || waits[path.Base(w.VM)], sc))
		if wide {
			since := "-"
			if w.StepStartTime != nil {
				since = sc.at(w.StepStartTime.Time)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s", or(w.Host, "-"), or(w.GPU, "-"), since, or(sc.text(w.Message), "-"))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// gpuWaits are the VMs whose steps in the published plan wait for GPUs other steps free,
// by the VM's inventory name (plan steps name VMs so; a worker may be named by path).
func gpuWaits(pv *gpupoolv1.PlanPreview) map[string]bool {
	out := map[string]bool{}
	if pv == nil || pv.For != gpupoolv1.PlanForCurrent {
		return out
	}
	for _, h := range pv.Hosts {
		for _, s := range h.Steps {
			if s.WaitsForGPUs {
				out[s.VM] = true
			}
		}
	}
	return out
}

// waitingFor says what a worker's step waits for.
func waitingFor(w *gpupoolv1.WorkerStatus, gpus bool, sc screen) string {
	switch {
	case w.Task != nil && w.Task.ID != "":
		return fmt.Sprintf("vSphere task %s (%s)", w.Task.ID, w.Task.Operation)
	case w.Task != nil:
		return fmt.Sprintf("vSphere task %s being started", w.Task.Operation)
	case w.NextRetryTime != nil:
		return fmt.Sprintf("retry %d at %s", w.Attempts+1, sc.at(w.NextRetryTime.Time))
	case gpus:
		return "GPUs other steps on its host free"
	}
	switch w.Step {
	case gpupoolv1.StepDrainRequired:
		return "pods to leave the node"
	case gpupoolv1.StepWaitNodeReady:
		return "node to be Ready"
	case gpupoolv1.StepNone:
		return "-"
	}
	return "its turn (maxParallel, earlier steps on its host)"
}

func describeConditions(out io.Writer, p *gpupoolv1.GPUPoolProfile, wide bool, sc screen) {
	if len(p.Status.Conditions) == 0 {
		return
	}
	fmt.Fprintln(out, "\nConditions:")
	tw := table(out)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, sinceCond(c, wide, sc), clip(sc.text(c.Message), wide, 80))
	}
	_ = tw.Flush()
}

// sinceCond is how long ago a condition changed; wide, when too.
func sinceCond(c metav1.Condition, wide bool, sc screen) string {
	switch {
	case c.LastTransitionTime.IsZero():
		return "-"
	case wide:
		return sc.at(c.LastTransitionTime.Time)
	}
	return ago(c.LastTransitionTime.Time, sc.now)
}

// clip shortens a message for the narrow view.
func clip(s string, wide bool, n int) string {
	if wide || len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// requestExpiry is when a live request expires as gpupool recorded it
// (status.expiresAt), else as it would count it from now.
func requestExpiry(q *gpupoolv1.GPUPoolRequest, now time.Time) time.Time {
	if q.Status.ExpiresAt != nil {
		return q.Status.ExpiresAt.Time
	}
	return requests.Expiry(q, now)
}

// withCount names a layout and, for a layout by count, how many GPUs it converts: a
// partial layout, such as "night (2 GPUs)".
func withCount(layout string, count int32) string {
	switch {
	case layout == "" || count == 0:
		return layout
	case count == 1:
		return layout + " (1 GPU)"
	}
	return fmt.Sprintf("%s (%d GPUs)", layout, count)
}
