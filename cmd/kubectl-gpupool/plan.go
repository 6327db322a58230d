package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func (a *app) planCommand() *cobra.Command {
	var pf *genericclioptions.PrintFlags
	var live liveOptions
	cmd := &cobra.Command{
		Use:   "plan NAME",
		Short: "Show the steps of the transition in progress or of the next one, as gpupool planned them",
		Long: `Show the steps of the transition in progress or, when the pool is at its wanted layout,
of the next scheduled one, as gpupool published them in status.plan. It needs read access
to the pool only.

With --live it observes vCenter, the nodes and the pods itself, exactly as the operator
does, and plans for the layout wanted now (or at --at, or --layout): this needs the
credentials Secret and network access to vCenter. The Secret is read with your own
credentials, from the namespace the pool's spec.vcenter.credentialsSecretRef names
(--credentials-namespace pins the namespace you expect; a pool naming another is refused).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if live.enabled {
				return a.livePlan(cmd.Context(), args[0], live)
			}
			p, _, err := a.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if ok, _ := human(pf); !ok {
				return printData(pf, p.Status.Plan, a.streams.Out)
			}
			sc, err := a.screenFor(&p.Spec)
			if err != nil {
				return err
			}
			return printPlan(a.streams.Out, p, sc)
		},
	}
	pf = a.outputFlags(cmd)
	cmd.Flags().BoolVar(&live.enabled, "live", false, "observe vCenter directly instead of reading status.plan (needs the credentials Secret)")
	cmd.Flags().StringVar(&live.at, "at", "", "with --live: plan for the layout wanted at this time: "+timeFormats+"; default now")
	cmd.Flags().StringVar(&live.layout, "layout", "", "with --live: plan for this layout instead of the scheduled one")
	cmd.Flags().StringVar(&live.credentialsNamespace, "credentials-namespace", "", "with --live: the only namespace the credentials Secret may be read from (default: the namespace the pool's credentialsSecretRef names; your RBAC decides whether you may read it)")
	return cmd
}

// printPlan prints status.plan.
func printPlan(out io.Writer, p *gpupoolv1.GPUPoolProfile, sc screen) error {
	pv := p.Status.Plan
	if pv == nil {
		what := "no transition is in progress and none is scheduled within 35 days"
		if p.Status.Phase == "" || p.Status.Phase == gpupoolv1.PhasePending {
			what = "gpupool has not observed the pool yet"
		}
		_, err := fmt.Fprintf(out, "pool %s: no plan published: %s\n", p.Name, what)
		return err
	}
	switch pv.For {
	case gpupoolv1.PlanForNext:
		at := "-"
		if pv.At != nil {
			at = sc.at(pv.At.Time)
		}
		fmt.Fprintf(out, "pool %s: next transition to %s at %s, as it would run on the state observed now\n", p.Name, pv.Layout, at)
	default:
		fmt.Fprintf(out, "pool %s: to layout %s now\n", p.Name, pv.Layout)
	}
	if pv.Generation != p.Generation {
		fmt.Fprintf(out, "note: planned for spec generation %d; the spec is at %d and gpupool has not planned it yet\n", pv.Generation, p.Generation)
	}
	if err := printConversion(out, p.Name, pv.Conversion, sc); err != nil {
		return err
	}
	return printSteps(out, p.Name, pv, sc)
}

// printConversion prints the choice of a layout by count (status.plan.conversion).
func printConversion(out io.Writer, name string, cv *gpupoolv1.ConversionPreview, sc screen) error {
	if cv == nil {
		return nil
	}
	fmt.Fprintf(out, "%s converted to %s, evicting %s (cost %d)\n", count(int(cv.Count), "GPU"), cv.Profile, count(int(cv.Evicted), "GPU pod"), cv.Cost)
	tw := table(out)
	fmt.Fprintln(tw, "  HOST\tGPU\tWHY")
	for _, g := range append(append([]gpupoolv1.GPUChoicePreview(nil), cv.Chosen...), cv.NotChosen...) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.Host, g.GPU, sc.text(g.Why))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cv.Truncated != "" || cv.Ineligible > 0 {
		fmt.Fprintf(out, "%s; %d GPUs cannot be converted (kubectl gpupool plan %s --live lists them with why)\n", or(cv.Truncated, "all chosen and not chosen GPUs listed"), cv.Ineligible, name)
	}
	return nil
}

// printSteps prints a plan preview's steps, per host in order.
func printSteps(out io.Writer, name string, pv *gpupoolv1.PlanPreview, sc screen) error {
	if len(pv.Problems) > 0 {
		fmt.Fprintf(out, "layout %s cannot be reached:\n", pv.Layout)
		for _, pr := range pv.Problems {
			fmt.Fprintf(out, "  %s\n", sc.text(pr))
		}
		return nil
	}
	if pv.Steps == 0 {
		_, err := fmt.Fprintf(out, "layout %s: nothing to do\n", pv.Layout)
		return err
	}
	fmt.Fprintf(out, "layout %s: %s on %s", pv.Layout, count(int(pv.Steps), "step"), count(len(pv.Hosts), "host"))
	if pv.WaitingSteps > 0 {
		fmt.Fprintf(out, " (%d wait for GPUs that earlier steps free)", pv.WaitingSteps)
	}
	fmt.Fprintln(out)
	tw := table(out)
	fmt.Fprintln(tw, "  HOST\tSTEP\tVM\tPROFILE\tWAITS FOR\tREASON")
	for _, h := range pv.Hosts {
		for _, s := range h.Steps {
			waits := "-"
			if s.WaitsForGPUs {
				waits = "freed GPUs"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", h.Host, s.Action, s.VM, or(s.Profile, "-"), waits, sc.text(s.Reason))
		}
		if h.More > 0 {
			fmt.Fprintf(tw, "  %s\t+%d more\t\t\t\t\n", h.Host, h.More)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if pv.Truncated != "" {
		fmt.Fprintf(out, "%s (kubectl gpupool plan %s --live lists every step)\n", pv.Truncated, name)
	}
	return nil
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
