package demandsim

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/testclock"
)

// TestDemandGuardRailsHoldOverRandomWorlds runs the decision over random worlds and
// policies and checks the guard rails at every switch demand starts or lets go.
func TestDemandGuardRailsHoldOverRandomWorlds(t *testing.T) {
	start, seeds := randomWeeks(t)
	demandSwitches := 0
	for seed := range int64(seeds) {
		rng := rand.New(rand.NewSource(seed))
		w := randomWorld(rng, start)
		pol := randomPolicy(rng)
		warn := time.Duration(rng.Intn(4)*5) * time.Minute
		spec := Spec("Europe/Berlin", pol)
		res, err := Run(w, spec, warn, true)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		demandSwitches += checkGuardRails(t, seed, spec, warn, res)
		checkDeterminism(t, seed, spec, res, rng)
	}
	// The worlds are made so that demand acts in many of them: a property test in which
	// demand never switched would prove nothing.
	if demandSwitches < seeds {
		t.Fatalf("demand started only %d switches over %d worlds; the worlds do not exercise it", demandSwitches, seeds)
	}
}

func randomWorld(rng *rand.Rand, start time.Time) *World {
	w := &World{Start: start, Span: 48 * time.Hour, Step: time.Minute, DayGPUs: 8 + rng.Intn(9), NightGPUs: 2 + rng.Intn(4),
		PhysicalGPUs: 4, SwitchTime: time.Duration(1+rng.Intn(20)) * time.Minute, Seed: rng.Int63()}
	// Inference moves in random steps every half hour.
	levels := make([]int, 4*24+1)
	for i := range levels {
		levels[i] = rng.Intn(w.DayGPUs + 1)
		if rng.Intn(3) == 0 {
			levels[i] = 0
		}
	}
	w.Inference = func(t time.Time) int { return levels[int(t.Sub(start)/(30*time.Minute))%len(levels)] }
	dnd := rng.Intn(4) == 0
	w.DoNotDisrupt = func(t time.Time) bool { return dnd && t.Sub(start).Hours() < 12 }
	for range 3 + rng.Intn(10) {
		w.Jobs = append(w.Jobs, Job{Arrival: start.Add(time.Duration(rng.Intn(48*60)) * time.Minute),
			GPUs: 1 + rng.Intn(3), Duration: time.Duration(5+rng.Intn(240)) * time.Minute})
	}
	slices.SortFunc(w.Jobs, func(a, b Job) int { return a.Arrival.Compare(b.Arrival) })
	return w
}

func randomPolicy(rng *rand.Rand) *gpupoolv1.DemandPolicy {
	minutes := func(n int) *metav1.Duration {
		return &metav1.Duration{Duration: time.Duration(rng.Intn(n)) * time.Minute}
	}
	p := &gpupoolv1.DemandPolicy{
		NamespaceSelector: &metav1.LabelSelector{},
		MinDwell:          minutes(120),
		Cooldown:          minutes(60),
		MaxSwitchesPerDay: ptr.To(int32(1 + rng.Intn(8))),
		MaxEvictions:      ptr.To(int32(rng.Intn(12))),
	}
	bring := gpupoolv1.DemandRule{Layout: Night, Action: gpupoolv1.DemandBringIn, MinGPUs: ptr.To(int32(1 + rng.Intn(3))), For: minutes(20), IdleFor: minutes(30)}
	if rng.Intn(2) == 0 {
		bring.Windows = []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}}
	}
	p.Rules = append(p.Rules, bring)
	if rng.Intn(2) == 0 {
		skip := gpupoolv1.DemandRule{Layout: Night, Action: gpupoolv1.DemandSkip, MinGPUs: ptr.To(int32(1 + rng.Intn(3))), For: minutes(20), IdleFor: minutes(30)}
		if rng.Intn(2) == 0 {
			skip.Windows = []gpupoolv1.DemandWindow{{Start: "0 20 * * 2", Duration: metav1.Duration{Duration: 12 * time.Hour}}}
		}
		p.Rules = append(p.Rules, skip)
	}
	return p
}

