package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/requests"
)

// resume, pause and unpause: by GPUPoolRequest, or with --in-spec on the pool's spec.

func (a *app) resumeCommand() *cobra.Command {
	var inSpec bool
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "End the switch: the schedule applies again (a GPUPoolRequest, or spec.override with --in-spec)",
		Long: `End the pool's switch requests with a Resume request: the schedule applies again, or
the pool's own spec.override when its spec has one (that is Git's: change it there, or
run this with --in-spec to remove it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.resume(cmd.Context(), args[0], inSpec)
		},
	}
	cmd.Flags().BoolVar(&inSpec, "in-spec", false, inSpecFlag)
	return cmd
}

func (a *app) resume(ctx context.Context, name string, inSpec bool) error {
	p, c, err := a.get(ctx, name)
	if err != nil {
		return err
	}
	sc, err := a.screenFor(&p.Spec)
	if err != nil {
		return err
	}
	out := a.streams.Out
	if inSpec {
		if p.Spec.Override == nil {
			_, err := fmt.Fprintf(out, "pool %s has no override\n", p.Name)
			return err
		}
		was := p.Spec.Override.Layout
		d, err := plan.Desired(specWithout(p), sc.now)
		if err != nil {
			return err
		}
		if err := patchSpec(ctx, c, p, map[string]any{"override": nil}); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "pool %s: override to %s removed; %s is wanted (%s)\n", p.Name, was, d.Layout, sc.text(d.Message))
		return err
	}
	live, err := poolRequests(ctx, c, p, sc.now)
	if err != nil {
		return err
	}
	if live.Switch == nil {
		if o := p.Spec.Override; o != nil {
			return fmt.Errorf("pool %s: its override to %s is in its spec (spec.override, kept in Git?): remove it there, or run kubectl gpupool resume %s --in-spec", p.Name, o.Layout, p.Name)
		}
		_, err := fmt.Fprintf(out, "pool %s has no override\n", p.Name)
		return err
	}
	d, err := plan.Desired(&p.Spec, sc.now)
	if err != nil {
		return err
	}
	q, err := createRequest(ctx, c, p.Name, gpupoolv1.GPUPoolRequestSpec{Action: gpupoolv1.RequestResume})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "pool %s: request %s ends the switch to %s (request %s); %s is wanted (%s)\n",
		p.Name, q.Name, live.Switch.Spec.Layout, live.Switch.Name, d.Layout, sc.text(d.Message))
	return err
}

func specWithout(p *gpupoolv1.GPUPoolProfile) *gpupoolv1.GPUPoolProfileSpec {
	s := p.Spec.DeepCopy()
	s.Override = nil
	return s
}

// pauseOptions are pause's and unpause's flags.
type pauseOptions struct {
	inSpec   bool
	duration time.Duration
	until    string
}

func (a *app) pauseCommand(pause bool) *cobra.Command {
	use, short := "pause NAME", "Pause the pool: gpupool changes nothing (no drain, no VM) until unpause or --for/--until"
	if !pause {
		use, short = "unpause NAME", "Unpause the pool: gpupool acts again"
	}
	var o pauseOptions
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
By default it creates a GPUPoolRequest (a pause lasts --for, until --until, or 8h), which
a GitOps sync of the pool's manifest does not revert; --in-spec writes spec.paused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pause(cmd.Context(), args[0], pause, o)
		},
	}
	cmd.Flags().BoolVar(&o.inSpec, "in-spec", false, inSpecFlag)
	if pause {
		cmd.Flags().DurationVar(&o.duration, "for", 0, "how long the pause lasts, such as 2h (8h by default; not with --in-spec)")
		cmd.Flags().StringVar(&o.until, "until", "", "when the pause ends: "+timeFormats)
		cmd.MarkFlagsMutuallyExclusive("for", "until")
	}
	return cmd
}

func (a *app) pause(ctx context.Context, name string, pause bool, o pauseOptions) error {
	p, c, err := a.get(ctx, name)
	if err != nil {
		return err
	}
	out := a.streams.Out
	if o.inSpec {
		if o.duration != 0 || o.until != "" {
			return errors.New("--for and --until are for a pause request: spec.paused has no end; leave out --in-spec")
		}
		if p.Spec.Paused == pause {
			_, err := fmt.Fprintf(out, "pool %s is already %s\n", p.Name, pausedWord(pause))
			return err
		}
		var v any // unpause removes the field, as it is omitted when false
		if pause {
			v = true
		}
		if err := patchSpec(ctx, c, p, map[string]any{"paused": v}); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "pool %s %s\n", p.Name, pausedWord(pause))
		return err
	}
	sc, err := a.screenFor(&p.Spec)
	if err != nil {
		return err
	}
	live, err := poolRequests(ctx, c, p, sc.now)
	if err != nil {
		return err
	}
	if pause {
		return a.pauseByRequest(ctx, c, p, live, sc, o)
	}
	if !live.Paused() {
		if p.Spec.Paused {
			return fmt.Errorf("pool %s: spec.paused is true (kept in Git?): change it there, or run kubectl gpupool unpause %s --in-spec", p.Name, p.Name)
		}
		_, err := fmt.Fprintf(out, "pool %s is already unpaused\n", p.Name)
		return err
	}
	q, err := createRequest(ctx, c, p.Name, gpupoolv1.GPUPoolRequestSpec{Action: gpupoolv1.RequestUnpause})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pool %s unpaused (request %s)\n", p.Name, q.Name)
	if p.Spec.Paused {
		_, err = fmt.Fprintf(out, "note: spec.paused is still true: the pool stays paused until it is changed (in Git, or kubectl gpupool unpause %s --in-spec)\n", p.Name)
	}
	return err
}

// pauseByRequest creates a Pause request, unless the pool is paused already.
func (a *app) pauseByRequest(ctx context.Context, c client.Client, p *gpupoolv1.GPUPoolProfile, live requests.Result, sc screen, o pauseOptions) error {
	out := a.streams.Out
	if p.Spec.Paused || live.Paused() {
		_, err := fmt.Fprintf(out, "pool %s is already paused\n", p.Name)
		return err
	}
	if o.duration < 0 {
		return errors.New("--for must be positive")
	}
	var until *metav1.Time
	if o.until != "" {
		t, err := parseTime("--until", o.until, sc.loc)
		if err != nil {
			return err
		}
		if !t.After(sc.now) {
			return fmt.Errorf("--until %s is in the past", o.until)
		}
		until = &metav1.Time{Time: t}
	}
	until = requestUntil(sc.now, o.duration, until)
	q, err := createRequest(ctx, c, p.Name, gpupoolv1.GPUPoolRequestSpec{Action: gpupoolv1.RequestPause, Until: explicitUntil(until, o.until), Duration: lasting(o.duration, o.until)})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "pool %s paused until about %s (request %s)\n", p.Name, sc.at(until.Time), q.Name)
	return err
}

func pausedWord(paused bool) string {
	if paused {
		return "paused"
	}
	return "unpaused"
}
