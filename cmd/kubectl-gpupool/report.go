package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// reportFlags are report's options.
type reportFlags struct {
	days     int
	from, to string
	svg      string
}

func (a *app) reportCommand() *cobra.Command {
	var pf *genericclioptions.PrintFlags
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report NAME",
		Short: "Show the pool's GPU-hours by day, layout and tenant, and draw a timeline (--svg)",
		Long: `Show the pool's GPU-hours from its GPUPoolUsage objects, which the manager keeps per day
(spec.accounting): what the pool offered, what GPU pods were allocated (per tenant), what
sat idle, and what was offline while switching, with recommendations where the data
supports one. A GPU-hour is one physical GPU for an hour; a vGPU counts its frame buffer
over its GPU's (a grid_p100-4q on a 16 GB P100 is 0.25).

Days are the pool's (schedule.timeZone). -o csv writes one line per day, layout, profile
and tenant; -o json or yaml the whole report; --svg FILE a picture of the period's hours
per layout (- for standard output).`,
		Example: `  kubectl gpupool report lab
  kubectl gpupool report lab --days 30 -o csv > lab.csv
  kubectl gpupool report lab --from 2026-11-23 --to 2026-11-29 --svg week.svg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.report(cmd, args[0], pf, f)
		},
	}
	cmd.Flags().IntVar(&f.days, "days", 7, "How many days to report, today (in the pool's zone) the last")
	cmd.Flags().StringVar(&f.from, "from", "", "First day to report, YYYY-MM-DD (with --to instead of --days)")
	cmd.Flags().StringVar(&f.to, "to", "", "Last day to report, YYYY-MM-DD (default: today)")
	cmd.Flags().StringVar(&f.svg, "svg", "", "Also draw the period's timeline into this SVG file (- for standard output, alone)")
	pf = a.outputFlags(cmd)
	if o := cmd.Flags().Lookup("output"); o != nil {
		o.Usage = "Output format: csv, json or yaml (default: tables)"
	}
	return cmd
}

func (a *app) report(cmd *cobra.Command, name string, pf *genericclioptions.PrintFlags, f reportFlags) error {
	p, c, err := a.get(cmd.Context(), name)
	if err != nil {
		return err
	}
	from, to, err := reportDays(a.now(), accountingZone(&p.Spec), f)
	if err != nil {
		return err
	}
	var list gpupoolv1.GPUPoolUsageList
	if err := c.List(cmd.Context(), &list, client.MatchingLabels{gpupoolv1.LabelPool: p.Name}); err != nil {
		return fmt.Errorf("reading the pool's GPUPoolUsage: %w", err)
	}
	r := accounting.Summarize(p.Name, list.Items, from, to)
	out := a.streams.Out
	if f.svg != "" {
		if f.svg == "-" {
			return accounting.WriteSVG(out, r)
		}
		if err := writeFile(f.svg, func(w io.Writer) error { return accounting.WriteSVG(w, r) }); err != nil {
			return err
		}
	}
	o := ""
	if pf.OutputFormat != nil {
		o = *pf.OutputFormat
	}
	switch o {
	case "":
		if err := accounting.WriteTable(out, r); err != nil {
			return err
		}
	case "csv":
		if err := accounting.WriteCSV(out, p.Name, list.Items, from, to); err != nil {
			return err
		}
	case "json", "yaml":
		if err := printData(pf, r, out); err != nil {
			return err
		}
	default:
		return fmt.Errorf("output format %q is not supported by report: use csv, json or yaml, or leave -o out for tables", o)
	}
	if f.svg != "" && o == "" {
		_, err = fmt.Fprintf(out, "\ntimeline written to %s\n", f.svg)
	}
	return err
}

// reportDays is the period asked for: --from/--to, else the --days up to today in zone.
func reportDays(now time.Time, zone *time.Location, f reportFlags) (string, string, error) {
	to := now.In(zone).Format(time.DateOnly)
	if f.to != "" {
		if _, err := time.Parse(time.DateOnly, f.to); err != nil {
			return "", "", fmt.Errorf("--to %q is not a day such as %s", f.to, to)
		}
		to = f.to
	}
	if f.from != "" {
		if _, err := time.Parse(time.DateOnly, f.from); err != nil {
			return "", "", fmt.Errorf("--from %q is not a day such as %s", f.from, to)
		}
		if f.from > to {
			return "", "", fmt.Errorf("--from %s is after --to %s", f.from, to)
		}
		return f.from, to, nil
	}
	if f.days < 1 {
		return "", "", fmt.Errorf("--days must be at least 1, not %d", f.days)
	}
	last, _ := time.Parse(time.DateOnly, to)
	return last.AddDate(0, 0, -(f.days - 1)).Format(time.DateOnly), to, nil
}

// accountingZone is the zone the manager keeps the pool's days in: its schedule's
// (poolZone).
func accountingZone(spec *gpupoolv1.GPUPoolProfileSpec) *time.Location {
	return accounting.Zone(poolZone(spec))
}

// writeFile writes a file whole or not at all: into a temporary file beside it, renamed
// over it once written.
func writeFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gpupool-report-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil { // a picture to share, not a secret
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
