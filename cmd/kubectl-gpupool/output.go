package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

// outputFlags adds kubectl's -o flag, with "wide" for the human tables on top of the
// cli-runtime printers (json, yaml, name, jsonpath, go-template).
func (a *app) outputFlags(cmd *cobra.Command) *genericclioptions.PrintFlags {
	pf := genericclioptions.NewPrintFlags("").WithTypeSetter(a.scheme)
	pf.AddFlags(cmd)
	if f := cmd.Flags().Lookup("output"); f != nil {
		f.Usage = "Output format: wide for more columns, or one of (" + strings.Join(pf.AllowedFormats(), ", ") + ")"
	}
	return pf
}

// human tells whether -o asks for the human view, and whether wide.
func human(pf *genericclioptions.PrintFlags) (isHuman, wide bool) {
	o := ""
	if pf.OutputFormat != nil {
		o = *pf.OutputFormat
	}
	return o == "" || o == "wide", o == "wide"
}

// printObject prints an API object with the printer -o names.
func printObject(pf *genericclioptions.PrintFlags, obj runtime.Object, out io.Writer) error {
	p, err := pf.ToPrinter()
	if err != nil {
		return err
	}
	return p.PrintObj(obj, out)
}

// printData prints what is not an API object (a timeline) as JSON or YAML.
func printData(pf *genericclioptions.PrintFlags, v any, out io.Writer) error {
	switch o := *pf.OutputFormat; o {
	case "json":
		data, err := json.MarshalIndent(v, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(data)
		return err
	default:
		return fmt.Errorf("output format %q is not supported here: use wide, json or yaml", o)
	}
}

func table(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

// when shows a time in the user's zone, with the zone's abbreviation so that a DST shift
// is visible.
func when(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("Mon 2006-01-02 15:04 MST")
}

// relative says how far a time is from now, such as "in 8h50m" or "2h ago".
// ago writes how long ago something happened that another machine stamped (the
// operator, the API server): a stamp ahead of this machine's clock, which only a clock
// offset can make, reads as now rather than as a time to come.
func ago(t, now time.Time) string {
	if t.After(now) {
		t = now
	}
	return relative(t, now)
}

func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Minute)
	switch {
	case d > 0:
		return "in " + short(d)
	case d < 0:
		return short(-d) + " ago"
	}
	return "now"
}

// short writes a duration to the minute, such as 8h50m, and from a day on to the hour,
// such as 1d2h: minutes do not matter days away.
func short(d time.Duration) string {
	d = d.Round(time.Minute)
	if d >= 24*time.Hour {
		d = d.Round(time.Hour)
	}
	if d < time.Minute {
		return "<1m"
	}
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.unit)
			d -= n * u.d
		}
	}
	return b.String()
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
