package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
	"github.com/gpupool/gpupool/internal/webhook"
)

// simulateFlags are simulate's options.
type simulateFlags struct {
	candidates []string
	sweep      string
	step       time.Duration
	switchTime time.Duration
	output     string
}

// recordedTolerance is how far a replay's switch may start from the recorded one and
// still count as the same (the live row's first divergence).
const recordedTolerance = 30 * time.Second

func (a *app) simulateCommand() *cobra.Command {
	var f simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate TRACE",
		Short: "Replay a recorded trace under the pool's spec and under candidates, offline",
		Long: `Replay a trace (kubectl gpupool record) through gpupool's own decision (the schedule and
spec.demand, as the operator decides them) under the spec it was recorded with ("live"),
under each --candidate (a GPUPoolProfile manifest) and under a sweep of one field's values
(--sweep, applied to the last candidate, or to the live spec), and print a table side by
side. It needs no cluster and no vCenter, and gives the same table for the same trace and
specs.

Columns: GPU-hours batch pods (Jobs' pods that ran to their end) waited, their wait p50 and
p95, idle GPU-hours (physical GPUs no pod used, switching included), GPU-hours the other
pods (services) waited, switches, evictions, and where the row first departs from the
live replay (for live: from the switches recorded, each start within 30 s).

Switches take as long as the recorded ones (the median per target layout; --switch-time
to fix it). Pods run where the active layout has room; the work recorded is replayed,
not the controllers that made it: a replica evicted in the recording is still replaced
when it was. docs/simulate.md.`,
		Example: `  kubectl gpupool simulate lab-week.jsonl
  kubectl gpupool simulate lab-week.jsonl --candidate lab-demand.yaml
  kubectl gpupool simulate lab-week.jsonl --candidate lab-demand.yaml --sweep demand.cooldown=5m,15m,30m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.simulate(args[0], f)
		},
	}
	cmd.Flags().StringArrayVar(&f.candidates, "candidate", nil, "A GPUPoolProfile manifest to replay the trace under (repeatable)")
	cmd.Flags().StringVar(&f.sweep, "sweep", "", "FIELD=V1,V2,...: a spec field (such as demand.cooldown or demand.rules[0].for) set to each value in turn (separate them with ; when they hold commas)")
	cmd.Flags().DurationVar(&f.step, "step", replay.DefaultStep, "How often the replay decides")
	cmd.Flags().DurationVar(&f.switchTime, "switch-time", 0, "How long every switch takes (default: learned from the trace's switches)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "Output format: json (default: a table)")
	return cmd
}

// simRow is one policy's replay.
type simRow struct {
	Name   string                       `json:"name"`
	Spec   gpupoolv1.GPUPoolProfileSpec `json:"-"`
	Result *replay.Result               `json:"result"`
	// Divergence says where the row first departs from its reference.
	Divergence string `json:"firstDivergence"`
}

func (a *app) simulate(path string, f simulateFlags) error {
	if f.step <= 0 {
		return fmt.Errorf("--step %s: give a positive step such as 10s", f.step)
	}
	if f.switchTime < 0 {
		return fmt.Errorf("--switch-time %s: give a positive duration such as 5m, or leave it out to learn it from the trace", f.switchTime)
	}
	if f.output != "" && f.output != "json" {
		return fmt.Errorf("output format %q is not supported by simulate: use json, or leave -o out for a table", f.output)
	}
	tr, err := readTrace(path, a.streams.In)
	if err != nil {
		return err
	}
	rows := []simRow{{Name: "live", Spec: tr.Header.Spec}}
	for _, c := range f.candidates {
		spec, err := readCandidate(c)
		if err != nil {
			return err
		}
		rows = append(rows, simRow{Name: filepath.Base(c), Spec: *spec})
	}
	if f.sweep != "" {
		swept, err := sweep(rows[len(rows)-1], f.sweep)
		if err != nil {
			return err
		}
		rows = append(rows, swept...)
	}
	opt := replay.Options{Step: f.step, SwitchTime: f.switchTime}
	sc, err := a.screenFor(&tr.Header.Spec)
	if err != nil {
		return err
	}
	zone := sc.loc
	for i := range rows {
		if rows[i].Result, err = replay.Run(tr, &rows[i].Spec, opt); err != nil {
			return fmt.Errorf("%s: %w", rows[i].Name, err)
		}
		if i == 0 {
			rows[i].Divergence = divergence(rows[i].Result.Switches, replay.Recorded(tr), recordedTolerance, "recorded", zone)
		} else {
			rows[i].Divergence = divergence(rows[i].Result.Switches, rows[0].Result.Switches, 0, "live", zone)
		}
	}
	if f.output == "json" {
		enc := json.NewEncoder(a.streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"pool": tr.Header.Pool, "start": tr.Header.Start, "end": tr.Header.End, "rows": rows})
	}
	return writeSimTable(a.streams.Out, tr, rows, zone, f.switchTime > 0)
}

func readTrace(path string, stdin io.Reader) (*trace.Trace, error) {
	if path == "-" {
		return trace.Read(stdin)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr, err := trace.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

// readCandidate reads a GPUPoolProfile manifest and checks its spec as the admission
// webhook would (the CRD's own rules apply when it is applied).
func readCandidate(path string) (*gpupoolv1.GPUPoolProfileSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p gpupoolv1.GPUPoolProfile
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("--candidate %s: %w", path, err)
	}
	if p.Kind != "GPUPoolProfile" {
		return nil, fmt.Errorf("--candidate %s: kind %q; give a GPUPoolProfile manifest (apiVersion %s)", path, p.Kind, gpupoolv1.GroupVersion)
	}
	if errs := webhook.ValidateSpec(&p.Spec); len(errs) > 0 {
		return nil, fmt.Errorf("--candidate %s: %w", path, errs.ToAggregate())
	}
	return &p.Spec, nil
}

// sweep is base with one field set to each value of "FIELD=V1,V2,...", each checked.
func sweep(base simRow, arg string) ([]simRow, error) {
	path, list, ok := strings.Cut(arg, "=")
	if !ok || path == "" || list == "" {
		return nil, fmt.Errorf("--sweep %q: write FIELD=V1,V2,... such as demand.cooldown=5m,15m,30m", arg)
	}
	sep := ","
	if strings.Contains(list, ";") {
		sep = ";" // values with commas, such as cron's 0 20 * * 5,6
	}
	var out []simRow
	for _, v := range strings.Split(list, sep) {
		spec, err := setField(&base.Spec, path, strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("--sweep %s=%s: %w", path, v, err)
		}
		if errs := webhook.ValidateSpec(spec); len(errs) > 0 {
			return nil, fmt.Errorf("--sweep %s=%s: %w", path, v, errs.ToAggregate())
		}
		out = append(out, simRow{Name: fmt.Sprintf("%s %s=%s", base.Name, path, strings.TrimSpace(v)), Spec: *spec})
	}
	return out, nil
}

// setField is spec with the field at path (JSON names, dots, [i] for list items, such as
// demand.rules[0].for) set to value: JSON when it parses as such (numbers, true, false),
// a string otherwise (durations such as 15m).
func setField(spec *gpupoolv1.GPUPoolProfileSpec, path, value string) (*gpupoolv1.GPUPoolProfileSpec, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var v any = value
	var parsed any
	if json.Unmarshal([]byte(value), &parsed) == nil {
		v = parsed
	}
	if doc, err = setIn(doc, field.NewPath("spec"), strings.Split(path, "."), v); err != nil {
		return nil, err
	}
	if data, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	out := &gpupoolv1.GPUPoolProfileSpec{}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// setIn sets the value at the path's segments under doc, making the objects on the way.
func setIn(doc any, at *field.Path, segs []string, v any) (any, error) {
	if len(segs) == 0 {
		return v, nil
	}
	name, idx, hasIdx, err := segment(segs[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", at, err)
	}
	obj, _ := doc.(map[string]any)
	if obj == nil {
		if doc != nil {
			return nil, fmt.Errorf("%s is not an object", at)
		}
		obj = map[string]any{}
	}
	child := at.Child(name)
	if !hasIdx {
		var err error
		obj[name], err = setIn(obj[name], child, segs[1:], v)
		return obj, err
	}
	list, _ := obj[name].([]any)
	if idx >= len(list) {
		return nil, fmt.Errorf("%s has %d items: no index %d", child, len(list), idx)
	}
	if list[idx], err = setIn(list[idx], child.Index(idx), segs[1:], v); err != nil {
		return nil, err
	}
	return obj, nil
}

// segment splits "rules[0]" into rules and 0.
func segment(s string) (name string, idx int, hasIdx bool, err error) {
	name, rest, hasIdx := strings.Cut(s, "[")
	if name == "" {
		return "", 0, false, fmt.Errorf("empty field name in %q", s)
	}
	if !hasIdx {
		return name, 0, false, nil
	}
	if _, err := fmt.Sscanf(rest, "%d]", &idx); err != nil || idx < 0 || !strings.HasSuffix(rest, "]") {
		return "", 0, false, fmt.Errorf("%q: write an index such as %s[0]", s, name)
	}
	return name, idx, true, nil
}

// divergence says where got first departs from ref (within tol), in zone.
func divergence(got, ref []replay.Switch, tol time.Duration, refName string, zone *time.Location) string {
	at, g, r, ok := replay.Divergence(got, ref, tol)
	if !ok {
		return "none"
	}
	say := func(s *replay.Switch) string {
		if s == nil {
			return "no switch"
		}
		return fmt.Sprintf("to %s at %s", s.To, s.Start.In(zone).Format("Mon 15:04:05"))
	}
	return fmt.Sprintf("%s: %s (%s: %s)", at.In(zone).Format("Mon 01-02 15:04:05"), say(g), refName, say(r))
}

func writeSimTable(out io.Writer, tr *trace.Trace, rows []simRow, zone *time.Location, fixed bool) error {
	pods := 0
	for _, ev := range tr.Events {
		if ev.Kind == trace.Arrive {
			pods++
		}
	}
	fmt.Fprintf(out, "pool %s, %s to %s (%s): %d pods, %d switches recorded\n", tr.Header.Pool,
		tr.Header.Start.In(zone).Format("2006-01-02 15:04"), tr.Header.End.In(zone).Format("2006-01-02 15:04"), zone, pods, len(replay.Recorded(tr)))
	if tr.Header.Truncated {
		fmt.Fprintln(out, "note: the trace is truncated (the recorder's --max-pods): later pods are missing")
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tQUEUED GPU-H\tWAIT P50\tWAIT P95\tIDLE GPU-H\tSERVICES WAITED GPU-H\tSWITCHES\tEVICTIONS\tFIRST DIVERGENCE")
	for _, r := range rows {
		res := r.Result
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%.2f\t%.2f\t%d\t%d\t%s\n", r.Name, res.QueuedGPUHours, shortDur(res.P50Wait()), shortDur(res.P95Wait()),
			res.IdleGPUHours, res.UnservedGPUHours, len(res.Switches), res.Evictions, r.Divergence)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	how := "learned from the trace"
	if fixed {
		how = "--switch-time"
	}
	fmt.Fprintf(out, "switches take (%s): %s\n", how, switchTimes(rows[0].Result))
	return nil
}

func shortDur(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.Round(time.Second).String()
}

// roundDur shows a learned duration to the tenth of a second under a minute, else to
// the second.
func roundDur(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func switchTimes(r *replay.Result) string {
	var parts []string
	for l, d := range r.SwitchTimes {
		parts = append(parts, fmt.Sprintf("to %s %s", l, roundDur(d)))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
