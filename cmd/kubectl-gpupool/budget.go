package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// resetBudgetCommand resets demand's switch budget: it sets the pool's
// gpupool.dev/reset-demand-budget annotation to a new value, and gpupool then counts
// only the switches that start from the moment it saw the change (on its own clock).
func (a *app) resetBudgetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reset-budget NAME",
		Short: "Reset demand's switch budget (spec.demand.maxSwitchesPerDay): earlier switches no longer count",
		Example: `  kubectl gpupool reset-budget daynight
  # the same without the plugin (where Flux applies the pool, its next apply removes
  # kubectl's annotation; the plugin's stays: docs/gitops.md):
  kubectl annotate gpp daynight gpupool.dev/reset-demand-budget="$(date -u +%FT%TZ)" --overwrite`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, c, err := a.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if p.Spec.Demand == nil {
				return fmt.Errorf("pool %s has no spec.demand: it has no switch budget", p.Name)
			}
			// The value only has to differ from the last one; gpupool never reads it as
			// a time (it was stamped by this machine's clock).
			token := time.Now().UTC().Format(time.RFC3339Nano)
			data, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"annotations": map[string]any{gpupoolv1.AnnotationResetDemandBudget: token}}})
			if err != nil {
				return err
			}
			if err := c.Patch(cmd.Context(), p, client.RawPatch(types.MergePatchType, data)); err != nil {
				return fmt.Errorf("patching pool %s: %w", p.Name, err)
			}
			used := "unknown"
			if d := p.Status.Demand; d != nil && d.Budget != nil {
				used = fmt.Sprintf("%d of %d", d.Budget.Used, d.Budget.Max)
			}
			_, err = fmt.Fprintf(a.streams.Out, "pool %s: switch budget reset (was %s used); the switches before now no longer count\n", p.Name, used)
			return err
		},
	}
}
