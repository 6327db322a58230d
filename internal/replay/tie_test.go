package replay_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
	"github.com/gpupool/gpupool/internal/webhook"
	"github.com/gpupool/gpupool/test/demandsim"
)

// row is a bench-demand table row: the means over the seeds.
type row struct {
	queued, idle, mean, p50, p95, switches, evictions, unstarted float64
}

func (r *row) add(queued, idle float64, mean, p50, p95 time.Duration, switches, evictions, unstarted int) {
	r.queued += queued
	r.idle += idle
	r.mean += mean.Minutes()
	r.p50 += p50.Minutes()
	r.p95 += p95.Minutes()
	r.switches += float64(switches)
	r.evictions += float64(evictions)
	r.unstarted += float64(unstarted)
}

// TestWeekReplayedGivesTheBench: make bench-demand's synthetic weeks, recorded as a trace
// (demandsim.World.Trace, written and read back) and replayed under the same specs, give
// the bench's table within 1 % in every column, for each policy the replay can run
// (layouts named by their workers; not countFromDemand). The replay and demandsim are
// two models of the cluster around one decision: they agree where they model the same.
func TestWeekReplayedGivesTheBench(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, time.November, 30, 0, 0, 0, 0, loc)
	seeds := int64(20)
	if testing.Short() {
		seeds = 4
	}
	const warn = 10 * time.Minute
	for _, pol := range []struct {
		name   string
		demand func() *gpupoolv1.DemandPolicy
	}{
		{"schedule only", func() *gpupoolv1.DemandPolicy { return nil }},
		{"schedule + demand", demandsim.BenchPolicy},
		{"schedule + demand, maxEvictions 3", func() *gpupoolv1.DemandPolicy { return demandsim.HeldTo(demandsim.BenchPolicy(), 3) }},
	} {
		t.Run(pol.name, func(t *testing.T) {
			t.Parallel()
			var bench, replayed row
			for seed := range seeds {
				w := demandsim.Week(start, seed)
				// The pool as a manifest names it: the replay takes the layouts'
				// capacities from its workers, the bench from the world.
				pool := demandsim.WeekPool("week", "Europe/Berlin", w, pol.demand())
				spec := &pool.Spec
				spec.Schedule.WarnAhead = &metav1.Duration{Duration: warn}
				if errs := webhook.ValidateSpec(spec); len(errs) > 0 {
					t.Fatalf("the week's pool is not admitted: %v", errs)
				}
				want, err := demandsim.Run(w, spec, warn, false)
				if err != nil {
					t.Fatal(err)
				}
				bench.add(want.QueuedGPUHours, want.IdleGPUHours, want.MeanWait(), want.P50Wait(), want.P95Wait(), len(want.Switches), want.Evictions, want.Unstarted)
				tr, err := w.Trace("week", spec, want)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := trace.Write(&buf, tr); err != nil {
					t.Fatal(err)
				}
				back, err := trace.Read(&buf)
				if err != nil {
					t.Fatal(err)
				}
				back.Header.Capacity = nil
				got, err := replay.Run(back, &back.Header.Spec, replay.Options{Step: w.Step})
				if err != nil {
					t.Fatal(err)
				}
				if got.SwitchTimes[demandsim.Night] != w.SwitchTime && len(want.Switches) > 0 {
					t.Errorf("seed %d: switch time learned %s, want the world's %s", seed, got.SwitchTimes[demandsim.Night], w.SwitchTime)
				}
				replayed.add(got.QueuedGPUHours, got.IdleGPUHours, got.MeanWait(), got.P50Wait(), got.P95Wait(), len(got.Switches), got.Evictions, got.Unstarted)
			}
			for _, c := range []struct {
				name        string
				bench, repl float64
			}{
				{"queued GPU-h", bench.queued, replayed.queued}, {"idle GPU-h", bench.idle, replayed.idle},
				{"wait mean", bench.mean, replayed.mean}, {"wait p50", bench.p50, replayed.p50}, {"wait p95", bench.p95, replayed.p95},
				{"switches", bench.switches, replayed.switches}, {"evictions", bench.evictions, replayed.evictions},
				{"never started", bench.unstarted, replayed.unstarted},
			} {
				if math.Abs(c.bench-c.repl) > 0.01*math.Abs(c.bench)+1e-9 {
					t.Errorf("%s: bench %.3f, replayed %.3f (sums over %d seeds): more than 1 %% apart", c.name, c.bench, c.repl, seeds)
				}
			}
			t.Logf("sums over %d seeds: bench %+v; replayed %+v", seeds, bench, replayed)
		})
	}
}

// BenchmarkReplayWeek: one synthetic week (73 pods) replayed at the default step, 60,480
// decisions: what one row of kubectl gpupool simulate costs.
func BenchmarkReplayWeek(b *testing.B) {
	start := time.Date(2026, time.November, 30, 0, 0, 0, 0, time.UTC)
	w := demandsim.Week(start, 1)
	pool := demandsim.WeekPool("week", "Europe/Berlin", w, demandsim.BenchPolicy())
	tr, err := w.Trace("week", &pool.Spec, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := replay.Run(tr, &pool.Spec, replay.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
