// Command bench-demand runs a synthetic week of a day/night pool through the pure demand
// decision (plan.Decide, via test/demandsim), following the schedule alone, with demand,
// and with demand sizing night by count (plan.DecideCount: night is day with some of its
// physical GPUs converted to 16Q), over several seeds, and prints what each offered and
// what the work waited.
//
//	go run ./hack/bench-demand -seeds 20
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/demandsim"
)

// countPolicy is demandPolicy with night's count following demand: between 1 and all 4
// physical GPUs converted; maxEvictions > 0 replaces demandPolicy's 8.
func countPolicy(maxEvictions int32) *gpupoolv1.DemandPolicy {
	p := demandsim.BenchPolicy()
	p.Rules[0].CountFromDemand = &gpupoolv1.CountFromDemand{Min: 1, Max: 4}
	if maxEvictions > 0 {
		p.MaxEvictions = ptr.To(maxEvictions)
	}
	return p
}

// policy is a row of the table: how to run a week under it.
type policy struct {
	name string
	run  func(w *demandsim.World) (*demandsim.Result, error)
}

func policies(zone string, warn time.Duration) []policy {
	byLayout := func(demand *gpupoolv1.DemandPolicy) func(w *demandsim.World) (*demandsim.Result, error) {
		return func(w *demandsim.World) (*demandsim.Result, error) {
			return demandsim.Run(w, demandsim.Spec(zone, demand), warn, false)
		}
	}
	byCount := func(maxEvictions int32) func(w *demandsim.World) (*demandsim.Result, error) {
		return func(w *demandsim.World) (*demandsim.Result, error) {
			return demandsim.RunCount(w, demandsim.CountSpec(zone, w, countPolicy(maxEvictions)), warn, false)
		}
	}
	return []policy{
		{"schedule only", byLayout(nil)},
		{"schedule + demand", byLayout(demandsim.BenchPolicy())},
		// All or nothing held to 3 evictions a switch, as the count's last row is:
		// what the limit costs without the count.
		{"schedule + demand, maxEvictions 3", byLayout(demandsim.HeldTo(demandsim.BenchPolicy(), 3))},
		{"schedule + countFromDemand", byCount(0)},
		// The count held to 3 evictions a step: a step then converts only GPUs that
		// few pods run on, and waits for the others to empty.
		{"schedule + countFromDemand, maxEvictions 3", byCount(3)},
	}
}

type row struct {
	queued, idle, mean, p50, p95      float64
	switches, evictions, unstarted, n float64
}

func main() {
	seeds := flag.Int("seeds", 20, "how many synthetic weeks to average over")
	flag.Parse()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		fail(err)
	}
	// A Monday 00:00; the simulated week has no DST change.
	start := time.Date(2026, time.November, 30, 0, 0, 0, 0, loc)
	fmt.Printf("Synthetic week (inference 08:00-18:00 on weekdays on 16 x 4Q, 2-4 training jobs a weekday and 0-1 a weekend day, of 1-2 GPUs for 1-4 h on 4 x 16Q, arriving 08:00-20:00;\n")
	fmt.Printf("switch 6 min, warnAhead 10 min; countFromDemand: night is day with 1-4 of the 4 physical GPUs converted to 16Q, the others serving 4 x 4Q each,\n")
	fmt.Printf("a step of the count counts as a switch; inference pods on random free 4Q nodes, a step converting the GPUs fewest pods run on), mean over %d seeds:\n\n", *seeds)
	fmt.Println("| policy | queued GPU-h | training wait mean | training wait p50 | training wait p95 | idle GPU-h | switches | evictions | jobs never started |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, p := range policies("Europe/Berlin", 10*time.Minute) {
		var r row
		for seed := range int64(*seeds) {
			res, err := p.run(demandsim.Week(start, seed))
			if err != nil {
				fail(err)
			}
			r.queued += res.QueuedGPUHours
			r.idle += res.IdleGPUHours
			r.mean += res.MeanWait().Minutes()
			r.p50 += res.P50Wait().Minutes()
			r.p95 += res.P95Wait().Minutes()
			r.switches += float64(len(res.Switches))
			r.evictions += float64(res.Evictions)
			r.unstarted += float64(res.Unstarted)
			r.n++
		}
		fmt.Printf("| %s | %.1f | %.0f min | %.0f min | %.0f min | %.1f | %.1f | %.1f | %.1f |\n", p.name,
			r.queued/r.n, r.mean/r.n, r.p50/r.n, r.p95/r.n, r.idle/r.n, r.switches/r.n, r.evictions/r.n, r.unstarted/r.n)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-demand:", err)
	os.Exit(1)
}