// checkGuardRails checks every switch of a run against the policy and returns how many
// demand started.
func checkGuardRails(t *testing.T, seed int64, spec *gpupoolv1.GPUPoolProfileSpec, warn time.Duration, res *Result) int {
	t.Helper()
	pol := spec.Demand
	dwell, cool := pol.MinDwell.Duration, pol.Cooldown.Duration
	byTime := map[time.Time]int{}
	for i, st := range res.Steps {
		byTime[st.At] = i
	}
	n := 0
	for i, sw := range res.Switches {
		step := res.Steps[byTime[sw.Start]]
		arrivedAt, arrivedBy := arrival(res.Switches[:i], step.Active)
		settled := step.InFlight == ""
		// Dwell: demand leaves no layout before minDwell; a layout demand brought in is
		// let go no earlier than minDwell after it arrived.
		if settled && !arrivedAt.IsZero() && sw.Start.Before(arrivedAt.Add(dwell)) &&
			(sw.Reason == gpupoolv1.DesiredByDemand || arrivedBy == gpupoolv1.DesiredByDemand) {
			t.Errorf("seed %d: switch %d to %s (%s) at %s leaves %s %s after it arrived (%s), before minDwell %s",
				seed, i, sw.To, sw.Reason, sw.Start, step.Active, sw.Start.Sub(arrivedAt), arrivedBy, dwell)
		}
		if sw.Reason != gpupoolv1.DesiredByDemand {
			continue
		}
		n++
		// Demand starts switches only from a settled pool.
		if !settled {
			t.Errorf("seed %d: demand switch %d to %s started while a switch to %s was in flight", seed, i, sw.To, step.InFlight)
		}
		// Budget and cooldown.
		started := 0
		for _, o := range res.Switches[:i] {
			if o.Start.After(sw.Start.Add(-24 * time.Hour)) {
				started++
			}
			if sw.Start.Before(o.Start.Add(cool)) {
				t.Errorf("seed %d: demand switch %d at %s within cooldown %s of the switch at %s", seed, i, sw.Start, cool, o.Start)
			}
		}
		if started >= int(*pol.MaxSwitchesPerDay) {
			t.Errorf("seed %d: demand switch %d at %s with %d switches in the last 24h (max %d)", seed, i, sw.Start, started, *pol.MaxSwitchesPerDay)
		}
		// Disruption.
		o := sw.Observed[sw.To]
		if len(o.DoNotDisrupt) > 0 || len(o.NearCompletion) > 0 || o.Evictions > int(*pol.MaxEvictions) {
			t.Errorf("seed %d: demand switch %d to %s disrupts beyond the limit: %+v (maxEvictions %d)", seed, i, sw.To, o, *pol.MaxEvictions)
		}
		// Threshold, held for `for`: every step in [start-for, start] saw enough demand.
		var r *gpupoolv1.DemandRule
		for k := range pol.Rules {
			if pol.Rules[k].Layout == sw.To && pol.Rules[k].Action == gpupoolv1.DemandBringIn {
				r = &pol.Rules[k]
			}
		}
		if r != nil {
			for _, st := range res.Steps {
				if !st.At.After(sw.Start) && !st.At.Before(sw.Start.Add(-r.For.Duration)) && st.Observed[sw.To].PendingGPUs < int64(*r.MinGPUs) {
					t.Errorf("seed %d: demand switch %d to %s at %s, but at %s only %d GPUs were pending (minGPUs %d for %s)",
						seed, i, sw.To, sw.Start, st.At, st.Observed[sw.To].PendingGPUs, *r.MinGPUs, r.For.Duration)
				}
			}
		}
		// Warned ahead: a switch that evicts was announced warnAhead before.
		if o.Evictions > 0 && warn > 0 {
			prev := res.Steps[byTime[sw.Start]].Input.Timers.Switch
			if prev == nil || prev.Layout != sw.To || sw.Start.Before(prev.Decided.Add(warn)) {
				t.Errorf("seed %d: demand switch %d to %s at %s evicts %d pods without a warning of %s (announced: %+v)", seed, i, sw.To, sw.Start, o.Evictions, warn, prev)
			}
		}
	}
	return n
}

func arrival(switches []Switch, layout string) (time.Time, gpupoolv1.DesiredReason) {
	var at time.Time
	var by gpupoolv1.DesiredReason
	for _, s := range switches {
		if s.To == layout && !s.End.IsZero() && s.End.After(at) {
			at, by = s.End, s.Reason
		}
	}
	return at, by
}

// checkDeterminism asks Decide again, with the switches in another order, at some steps:
// the answer is the same.
func checkDeterminism(t *testing.T, seed int64, spec *gpupoolv1.GPUPoolProfileSpec, res *Result, rng *rand.Rand) {
	t.Helper()
	for range 20 {
		st := res.Steps[rng.Intn(len(res.Steps))]
		in := *st.Input
		in.Switches = slices.Clone(in.Switches)
		rng.Shuffle(len(in.Switches), func(i, j int) { in.Switches[i], in.Switches[j] = in.Switches[j], in.Switches[i] })
		again, err := plan.Decide(spec, st.At, &in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, st.Decision) {
			t.Errorf("seed %d at %s: Decide answered differently for the same input:\n%+v\n%+v", seed, st.At, again, st.Decision)
		}
	}
}

// randomWeeks is where the property tests' random weeks start (a Monday 00:00 in
// Europe/Berlin on the test clock) and how many seeds they run (fewer with -short).
func randomWeeks(t *testing.T) (time.Time, int) {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		return testclock.Weekly(time.Monday, 0, 0, loc), 20
	}
	return testclock.Weekly(time.Monday, 0, 0, loc), 80
}
