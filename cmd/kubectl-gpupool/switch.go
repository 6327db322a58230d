package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/requests"
)

type switchOptions struct {
	duration time.Duration
	until    string
	reason   string
	yes      bool
	// force is --force: switch to a layout status.plan says cannot be reached.
	force bool
	// wait and timeout are --wait and --timeout: wait until the layout is reached.
	wait    bool
	timeout time.Duration
	// inSpec is --in-spec: set spec.override instead of creating a request.
	inSpec bool
}

func (a *app) switchCommand() *cobra.Command {
	var o switchOptions
	cmd := &cobra.Command{
		Use:   "switch NAME LAYOUT",
		Short: "Switch the pool to a layout now, for a while (a GPUPoolRequest, or spec.override with --in-spec)",
		Long: `Switch the pool to a layout now, regardless of the schedule, by creating a
GPUPoolRequest: an object of its own, so that a GitOps tool syncing the pool's manifest
does not revert it (docs/gitops.md). It beats the pool's spec.override and ends at
--until, after --for, or after 8h; 'kubectl gpupool resume NAME' ends it sooner.
With --in-spec it sets spec.override instead, which without --for or --until stays until
'kubectl gpupool resume NAME --in-spec'. It shows what changes and asks first, unless --yes.`,
		Example: `  kubectl gpupool switch daynight night --for 2h --reason "driver update"
  kubectl gpupool switch daynight day --until 2026-12-01T18:00:00+01:00 --yes`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.switchTo(cmd.Context(), args[0], args[1], o)
		},
	}
	cmd.Flags().DurationVar(&o.duration, "for", 0, "how long the switch lasts, such as 2h (a request: 8h by default)")
	cmd.Flags().StringVar(&o.until, "until", "", "when the switch ends: "+timeFormats)
	cmd.Flags().BoolVar(&o.inSpec, "in-spec", false, inSpecFlag)
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, shown in status and events")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&o.force, "force", false, "set the override even when gpupool's plan says the layout cannot be reached")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the layout is active and Ready for the new spec; fail if the pool stalls, is paused or --timeout passes")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Minute, "with --wait: how long to wait")
	cmd.MarkFlagsMutuallyExclusive("for", "until")
	return cmd
}

// waitFor waits until the pool reaches layout (waitTarget), for at most timeout, and
// says how it ended; on a timeout it says where the pool was.
func (a *app) waitFor(ctx context.Context, name, layout string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fmt.Fprintf(a.streams.Out, "pool %s: waiting up to %s for layout %s\n", name, timeout, layout)
	var last *gpupoolv1.GPUPoolProfile
	err := a.watchPool(ctx, name, func(p *gpupoolv1.GPUPoolProfile) (bool, error) {
		last = p
		return waitTarget(p, layout)
	})
	switch {
	case err == nil:
		_, err = fmt.Fprintf(a.streams.Out, "pool %s: layout %s is active and Ready\n", name, layout)
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pool %s: layout %s not reached within %s: %s", name, layout, timeout, whereIs(last))
	}
	return err
}

// whereIs says where a pool was when a wait gave up.
func whereIs(p *gpupoolv1.GPUPoolProfile) string {
	if p == nil {
		return "the pool was not read"
	}
	st := &p.Status
	where := fmt.Sprintf("layout %s active, phase %s, workers settled %s", or(st.ActiveLayout, "(none)"), or(string(st.Phase), "-"), or(st.Progress, "-"))
	if st.ObservedGeneration != p.Generation {
		return where + fmt.Sprintf("; gpupool has not acted on spec generation %d yet (observed %d)", p.Generation, st.ObservedGeneration)
	}
	if c := meta.FindStatusCondition(st.Conditions, gpupoolv1.ConditionReady); c != nil {
		where += fmt.Sprintf("; Ready=%s (%s): %s", c.Status, c.Reason, c.Message)
	}
	return where
}

