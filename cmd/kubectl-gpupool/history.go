package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func (a *app) historyCommand() *cobra.Command {
	var pf *genericclioptions.PrintFlags
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "Show the pool's past transitions (the last 10, newest first), from status.history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, err := a.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ok, wide := human(pf)
			if !ok {
				return printData(pf, p.Status.History, a.streams.Out)
			}
			if len(p.Status.History) == 0 {
				_, err := fmt.Fprintf(a.streams.Out, "pool %s has no finished transition yet\n", p.Name)
				return err
			}
			sc, err := a.screenFor(&p.Spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.streams.Out, "pool %s, newest first, times in %s:\n", p.Name, sc.zone())
			return printHistory(a.streams.Out, p.Status.History, wide, sc)
		},
	}
	pf = a.outputFlags(cmd)
	return cmd
}

func printHistory(out io.Writer, hs []gpupoolv1.TransitionRecord, wide bool, sc screen) error {
	tw := table(out)
	fmt.Fprint(tw, "  STARTED\tTOOK\tFROM\tTO\tWHY\tRESULT\tSLOWEST WORKER")
	if wide {
		fmt.Fprint(tw, "\tID\tMESSAGE")
	}
	fmt.Fprintln(tw)
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s", sc.at(h.StartTime.Time), took(h.EndTime.Sub(h.StartTime.Time)),
			or(withCount(h.From, h.FromCount), "(none)"), withCount(h.To, h.Count), or(string(h.Reason), "-"), h.Result, or(h.SlowestWorker, "-"))
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s", h.ID, or(sc.text(h.Message), "-"))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// took writes a transition's duration to the second: most take minutes.
func took(d time.Duration) string {
	return d.Round(time.Second).String()
}
