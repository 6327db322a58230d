package demandsim

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestCountFromDemandHoldsOverRandomWorlds runs the count model (night sized by
// countFromDemand) over random worlds and policies and checks the count's guard rails:
// the count changes only by a transition DecideCount asked for, stays within [min, max],
// and no step evicts more than maxEvictions or starts within the cooldown of another
// transition.
func TestCountFromDemandHoldsOverRandomWorlds(t *testing.T) {
	start, seeds := randomWeeks(t)
	var up, down int
	for seed := range int64(seeds) {
		rng := rand.New(rand.NewSource(seed))
		w := randomWorld(rng, start)
		w.PhysicalGPUs = 2 + rng.Intn(4)
		w.DayGPUs = w.PhysicalGPUs * (2 + rng.Intn(3))
		// More training than randomWorld's, so that the count has reasons to step up.
		for range 3 + rng.Intn(10) {
			w.Jobs = append(w.Jobs, Job{Arrival: start.Add(time.Duration(rng.Intn(48*60)) * time.Minute),
				GPUs: 1 + rng.Intn(2), Duration: time.Duration(5+rng.Intn(240)) * time.Minute})
		}
		slices.SortFunc(w.Jobs, func(a, b Job) int { return a.Arrival.Compare(b.Arrival) })
		pol := randomPolicy(rng)
		lo := 1 + rng.Intn(w.PhysicalGPUs)
		pol.Rules[0].CountFromDemand = &gpupoolv1.CountFromDemand{Min: int32(lo), Max: int32(lo + rng.Intn(w.PhysicalGPUs-lo+1))} //nolint:gosec // a few GPUs
		warn := time.Duration(rng.Intn(4)*5) * time.Minute
		spec := CountSpec("Europe/Berlin", w, pol)
		res, err := RunCount(w, spec, warn, true)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		u, d := checkCountRails(t, seed, spec, res)
		up, down = up+u, down+d
		checkCountDeterminism(t, seed, spec, res, rng)
	}
	// A property test in which the count never stepped would prove nothing.
	if up < seeds/4 || down < seeds/4 {
		t.Fatalf("demand stepped the count up %d and down %d times over %d worlds; the worlds do not exercise it", up, down, seeds)
	}
	t.Logf("%d steps up, %d down over %d worlds", up, down, seeds)
}

// isStep: a transition of a settled night to night with another count (a switch to
// night that supersedes one to day in flight is no step: it is the schedule's or
// demand's switch).
func isStep(sw Switch, at Step) bool { return sw.From == Night && sw.To == Night && at.InFlight == "" }

// checkCountRails checks every transition of a count run and returns how many were
// steps up and down.
func checkCountRails(t *testing.T, seed int64, spec *gpupoolv1.GPUPoolProfileSpec, res *Result) (up, down int) {
	t.Helper()
	pol := spec.Demand
	cf := pol.Rules[0].CountFromDemand
	lo, hi := int(cf.Min), int(cf.Max)
	windowed := len(pol.Rules[0].Windows) > 0
	byTime := map[time.Time]int{}
	for i, st := range res.Steps {
		byTime[st.At] = i
	}
	started := map[time.Time]Switch{}
	for i, sw := range res.Switches {
		started[sw.Start] = sw
		st := res.Steps[byTime[sw.Start]]
		step := isStep(sw, st)
		if sw.To == Night {
			// Said by DecideCount: the count it answered at that instant.
			if st.Count == nil || st.CountDecision.Count != sw.ToCount {
				t.Errorf("seed %d: transition %d to night with %d GPUs at %s, but DecideCount answered %+v", seed, i, sw.ToCount, sw.Start, st.CountDecision)
			}
			// Within [min, max]; a layout brought in while the rule's windows are
			// closed gets convert.count instead.
			if (sw.ToCount < lo || sw.ToCount > hi) && (step || !windowed || sw.ToCount != int(spec.Layouts[1].Convert.Count)) {
				t.Errorf("seed %d: transition %d to night with %d GPUs at %s, outside [%d, %d]", seed, i, sw.ToCount, sw.Start, lo, hi)
			}
		}
		if !step && sw.Reason != gpupoolv1.DesiredByDemand {
			continue // the schedule's switches are bound by no guard rail
		}
		switch {
		case step && sw.ToCount > st.ActiveCount:
			up++
		case step && sw.ToCount < st.ActiveCount:
			down++
		case step:
			t.Errorf("seed %d: step %d at %s from %d to the same count", seed, i, sw.Start, st.ActiveCount)
		}
		if sw.To == Night && sw.Evictions > int(*pol.MaxEvictions) {
			t.Errorf("seed %d: transition %d (%s) at %s from %d to %d GPUs evicts %d (maxEvictions %d)", seed, i, sw.Reason, sw.Start, sw.FromCount, sw.ToCount, sw.Evictions, *pol.MaxEvictions)
		}
		for _, o := range res.Switches[:i] {
			if sw.Start.Before(o.Start.Add(pol.Cooldown.Duration)) {
				t.Errorf("seed %d: transition %d at %s within cooldown %s of the one at %s", seed, i, sw.Start, pol.Cooldown.Duration, o.Start)
			}
		}
	}
	checkCountChanges(t, seed, res, started)
	return up, down
}

// checkCountChanges: the count in effect changes only when a transition to it ends, and
// every count DecideCount asked of a settled night started a transition.
func checkCountChanges(t *testing.T, seed int64, res *Result, started map[time.Time]Switch) {
	t.Helper()
	ended := map[time.Time]Switch{}
	for _, sw := range res.Switches {
		if !sw.End.IsZero() {
			ended[sw.End] = sw
		}
	}
	for i, st := range res.Steps {
		if i > 0 && st.ActiveCount != res.Steps[i-1].ActiveCount {
			if sw, ok := ended[st.At]; !ok || sw.ToCount != st.ActiveCount {
				t.Errorf("seed %d: the count went from %d to %d at %s without a transition to it", seed, res.Steps[i-1].ActiveCount, st.ActiveCount, st.At)
			}
		}
		settledNight := st.InFlight == "" && st.Active == Night
		if settledNight && st.Observed[Night].RunningGPUs > int64(st.ActiveCount) {
			t.Errorf("seed %d: %d training GPUs run on %d converted at %s", seed, st.Observed[Night].RunningGPUs, st.ActiveCount, st.At)
		}
		if settledNight && st.Decision.Layout == Night && st.CountDecision.Count != st.ActiveCount {
			if sw, ok := started[st.At]; !ok || sw.ToCount != st.CountDecision.Count {
				t.Errorf("seed %d: DecideCount asked for %d GPUs at %s, but no step to it started", seed, st.CountDecision.Count, st.At)
			}
		}
	}
}

// checkCountDeterminism asks DecideCount again at some steps: the answer is the same (and
// so the step's record is what DecideCount said).
func checkCountDeterminism(t *testing.T, seed int64, spec *gpupoolv1.GPUPoolProfileSpec, res *Result, rng *rand.Rand) {
	t.Helper()
	for range 40 {
		st := res.Steps[rng.Intn(len(res.Steps))]
		if st.Count == nil {
			continue
		}
		again, err := plan.DecideCount(spec, st.At, *st.Count)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, st.CountDecision) {
			t.Errorf("seed %d at %s: DecideCount answered differently for the same input:\n%+v\n%+v", seed, st.At, again, st.CountDecision)
		}
	}
}