func (a *app) switchTo(ctx context.Context, name, layout string, o switchOptions) error {
	if o.duration < 0 {
		return errors.New("--for must be positive")
	}
	p, c, err := a.get(ctx, name)
	if err != nil {
		return err
	}
	// --until's wall-clock time is read in the zone the screen shows.
	sc, err := a.screenFor(&p.Spec)
	if err != nil {
		return err
	}
	now := sc.now
	override := &gpupoolv1.Override{Layout: layout, Reason: o.reason}
	switch {
	case o.duration > 0:
		override.Until = &metav1.Time{Time: now.Add(o.duration).Truncate(time.Second)}
	case o.until != "":
		t, err := parseTime("--until", o.until, sc.loc)
		if err != nil {
			return err
		}
		if !t.After(now) {
			return fmt.Errorf("--until %s is in the past", o.until)
		}
		override.Until = &metav1.Time{Time: t}
	}
	if layoutOf(&p.Spec, layout) == nil {
		return fmt.Errorf("pool %s has no layout %q; it has %s", name, layout, strings.Join(layoutNames(&p.Spec), ", "))
	}
	var live requests.Result
	if !o.inSpec {
		if live, err = poolRequests(ctx, c, p, now); err != nil {
			return err
		}
		override.Until = requestUntil(now, o.duration, override.Until)
	}
	spec := p.Spec.DeepCopy()
	spec.Override = override
	d, err := plan.Desired(spec, now)
	if err != nil {
		return err
	}
	out := a.streams.Out
	fmt.Fprintf(out, "pool %s: layout %s now", name, or(p.Status.ActiveLayout, "(none yet)"))
	switch {
	case live.Switch != nil:
		fmt.Fprintf(out, ", request %s to %s in force (superseded)", live.Switch.Name, live.Switch.Spec.Layout)
	case p.Spec.Override != nil && o.inSpec:
		fmt.Fprintf(out, ", override to %s in force (replaced)", p.Spec.Override.Layout)
	case p.Spec.Override != nil:
		fmt.Fprintf(out, ", spec.override to %s (set aside while the request lasts)", p.Spec.Override.Layout)
	}
	fmt.Fprintf(out, "\nwill want %s (%s)\n", d.Layout, sc.text(d.Message))
	if d.Next != nil {
		fmt.Fprintf(out, "then %s from %s\n", d.Next.Layout, sc.at(d.Next.At))
	}
	printChanges(out, p, layout, sc)
	if live.Paused() {
		fmt.Fprintf(out, "note: request %s pauses the pool: nothing changes until kubectl gpupool unpause %s\n", live.Pausing[0].Name, p.Name)
	}
	if err := checkReachable(out, p, layout, o.force); err != nil {
		return err
	}
	question := "Create the request?"
	if o.inSpec {
		question = "Set the override?"
	}
	if !o.yes && !confirm(a.streams.In, out, question) {
		return errDeclined("not confirmed: nothing changed (answer y at the prompt, or pass --yes to skip it)")
	}
	done := "override set"
	if o.inSpec {
		if err := patchSpec(ctx, c, p, map[string]any{"override": overridePatch(override)}); err != nil {
			return err
		}
	} else {
		q, err := createRequest(ctx, c, name, gpupoolv1.GPUPoolRequestSpec{Action: gpupoolv1.RequestSwitch, Layout: layout, Until: explicitUntil(override.Until, o.until), Duration: lasting(o.duration, o.until), Reason: o.reason})
		if err != nil {
			return err
		}
		done = "request " + q.Name + " created"
	}
	if o.wait {
		fmt.Fprintf(out, "pool %s: %s\n", name, done)
		return a.waitFor(ctx, name, layout, o.timeout)
	}
	_, err = fmt.Fprintf(out, "pool %s: %s; follow it with kubectl gpupool status %s -w\n", name, done, name)
	return err
}

// checkReachable refuses, unless force, a layout the operator's published plan says
// cannot be reached (status.plan for that layout, of the spec shown, with problems):
// the override would only stall the pool. It notes a paused pool.
func checkReachable(out io.Writer, p *gpupoolv1.GPUPoolProfile, layout string, force bool) error {
	if p.Spec.Paused {
		fmt.Fprintf(out, "note: the pool is paused: nothing changes until kubectl gpupool unpause %s\n", p.Name)
	}
	pv := p.Status.Plan
	if pv == nil || pv.Layout != layout || len(pv.Problems) == 0 || pv.Generation != p.Generation {
		return nil
	}
	if force {
		fmt.Fprintf(out, "note: --force: gpupool planned that layout %s cannot be reached\n", layout)
		return nil
	}
	return fmt.Errorf("pool %s: gpupool planned that layout %s cannot be reached (%s): nothing changed; fix that first, or pass --force to set the override anyway",
		p.Name, layout, strings.Join(pv.Problems, "; "))
}

