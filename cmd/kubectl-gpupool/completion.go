package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Shell completion. Cobra answers `kubectl-gpupool __complete ARGS...` with one candidate
// a line (name, a tab, a description) and a directive; kubectl (1.26 and later) asks the
// plugin through an executable named kubectl_complete-gpupool on PATH
// (hack/kubectl_complete-gpupool), so `kubectl gpupool switch <TAB>` offers the pools, then
// their layouts. Candidates come from the cluster with the user's own kubeconfig and flags
// (--kubeconfig, --context, ...); a failure offers nothing rather than files.

// completionTimeout bounds the API reads of one completion: a shell waits for it.
const completionTimeout = 5 * time.Second

// poolFilter says whether a pool is offered, for verbs that only make sense on some.
type poolFilter func(*gpupoolv1.GPUPoolProfile) bool

// completePools completes a verb's first argument, a pool's name, with the pools that
// keep pass (every pool when nil); no further argument is completed.
func (a *app) completePools(keep poolFilter) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.poolNames(cmd.Context(), toComplete, keep), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeSwitch completes `switch NAME LAYOUT`: the pools, then the named pool's layouts.
func (a *app) completeSwitch(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return a.poolNames(cmd.Context(), toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	case 1:
		return a.layouts(cmd.Context(), args[0], toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeLayoutFlag completes a --layout flag with the layouts of the pool named by the
// verb's first argument.
func (a *app) completeLayoutFlag(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.layouts(cmd.Context(), args[0], toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeZones completes --tz with IANA zone names.
func completeZones(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, z := range zoneNames() {
		if strings.HasPrefix(strings.ToLower(z), strings.ToLower(toComplete)) {
			out = append(out, z)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeContexts completes --context with the kubeconfig's contexts.
func (a *app) completeContexts(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	raw, err := a.config.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		cobra.CompDebugln("kubeconfig: "+err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for name := range raw.Contexts {
		if strings.HasPrefix(name, toComplete) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}

// poolNames lists the pools whose names start with prefix, described by their layout and
// Ready, such as "lab\tlayout day, Ready".
func (a *app) poolNames(ctx context.Context, prefix string, keep poolFilter) []cobra.Completion {
	ctx, cancel := completionContext(ctx)
	defer cancel()
	c, err := a.client()
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil
	}
	var pools gpupoolv1.GPUPoolProfileList
	if err := c.List(ctx, &pools); err != nil {
		cobra.CompDebugln("listing pools: "+err.Error(), false)
		return nil
	}
	var out []cobra.Completion
	for i := range pools.Items {
		p := &pools.Items[i]
		if !strings.HasPrefix(p.Name, prefix) || (keep != nil && !keep(p)) {
			continue
		}
		out = append(out, cobra.CompletionWithDesc(p.Name, poolSummary(p)))
	}
	return out
}

// poolSummary describes a pool in a completion: its layout and Ready.
func poolSummary(p *gpupoolv1.GPUPoolProfile) string {
	s := "layout " + or(p.Status.ActiveLayout, "(none yet)")
	if c := meta.FindStatusCondition(p.Status.Conditions, gpupoolv1.ConditionReady); c != nil {
		if c.Status == "True" {
			return s + ", Ready"
		}
		return s + ", " + c.Reason
	}
	return s
}

// layouts lists the named pool's layouts that start with prefix, described by their
// workers and whether active.
func (a *app) layouts(ctx context.Context, pool, prefix string) []cobra.Completion {
	ctx, cancel := completionContext(ctx)
	defer cancel()
	p, _, err := a.get(ctx, pool)
	if err != nil {
		cobra.CompDebugln("reading pool "+pool+": "+err.Error(), false)
		return nil
	}
	var out []cobra.Completion
	for _, l := range p.Spec.Layouts {
		if !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		desc := count(len(l.Workers), "worker")
		if c := l.Convert; c != nil {
			desc = fmt.Sprintf("%s of %s to %s", count(int(c.Count), "GPU"), c.Base, c.Profile)
		}
		if sel := l.Select; sel != nil {
			desc = selection(sel)
		}
		if l.Name == p.Status.ActiveLayout {
			desc += ", active"
		}
		out = append(out, cobra.CompletionWithDesc(l.Name, desc))
	}
	return out
}

func completionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, completionTimeout)
}

// Filters for the verbs that change one thing: resume offers the pools with an override,
// pause those not paused, unpause the paused ones.
// A switch or pause by GPUPoolRequest shows in the status (desiredReason Override, the
// Paused condition), which completion reads rather than listing the requests.
func hasOverride(p *gpupoolv1.GPUPoolProfile) bool {
	return p.Spec.Override != nil || p.Status.DesiredReason == gpupoolv1.DesiredByOverride
}
func isPaused(p *gpupoolv1.GPUPoolProfile) bool {
	return p.Spec.Paused || meta.IsStatusConditionTrue(p.Status.Conditions, gpupoolv1.ConditionPaused)
}
func notPaused(p *gpupoolv1.GPUPoolProfile) bool { return !isPaused(p) }

// zoneNames are the IANA zones --tz offers: the system's list of canonical zones
// (zone1970.tab, which Linux and macOS ship with their zoneinfo) when there is one, else
// a short list of common zones; UTC always. Any zone Go can load is accepted either way.
func zoneNames() []string {
	dirs := []string{"/usr/share/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo"}
	if d := os.Getenv("ZONEINFO"); d != "" {
		dirs = append([]string{d}, dirs...)
	}
	for _, dir := range dirs {
		if zones := readZoneTab(filepath.Join(dir, "zone1970.tab")); len(zones) > 0 {
			return append(zones, "UTC")
		}
	}
	return append(slices.Clone(commonZones), "UTC")
}

// readZoneTab reads the zone names (third column) of a zone1970.tab, sorted.
func readZoneTab(file string) []string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var zones []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, "\t"); len(f) >= 3 {
			zones = append(zones, f[2])
		}
	}
	slices.Sort(zones)
	return zones
}

// commonZones is the fallback list of --tz's completion (Windows has no zone1970.tab).
var commonZones = []string{
	"Africa/Cairo", "Africa/Johannesburg", "Africa/Lagos", "Africa/Nairobi",
	"America/Anchorage", "America/Bogota", "America/Chicago", "America/Denver", "America/Halifax",
	"America/Los_Angeles", "America/Mexico_City", "America/New_York", "America/Phoenix",
	"America/Sao_Paulo", "America/Toronto", "America/Vancouver",
	"Asia/Bangkok", "Asia/Dubai", "Asia/Hong_Kong", "Asia/Jakarta", "Asia/Jerusalem", "Asia/Kolkata",
	"Asia/Seoul", "Asia/Shanghai", "Asia/Singapore", "Asia/Taipei", "Asia/Tokyo",
	"Atlantic/Reykjavik", "Australia/Adelaide", "Australia/Brisbane", "Australia/Melbourne",
	"Australia/Perth", "Australia/Sydney",
	"Europe/Amsterdam", "Europe/Athens", "Europe/Berlin", "Europe/Brussels", "Europe/Dublin",
	"Europe/Helsinki", "Europe/Istanbul", "Europe/Lisbon", "Europe/London", "Europe/Madrid",
	"Europe/Moscow", "Europe/Paris", "Europe/Prague", "Europe/Rome", "Europe/Stockholm",
	"Europe/Vienna", "Europe/Warsaw", "Europe/Zurich",
	"Pacific/Auckland", "Pacific/Honolulu",
}

// registerCompletions wires the completion functions into the command tree: every verb
// whose first argument is a pool, switch's layout, plan's --layout, timeline's -f (YAML
// and JSON files), record's --file (traces), simulate's --candidate, --tz and --context.
func (a *app) registerCompletions(root *cobra.Command) {
	filters := map[string]poolFilter{"resume": hasOverride, "pause": notPaused, "unpause": isPaused}
	for _, cmd := range root.Commands() {
		if cmd.Flags().Lookup("candidate") != nil {
			mustRegister(cmd.MarkFlagFilename("candidate", "yaml", "yml", "json"))
		}
		if !strings.Contains(cmd.Use, "NAME") {
			continue
		}
		switch cmd.Name() {
		case "switch":
			cmd.ValidArgsFunction = a.completeSwitch
		default:
			cmd.ValidArgsFunction = a.completePools(filters[cmd.Name()])
		}
		if cmd.Flags().Lookup("layout") != nil {
			mustRegister(cmd.RegisterFlagCompletionFunc("layout", a.completeLayoutFlag))
		}
		if cmd.Flags().Lookup("svg") != nil {
			mustRegister(cmd.MarkFlagFilename("svg", "svg"))
		}
		if cmd.Flags().Lookup("filename") != nil {
			mustRegister(cmd.MarkFlagFilename("filename", "yaml", "yml", "json"))
		}
		if cmd.Flags().Lookup("file") != nil {
			mustRegister(cmd.MarkFlagFilename("file", "jsonl"))
		}
	}
	mustRegister(root.RegisterFlagCompletionFunc("tz", completeZones))
	mustRegister(root.RegisterFlagCompletionFunc("context", a.completeContexts))
}

// mustRegister panics on a registration error, which only a wrong flag name can cause.
func mustRegister(err error) {
	if err != nil {
		panic(fmt.Sprintf("registering a completion: %v", err))
	}
}
