package localenv

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// FormatBench renders results as the benchmark's table.
func FormatBench(rs []*BenchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-5s %-8s %-10s %-10s %-7s %-10s %-10s %-7s %-12s %-10s %-12s %-9s %-11s %-8s\n",
		"hosts", "GPUs", "changed", "day>night", "night>day", "bound", "ratio d>n", "ratio n>d", "evict/", "calls per", "reconciles", "reconcile", "RSS peak", "idle CPU", "sequential")
	fmt.Fprintf(&b, "%-6s %-5s %-8s %-10s %-10s %-7s %-10s %-10s %-7s %-12s %-10s %-12s %-9s %-11s %-8s\n",
		"", "", "VMs", "", "", "", "", "", "pod", "changed VM", "", "p50/p99", "MiB", "% core", "/ gpupool")
	for _, r := range rs {
		seq := "-"
		if r.Sequential > 0 {
			seq = fmt.Sprintf("%.1fx", r.Sequential.Seconds()/r.DayToNight.Seconds())
		}
		fmt.Fprintf(&b, "%-6d %-5d %-8d %-10s %-10s %-7s %-10.2f %-10.2f %-7.2f %-12.2f %-10d %-12s %-9.0f %-11s %-8s\n",
			r.Hosts, r.Hosts*r.GPUs, r.ChangedVMs, r.DayToNight.Round(100*time.Millisecond), r.NightToDay.Round(100*time.Millisecond),
			r.BoundDayToNight.Round(100*time.Millisecond), r.DayToNight.Seconds()/r.BoundDayToNight.Seconds(), r.NightToDay.Seconds()/r.BoundNightToDay.Seconds(),
			r.EvictionsPerPod, r.CallsPerChangedVM, r.Reconciles, fmt.Sprintf("%s/%s", reconcileQuantile(r.ReconcileP50), reconcileQuantile(r.ReconcileP99)), r.RSSPeakMiB, fmt.Sprintf("%.2f/%.2f", r.IdleCPUPercent, r.IdleCPUPercentLater), seq)
	}
	b.WriteString("(idle CPU: the manager's over --idle from the end of night -> day, while the cluster still settles the switch / over the --idle after that)\n")
	for _, r := range rs {
		if len(r.CallsByMethod) > 0 {
			fmt.Fprintf(&b, "vCenter calls during the switches at %d hosts: %s\n", r.Hosts, callsByMethod(r.CallsByMethod))
		}
	}
	for _, r := range rs {
		if r.SequentialHosts > 0 {
			fmt.Fprintf(&b, "sequential script at %d hosts: measured %s on %d host(s), extrapolated to %s\n",
				r.Hosts, r.SequentialMeasured.Round(100*time.Millisecond), r.SequentialHosts, r.Sequential.Round(time.Second))
		}
	}
	return b.String()
}

// FormatReactions renders gpupool's reaction times and the critical-path breakdowns.
func FormatReactions(rs []*BenchResult) string {
	var b strings.Builder
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(&b, "%-6s %-18s %-6s %-10s %-10s %-10s\n", "hosts", "reaction", "n", "p50", "p99", "max")
	for _, r := range rs {
		for _, k := range reactionKinds {
			if p, ok := r.Reactions[k]; ok {
				fmt.Fprintf(&b, "%-6d %-18s %-6d %-10s %-10s %-10s\n", r.Hosts, k, p.N, ms(p.P50), ms(p.P99), ms(p.Max))
			}
		}
	}
	fmt.Fprintf(&b, "%-6s %-10s %-10s %-10s %-10s %-10s\n", "hosts", "switch", "makespan", "vSphere", "Kubernetes", "gpupool")
	for _, r := range rs {
		for _, sw := range []struct {
			name string
			took time.Duration
			b    Breakdown
		}{{"day>night", r.DayToNight, r.BreakdownDayToNight}, {"night>day", r.NightToDay, r.BreakdownNightToDay}} {
			fmt.Fprintf(&b, "%-6d %-10s %-10s %-10s %-10s %-10s\n", r.Hosts, sw.name, sw.took.Round(100*time.Millisecond),
				sw.b.VSphere.Round(100*time.Millisecond), sw.b.Kubernetes.Round(100*time.Millisecond), sw.b.Gpupool.Round(100*time.Millisecond))
		}
	}
	b.WriteString("(critical path: the last node of the new layout back to the switch's start; the rest of a makespan is waiting no step of that path explains)\n")
	return b.String()
}