// printChanges says which VMs start, stop or change profile, from the spec's layouts,
// and the operator's plan when it published one for that layout. The full plan is
// made by the operator once the override is set (kubectl gpupool plan NAME).
func printChanges(out io.Writer, p *gpupoolv1.GPUPoolProfile, layout string, sc screen) {
	from := layoutOf(&p.Spec, p.Status.ActiveLayout)
	to := layoutOf(&p.Spec, layout)
	switch {
	case to.Convert != nil:
		c := to.Convert
		fmt.Fprintf(out, "layout %s: %s of layout %s converted to %s; gpupool chooses which at least cost on the state it observes (kubectl gpupool plan %s --live --layout %s shows the choice)\n",
			layout, count(int(c.Count), "GPU"), c.Base, c.Profile, p.Name, layout)
	case to.Select != nil || (from != nil && from.Select != nil):
		desc := fmt.Sprintf("%d workers", len(to.Workers))
		if to.Select != nil {
			desc = selection(to.Select)
		}
		fmt.Fprintf(out, "layout %s: %s; gpupool finds the selected VMs on every pass (kubectl gpupool plan %s --live --layout %s shows them)\n",
			layout, desc, p.Name, layout)
	case from != nil && from.Convert != nil:
		fmt.Fprintf(out, "layout %s: %d workers; the GPUs layout %s converted go back\n", layout, len(to.Workers), from.Name)
	case from == nil || from.Name == to.Name:
		fmt.Fprintf(out, "layout %s: %d workers\n", layout, len(to.Workers))
	default:
		was := map[string]string{}
		for _, w := range from.Workers {
			was[w.VM] = w.Profile
		}
		var starts, changes, parks []string
		for _, w := range to.Workers {
			switch prof, ok := was[w.VM]; {
			case !ok:
				starts = append(starts, w.VM+" ("+w.Profile+")")
			case prof != w.Profile:
				changes = append(changes, w.VM+" ("+prof+" -> "+w.Profile+")")
			}
			delete(was, w.VM)
		}
		for vm := range was {
			parks = append(parks, vm)
		}
		slices.Sort(parks)
		for _, l := range []struct {
			what string
			vms  []string
		}{{"parked", parks}, {"started", starts}, {"reconfigured", changes}} {
			if len(l.vms) > 0 {
				fmt.Fprintf(out, "  %s: %s\n", l.what, strings.Join(l.vms, ", "))
			}
		}
	}
	if pv := p.Status.Plan; pv != nil && pv.Layout == layout && pv.Generation == p.Generation {
		fmt.Fprintf(out, "gpupool planned these steps for layout %s on the state it last observed:\n", layout)
		_ = printSteps(out, p.Name, pv, sc)
	}
}

// confirm asks a yes/no question on out and reads the answer from in.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N]: ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

func layoutOf(spec *gpupoolv1.GPUPoolProfileSpec, name string) *gpupoolv1.Layout {
	for i := range spec.Layouts {
		if spec.Layouts[i].Name == name {
			return &spec.Layouts[i]
		}
	}
	return nil
}

func layoutNames(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	var out []string
	for _, l := range spec.Layouts {
		out = append(out, l.Name)
	}
	return out
}

// overridePatch is the merge patch of a new override: it replaces the one in force as a
// whole, so a field this switch does not set (no --reason, no --for or --until) is
// removed, not kept from the previous override.
func overridePatch(o *gpupoolv1.Override) map[string]any {
	m := map[string]any{"layout": o.Layout, "reason": nil, "until": nil}
	if o.Reason != "" {
		m["reason"] = o.Reason
	}
	if o.Until != nil {
		m["until"] = o.Until
	}
	return m
}

// selection says what a select layout selects, such as "grid_p100-4q VMs of
// MachineDeployment capi/gpu-day".
func selection(sel *gpupoolv1.Selection) string {
	var from []string
	if sel.NamePattern != "" {
		from = append(from, "named "+sel.NamePattern)
	}
	if sel.Folder != "" {
		from = append(from, "in folder "+sel.Folder)
	}
	if t := sel.Tag; t != nil {
		from = append(from, "tagged "+t.Category+"/"+t.Name)
	}
	if md := sel.MachineDeployment; md != nil {
		from = append(from, "of MachineDeployment "+md.Namespace+"/"+md.Name)
	}
	profile := sel.Profile
	if sel.VGPUs > 1 {
		profile = fmt.Sprintf("%dx %s", sel.VGPUs, sel.Profile)
	}
	return "the " + profile + " VMs " + strings.Join(from, ", ")
}
