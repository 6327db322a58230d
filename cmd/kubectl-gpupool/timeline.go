package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// maxTimelineEntries bounds a timeline whatever the schedule (a window restarting every
// minute over many days).
const maxTimelineEntries = 2000

// timelineEntry is a span during which one layout is wanted.
type timelineEntry struct {
	From   time.Time  `json:"from"`
	To     *time.Time `json:"to,omitempty"`
	Layout string     `json:"layout"`
	// GPUs is, for a layout by count, how many GPUs it converts: "4", or "1-4 by
	// demand" when countFromDemand sizes it.
	GPUs   string                  `json:"gpus,omitempty"`
	Reason gpupoolv1.DesiredReason `json:"reason"`
	Why    string                  `json:"why"`
}

type timelineOptions struct {
	file string
	days int
	from string
}

func (a *app) timelineCommand() *cobra.Command {
	var pf *genericclioptions.PrintFlags
	var o timelineOptions
	cmd := &cobra.Command{
		Use:   "timeline (NAME | -f FILE)",
		Short: "Show which layout is wanted when over the next days, DST shifts included",
		Long: `Show which layout is wanted when over the next days, computed by the function the
operator decides with (plan.Desired), stepping from one change to the next: windows,
lead time, override expiry and daylight-saving shifts as gpupool will apply them. Times
are switch starts (the window boundary minus schedule.leadTime). With -f it reads a pool
from a file, so a schedule can be checked before it is applied.`,
		Example: `  kubectl gpupool timeline daynight --days 3 --tz Europe/Berlin
  kubectl gpupool timeline -f pool.yaml --from 2026-03-27T00:00:00Z --days 4`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, name, err := a.timelineSpec(cmd.Context(), args, o.file)
			if err != nil {
				return err
			}
			sc, err := a.screenFor(spec)
			if err != nil {
				return err
			}
			start := sc.now
			if o.from != "" {
				if start, err = parseTime("--from", o.from, sc.loc); err != nil {
					return err
				}
			}
			if o.days < 1 {
				return errors.New("--days must be at least 1")
			}
			entries, err := timeline(spec, start, start.Add(time.Duration(o.days)*24*time.Hour))
			if err != nil {
				return err
			}
			return a.printTimeline(pf, spec, name, sc, start, o.days, entries)
		},
	}
	pf = a.outputFlags(cmd)
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "read the pool from this YAML or JSON file instead of the cluster")
	cmd.Flags().IntVar(&o.days, "days", 7, "how many days to show")
	cmd.Flags().StringVar(&o.from, "from", "", "start at this time instead of now: "+timeFormats)
	return cmd
}

// printTimeline prints the entries as data (times in the screen's zone) or as a table
// of switch starts, with a note when spec.demand may depart from the schedule.
func (a *app) printTimeline(pf *genericclioptions.PrintFlags, spec *gpupoolv1.GPUPoolProfileSpec, name string, sc screen, start time.Time, days int, entries []timelineEntry) error {
	ok, wide := human(pf)
	if !ok {
		for i := range entries {
			entries[i].From = entries[i].From.In(sc.loc)
			if t := entries[i].To; t != nil {
				*t = t.In(sc.loc)
			}
			entries[i].Why = rfc3339In(entries[i].Why, sc.loc)
		}
		return printData(pf, entries, a.streams.Out)
	}
	unit := "days"
	if days == 1 {
		unit = "day"
	}
	fmt.Fprintf(a.streams.Out, "pool %s, %d %s from %s, times in %s:\n", name, days, unit, sc.at(start), sc.zone())
	tw := table(a.streams.Out)
	fmt.Fprint(tw, "  FROM\tUNTIL\tLAYOUT\tWHY")
	fmt.Fprintln(tw)
	for _, e := range entries {
		until := "(beyond)"
		if e.To != nil {
			until = sc.at(*e.To)
		}
		why := string(e.Reason)
		if wide {
			why = sc.text(e.Why)
		}
		layout := e.Layout
		if e.GPUs != "" {
			layout += " (" + e.GPUs + " GPUs)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", sc.at(e.From), until, layout, why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if spec.Demand != nil {
		fmt.Fprintln(a.streams.Out, "This is the schedule; spec.demand may bring a layout in earlier or skip one, within its limits (kubectl gpupool status shows what demand decided).")
	}
	return nil
}

// timelineSpec is the spec to read: from the file, or from the cluster.
func (a *app) timelineSpec(ctx context.Context, args []string, file string) (*gpupoolv1.GPUPoolProfileSpec, string, error) {
	switch {
	case file != "" && len(args) > 0:
		return nil, "", errors.New("give a pool NAME or -f FILE, not both")
	case file != "":
		p, err := readPool(file)
		if err != nil {
			return nil, "", err
		}
		return &p.Spec, or(p.Name, file), nil
	case len(args) == 1:
		p, _, err := a.get(ctx, args[0])
		if err != nil {
			return nil, "", err
		}
		return &p.Spec, p.Name, nil
	}
	return nil, "", errors.New("give a pool NAME or -f FILE")
}

// readPool reads the first GPUPoolProfile of a YAML or JSON file, which may hold other
// objects too (a sample with its Secret).
func readPool(file string) (*gpupoolv1.GPUPoolProfile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no GPUPoolProfile in it", file)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind != "GPUPoolProfile" {
			continue
		}
		var p gpupoolv1.GPUPoolProfile
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return &p, nil
	}
}

// timeline steps plan.Desired from boundary to boundary (Decision.Next) between from and
// to: the same decisions, at the same instants, as the operator's status.nextTransition.
func timeline(spec *gpupoolv1.GPUPoolProfileSpec, from, to time.Time) ([]timelineEntry, error) {
	var out []timelineEntry
	at := from
	for len(out) < maxTimelineEntries {
		d, err := plan.Desired(spec, at)
		if err != nil {
			return nil, err
		}
		e := timelineEntry{From: at, Layout: d.Layout, GPUs: convertedGPUs(spec, d.Layout), Reason: d.Reason, Why: d.Message}
		if d.Next != nil {
			next := d.Next.At
			e.To = &next
		}
		out = append(out, e)
		// Desired looks 35 days ahead; past that, or past the end, the timeline stops.
		if d.Next == nil || !d.Next.At.Before(to) || !d.Next.At.After(at) {
			break
		}
		at = d.Next.At
	}
	return out, nil
}

// convertedGPUs is how many GPUs a layout by count converts while the schedule wants
// it: its convert.count, or the range countFromDemand sizes it within; "" for a layout
// that lists its workers.
func convertedGPUs(spec *gpupoolv1.GPUPoolProfileSpec, layout string) string {
	for _, l := range spec.Layouts {
		if l.Name != layout || l.Convert == nil {
			continue
		}
		if spec.Demand != nil {
			for _, ru := range spec.Demand.Rules {
				if cf := ru.CountFromDemand; cf != nil && ru.Layout == layout && ru.Action == gpupoolv1.DemandBringIn {
					return fmt.Sprintf("%d-%d by demand", max(cf.Min, 1), cf.Max)
				}
			}
		}
		return fmt.Sprint(l.Convert.Count)
	}
	return ""
}