// callsByMethod lists calls by method, most first.
func callsByMethod(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// passPhases is the order of a pass's phases (controllers/phases.go) and of act's parts
// (controllers/act.go), for the table.
var passPhases = []string{"desire", "paused", "observe", "observe:vcenter", "observe:cluster", "observe:account", "tasks", "keep-aborted", "decide", "settled", "act",
	"act:cordon", "act:evict", "act:node-steps", "act:park", "act:steps", "act:start", "act:states", "status"}

// reconcileQuantile prints a quantile of controller-runtime's reconcile histogram, whose
// last bucket is 60 s: beyond it the quantile is not known (histogram.quantile's -1).
func reconcileQuantile(d time.Duration) string {
	if d < 0 {
		return ">60s"
	}
	return d.String()
}

// FormatPhases renders where the passes spent their time during the switches: per phase,
// how often it ran, its p50/p99 and its total, and its share of all the phases' time (a
// part of a phase, "act:cordon", its share of that phase's; observe's parts are timed
// in decide's second read too, so theirs can pass 100 %).
func FormatPhases(rs []*BenchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-15s %-7s %-10s %-10s %-10s %-6s\n", "hosts", "phase", "n", "p50", "p99", "total", "share")
	q := func(d time.Duration) string {
		if d < 0 {
			return ">65s"
		}
		return d.String()
	}
	for _, r := range rs {
		var all time.Duration
		for name, p := range r.Phases {
			if !strings.Contains(name, ":") {
				all += p.Total
			}
		}
		for _, name := range phaseOrder(r.Phases) {
			p, whole := r.Phases[name], all
			if parent, _, part := strings.Cut(name, ":"); part {
				whole = r.Phases[parent].Total
			}
			fmt.Fprintf(&b, "%-6d %-15s %-7d %-10s %-10s %-10s %5.1f%%\n", r.Hosts, name, p.N, q(p.P50), q(p.P99),
				p.Total.Round(10*time.Millisecond), 100*p.Total.Seconds()/max(whole.Seconds(), 1e-9))
		}
	}
	for _, r := range rs {
		for _, name := range []string{"parks", "drains", "mark", "queue", "ask"} {
			if p, ok := r.StartStages[name]; ok {
				fmt.Fprintf(&b, "%-6d %-15s %-7d %-10s %-10s %-10s %6s\n", r.Hosts, "start:"+name, p.N, q(p.P50), q(p.P99),
					p.Total.Round(10*time.Millisecond), "-")
			}
		}
	}
	b.WriteString("(p50/p99 at the histogram's bucket resolution, powers of two from 1 ms; start: the task starts asked past\n" +
		"the passes, per start: parks, a power-on ahead waiting for its host's parks; drains, a suspend after drains\n" +
		"waiting for the drained nodes' pods to go; mark, a suspend's node marked parked;\n" +
		"queue, for its turn; ask, vCenter's answer)\n")
	return b.String()
}

// phaseOrder lists the phases that ran in pass order, then any other name sorted.
func phaseOrder(m map[string]PhaseStat) []string {
	var out []string
	for _, p := range passPhases {
		if _, ok := m[p]; ok {
			out = append(out, p)
		}
	}
	var rest []string
	for p := range m {
		if !slices.Contains(passPhases, p) {
			rest = append(rest, p)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// benchJSON is one size's figures for a CI job to track; durations in seconds.
type benchJSON struct {
	Hosts           int                           `json:"hosts"`
	GPUs            int                           `json:"gpus"`
	ChangedVMs      int                           `json:"changedVMs"`
	Makespans       map[string]float64            `json:"makespanSeconds"`
	Bounds          map[string]float64            `json:"boundSeconds"`
	Ratios          map[string]float64            `json:"ratios"`
	Reactions       map[string]map[string]float64 `json:"reactionSeconds"`
	Breakdown       map[string]map[string]float64 `json:"criticalPathSeconds"`
	Reconcile       map[string]float64            `json:"reconcileSeconds"`
	RSSPeakMiB      float64                       `json:"rssPeakMiB"`
	IdleCPUPercent  float64                       `json:"idleCPUPercentOfCore"`
	IdleCPULater    float64                       `json:"idleCPUPercentOfCoreLater"`
	ScriptRatio     float64                       `json:"sequentialScriptOverGpupool,omitempty"`
	PassPhases      map[string]map[string]float64 `json:"passPhaseSeconds,omitempty"`
	StartStages     map[string]map[string]float64 `json:"startStageSeconds,omitempty"`
	NodeLease       float64                       `json:"nodeLeaseSeconds"`
	ControlPlaneQPS int                           `json:"controlPlaneQPS,omitempty"`
	Floor           map[string]float64            `json:"environmentAloneSeconds,omitempty"`
	CPUSeconds      map[string]float64            `json:"cpuSecondsDuringSwitches,omitempty"`
}

// WriteBenchJSON writes the results to path as a JSON list, one object per size.
func WriteBenchJSON(path string, rs []*BenchResult) error {
	out := make([]benchJSON, 0, len(rs))
	for _, r := range rs {
		j := benchJSON{Hosts: r.Hosts, GPUs: r.Hosts * r.GPUs, ChangedVMs: r.ChangedVMs,
			NodeLease: r.NodeLease.Seconds(), ControlPlaneQPS: r.ControlPlaneQPS, CPUSeconds: r.CPUSeconds, Floor: floorJSONOf(r),
			Makespans: map[string]float64{"dayToNight": r.DayToNight.Seconds(), "nightToDay": r.NightToDay.Seconds()},
			Bounds:    map[string]float64{"dayToNight": r.BoundDayToNight.Seconds(), "nightToDay": r.BoundNightToDay.Seconds()},
			Ratios: map[string]float64{"dayToNight": r.DayToNight.Seconds() / r.BoundDayToNight.Seconds(),
				"nightToDay": r.NightToDay.Seconds() / r.BoundNightToDay.Seconds()},
			Reactions:  map[string]map[string]float64{},
			Breakdown:  map[string]map[string]float64{"dayToNight": breakdownJSON(r.BreakdownDayToNight), "nightToDay": breakdownJSON(r.BreakdownNightToDay)},
			Reconcile:  map[string]float64{"p50": r.ReconcileP50.Seconds(), "p99": r.ReconcileP99.Seconds(), "count": float64(r.Reconciles)},
			RSSPeakMiB: r.RSSPeakMiB, IdleCPUPercent: r.IdleCPUPercent, IdleCPULater: r.IdleCPUPercentLater}
		for k, p := range r.Reactions {
			j.Reactions[k] = map[string]float64{"n": float64(p.N), "p50": p.P50.Seconds(), "p99": p.P99.Seconds(), "max": p.Max.Seconds()}
		}
		for k, p := range r.Phases {
			if j.PassPhases == nil {
				j.PassPhases = map[string]map[string]float64{}
			}
			j.PassPhases[k] = map[string]float64{"n": float64(p.N), "p50": p.P50.Seconds(), "p99": p.P99.Seconds(), "total": p.Total.Seconds()}
		}
		for k, p := range r.StartStages {
			if j.StartStages == nil {
				j.StartStages = map[string]map[string]float64{}
			}
			j.StartStages[k] = map[string]float64{"n": float64(p.N), "p50": p.P50.Seconds(), "p99": p.P99.Seconds(), "total": p.Total.Seconds()}
		}
		if r.Sequential > 0 {
			j.ScriptRatio = r.Sequential.Seconds() / r.DayToNight.Seconds()
		}
		out = append(out, j)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func breakdownJSON(b Breakdown) map[string]float64 {
	return map[string]float64{"vsphere": b.VSphere.Seconds(), "kubernetes": b.Kubernetes.Seconds(), "gpupool": b.Gpupool.Seconds()}
}

// floorJSON is the floor as JSON, nil when it was not measured.
func floorJSON(f Floor) map[string]float64 {
	if f.N == 0 {
		return nil
	}
	return map[string]float64{"nodes": float64(f.N), "nodePatches": f.NodePatches.Seconds(), "cordons": f.Cordons.Seconds(), "evictionsGone": f.EvictionsOut.Seconds(),
		"suspendsAsked": f.Suspends.Seconds(), "powerOnsAsked": f.PowerOns.Seconds(), "inventoryRead": f.InventoryRead.Seconds()}
}

// floorJSONOf is the floor of r as JSON, with the switch floor it makes.
func floorJSONOf(r *BenchResult) map[string]float64 {
	out := floorJSON(r.Floor)
	if out != nil {
		out["dayToNightFloor"] = r.SwitchFloor().Seconds()
	}
	return out
}
